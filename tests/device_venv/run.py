"""`make test-device`: the runtime tests in device venvs, at the lowest and highest versions allowed.

    .venv/bin/python tests/device_venv/run.py [--cache DIR] [--only low|high] [--keep-going]

A device installs edge-sdk with one runtime extra and no conversion stack, often beside OpenCV
(which needs numpy 2). This check builds two such venvs on this machine (Python of the dev venv):

- ``high``: ``edge-sdk[litert,onnxruntime,openvino]`` at the HIGHEST versions the ranges allow,
  plus ``numpy>=2`` and ``opencv-python-headless``. The set is resolved by ``edge-sdk freeze``
  (hashed lock, wheels only) and installed from that lock with ``--require-hashes``, so the
  freeze command is exercised end to end.
- ``low``: every requirement of the core and of the three runtime extras pinned to its floor
  (``>=X`` -> ``==X``; see ``LOW_OVERRIDES_BY_PYTHON`` for the floors without a wheel for this Python).
- ``low-numpy2``: the same floors with numpy 2.0.0 (the floors are chosen so that this works:
  onnxruntime 1.17.0/1.18.0 fail to import under numpy 2).

Each venv is cached under ``~/.cache/edge-sdk-device-venv/<name>-<sha256 of its requirement
set>`` (``EDGE_SDK_DEVICE_VENV_CACHE`` or ``--cache``), outside the clone; only the edge-sdk
wheel of the working tree is reinstalled each run. ``pip check`` must be clean; neither venv may
contain TensorFlow, onnx or any other part of the conversion stack. pip reaches the package index
here (CI time) to resolve and install, never at product run time.

The runtime tests (``TEST_FILES``) need tiny models that are built with onnx and TensorFlow; they
are built first in the dev venv (cached by the hash of their builders) and carried in by
``plugin.py``, which also refuses to run if edge_sdk is imported from the checkout. Tests that
need the conversion stack itself are deselected by name in ``DESELECT`` with the reason.
Any failure: exit 1. Timings go to stdout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RECIPE_VERSION = 1
RUNTIME_EXTRAS = ("litert", "onnxruntime", "openvino")
HIGH_WITH = ("numpy>=2", "opencv-python-headless", "pytest>=8")
#: The third set: the runtime floors with the first numpy 2 (old runtime wheels built against numpy 1
#: import under numpy 2 only if they were built for it; their metadata does not say).
LOWEST_NUMPY2 = "2.0.0"
#: Floors with no wheel for the Python this runs on: the lowest release that has one (said here, not hidden).
LOW_OVERRIDES_BY_PYTHON = {
    "3.11": {"pillow": "9.3.0"},  # Pillow 9.0-9.2 have no CPython 3.11 wheels (9.3.0 is the first)
    "3.12": {"pillow": "10.1.0", "numpy": "1.26.0", "click": "8.1.0"},
}
LOW_TEST_TOOLS = ("pytest==8.0.0",)
TEST_FILES = (
    "tests/test_runtime_facade.py", "tests/test_runtime_inputs.py", "tests/test_runtime_litert.py",
    "tests/test_runtime_no_tf.py", "tests/test_runtime_cli.py", "tests/test_app_detect.py",
    "tests/test_app_frames.py", "tests/test_app_pipeline.py", "tests/test_app_results.py",
    "tests/test_preprocess.py",
)
#: node id -> why it cannot run in a device venv
DESELECT: dict[str, str] = {
    "tests/test_runtime_litert.py::test_probe_and_runner_agree_on_the_tensorflow_last_resort":
        "needs TensorFlow installed (the tensorflow.lite last resort)",
    "tests/test_app_pipeline.py::test_camera_example_runs_offline":
        "examples/camera_app.py builds its stand-in detector with onnx when given no artifact",
}
DETECTOR_SIZES = (64, 128)
ARTIFACT_BUILDERS = ("tests/rt_artifacts.py", "examples/detector_model.py", "edge_sdk/manifest.py",
                     "edge_sdk/_version.py", "tests/device_venv/run.py")


def log(msg: str) -> None:
    print(f"[device-venv] {msg}", flush=True)


def sh(cmd: list[str], *, what: str, timeout: int = 1800, env: dict | None = None, cwd: Path | None = None,
       capture: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=capture, text=True, timeout=timeout, env=env, cwd=cwd)
    if proc.returncode != 0:
        out = ((proc.stdout or "") + (proc.stderr or ""))[-4000:] if capture else ""
        raise SystemExit(f"[device-venv] FAILED: {what} (exit {proc.returncode})\n$ {' '.join(cmd)}\n{out}")
    return proc


def digest(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------- requirement sets
def high_lock() -> str:
    """The hashed lock for the high venv, from `edge-sdk freeze` (this machine's Python and platform)."""
    cmd = [str(Path(sys.executable).parent / "edge-sdk"), "freeze"]
    for e in RUNTIME_EXTRAS:
        cmd += ["--extra", e]
    for w in HIGH_WITH:
        cmd += ["--with", w]
    text = sh(cmd, what="edge-sdk freeze for the high venv", timeout=900).stdout
    # the first lines carry the edge-sdk version and pip's: keep only the pins in the cache key
    return text


def low_requirements(numpy: str | None = None) -> list[str]:
    """Every requirement of the core and the runtime extras at its floor (numpy at ``numpy`` if given)."""
    from edge_sdk.cli_freeze import _packaging, _requirements, _target_env

    Requirement = _packaging()[3]

    reqs, _ = _requirements(RUNTIME_EXTRAS)
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    overrides = LOW_OVERRIDES_BY_PYTHON.get(py, {})
    env = _target_env(py, None)
    floors: dict[str, str] = {}
    for line in reqs:
        r = Requirement(line)
        if r.marker is not None and not r.marker.evaluate(env):
            continue
        lows = [s.version for s in r.specifier if s.operator in (">=", "==", "~=")]
        if not lows:
            raise SystemExit(f"[device-venv] {line}: no lower bound to test (give it one in pyproject.toml)")
        name = r.name.lower()
        floors[name] = max([floors.get(name, "0"), *lows], key=_vkey)
    for name, v in overrides.items():
        if name in floors and _vkey(v) > _vkey(floors[name]):
            floors[name] = v
    if numpy:
        floors["numpy"] = numpy
    return [f"{n}=={v}" for n, v in sorted(floors.items())] + list(LOW_TEST_TOOLS)


def _vkey(v: str):
    try:
        from packaging.version import Version
    except ImportError:  # pragma: no cover
        from pip._vendor.packaging.version import Version
    return Version(v)


# ----------------------------------------------------------------------------- venvs
def make_venv(cache: Path, name: str, key_text: str, install: list[str]) -> tuple[Path, bool, float]:
    """(venv, reused?, seconds) — built once per requirement set; a half-built one is rebuilt."""
    key = digest(str(RECIPE_VERSION), sys.version, key_text)
    venv = cache / f"{name}-{key}"
    if (venv / ".complete").exists():
        return venv, True, 0.0
    t0 = time.perf_counter()
    shutil.rmtree(venv, ignore_errors=True)
    base = getattr(sys, "_base_executable", sys.executable)
    sh([base, "-m", "venv", str(venv)], what=f"creating the {name} venv")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "--no-input"]
    sh([*pip, "install", "--quiet", *install], what=f"installing the {name} set", timeout=1800)
    (venv / ".complete").write_text(key_text)
    return venv, False, time.perf_counter() - t0


def build_wheel(work: Path) -> Path:
    """The edge-sdk wheel of the working tree (tracked + untracked-not-ignored files)."""
    src = work / "src"
    files = sh(["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"], what="git ls-files").stdout
    for rel in filter(None, files.split("\0")):
        p = REPO / rel
        if p.is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, src / rel)
    sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(work / "dist"), str(src)],
       what="building the edge-sdk wheel", timeout=600)
    (wheel,) = (work / "dist").glob("edge_sdk-*.whl")
    return wheel


def build_artifacts(cache: Path) -> Path:
    """The runtime tests' models, built here with the conversion stack (dev venv), cached by their builders."""
    key = digest(str(RECIPE_VERSION), *[(REPO / f).read_text() for f in ARTIFACT_BUILDERS])
    out = cache / f"artifacts-{key}"
    if (out / "index.json").exists():
        return out
    tmp = cache / f".artifacts-{key}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    code = f"""
import json, sys
from pathlib import Path
sys.path[:0] = [{str(REPO / 'tests')!r}, {str(REPO / 'examples')!r}]
import rt_artifacts as ra, detector_model
root = Path({str(tmp)!r}); fam = root / "families"
onnx = ra.build_onnx_family(fam / "onnx" / "work", fam / "onnx" / "artifacts")
tfl = {{**onnx, **ra.build_tflite_family(fam / "tflite" / "work", fam / "tflite" / "artifacts", onnx["qdq_onnx"])}}
rel = lambda d: {{k: str(Path(v).relative_to(fam)) for k, v in d.items()}}
index = {{"onnx": rel(onnx), "tflite": rel(tfl)}}
for size in {DETECTOR_SIZES!r}:
    detector_model.build_artifact(root / f"detector_{{size}}", size=size)
    index[f"detector_{{size}}"] = f"detector_{{size}}"
(root / "index.json").write_text(json.dumps(index, indent=1))
"""
    sh([sys.executable, "-c", code], what="building the runtime tests' models in the dev venv", timeout=1200,
       env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    tmp.rename(out)
    return out


# ----------------------------------------------------------------------------- one venv
def check_venv(venv: Path, wheel: Path, prebuilt: Path, work: Path) -> dict:
    py = str(venv / "bin" / "python")
    pip = [py, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    t0 = time.perf_counter()
    sh([*pip, "install", "--quiet", "--no-deps", "--force-reinstall", str(wheel)], what="installing the edge-sdk wheel")
    sh([*pip, "check"], what=f"pip check in {venv.name}")
    versions = json.loads(sh([py, "-c", (
        "import json; from importlib import metadata as m\n"
        "names = ('edge-sdk','numpy','pillow','click','ai-edge-litert','onnxruntime','openvino','opencv-python-headless','pytest')\n"
        "out = {}\n"
        "for n in names:\n"
        "    try: out[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(out))")], what="reading versions").stdout)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(EDGE_SDK_PREBUILT=str(prebuilt), PYTHONPATH=str(HERE), PYTHONDONTWRITEBYTECODE="1",
               TF_CPP_MIN_LOG_LEVEL="3", PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    # Not run from the checkout: a child `python -c` there would import the checkout's edge_sdk/ from ''.
    cmd = [str(venv / "bin" / "pytest"), "-q", "-p", "plugin", "-p", "no:cacheprovider", "--rootdir", str(REPO),
           "-c", str(REPO / "pyproject.toml"), "-m", "not slow and not realmodels",
           *[str(REPO / f) for f in TEST_FILES], *[a for node in DESELECT for a in ("--deselect", node)]]
    proc = subprocess.run(cmd, cwd=work, env=env, text=True, capture_output=True, timeout=1800)
    tail = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else [""]
    return {"versions": versions, "rc": proc.returncode, "summary": tail[0], "output": proc.stdout + proc.stderr,
            "seconds": round(time.perf_counter() - t0, 1)}


OPENCV_APP = """
import sys
import cv2, numpy as np, edge_sdk
frame = np.zeros((480, 640, 3), np.uint8)
cv2.rectangle(frame, (200, 150), (330, 300), (40, 180, 250), -1)   # BGR, as VideoCapture.read() gives
frame = cv2.GaussianBlur(frame, (5, 5), 0)
with edge_sdk.load(sys.argv[1], head="yolov8", labels=sys.argv[2].split(",")) as model:
    a = model.infer_image(frame, color="bgr")
    b = model.infer_image(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB), color="rgb")
    assert list(a) == list(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert [(d.label, d.box) for d in a.detections] == [(d.label, d.box) for d in b.detections]
    res = list(model.pipeline(iter([frame, frame[:, ::-1].copy()]), color="bgr", max_in_flight=2))
    assert len(res) == 2
print("opencv", cv2.__version__, "numpy", np.__version__, "detections", len(a.detections))
"""


def opencv_app(venv: Path, prebuilt: Path, work: Path) -> str:
    """A device app with OpenCV frames (numpy 2): BGR from cv2 equals cv2's own BGR->RGB conversion."""
    sys.path.insert(0, str(REPO / "examples"))
    import detector_model

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    det = json.loads((prebuilt / "index.json").read_text())[f"detector_{detector_model.SIZE}"]
    out = sh([str(venv / "bin" / "python"), "-c", OPENCV_APP, str(prebuilt / det), ",".join(detector_model.LABELS)],
             what=f"the OpenCV device app in {venv.name}", env=env, cwd=work, timeout=300)
    return out.stdout.strip().splitlines()[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default=os.environ.get("EDGE_SDK_DEVICE_VENV_CACHE",
                                                       str(Path.home() / ".cache" / "edge-sdk-device-venv")))
    ap.add_argument("--only", choices=("low", "low-numpy2", "high"), default=None)
    args = ap.parse_args()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()

    t0 = time.perf_counter()
    prebuilt = build_artifacts(cache)
    log(f"runtime test models: {prebuilt} ({time.perf_counter() - t0:.1f} s)")
    sets = []
    if args.only in (None, "high"):
        t0 = time.perf_counter()
        lock = high_lock()
        pins = "\n".join(ln for ln in lock.splitlines() if not ln.startswith("#"))
        (cache / "high.lock.txt").write_text(lock)
        log(f"high set resolved by edge-sdk freeze ({time.perf_counter() - t0:.1f} s): "
            + ", ".join(ln.split(" ")[0] for ln in lock.splitlines() if "==" in ln and not ln.startswith("#")))
        lockfile = cache / f"high-{digest(pins)}.lock.txt"
        lockfile.write_text(lock)
        sets.append(("high", pins, ["--require-hashes", "--no-deps", "--only-binary=:all:", "-r", str(lockfile)]))
    if args.only in (None, "low"):
        low = low_requirements()
        log("low set: " + ", ".join(low))
        sets.append(("low", "\n".join(low), ["--only-binary=:all:", *low]))
    if args.only in (None, "low-numpy2"):
        low2 = low_requirements(numpy=LOWEST_NUMPY2)
        log("low-numpy2 set: " + ", ".join(low2))
        sets.append(("low-numpy2", "\n".join(low2), ["--only-binary=:all:", *low2]))

    failures = []
    with tempfile.TemporaryDirectory(prefix="edge-sdk-device-venv-") as work:
        t0 = time.perf_counter()
        wheel = build_wheel(Path(work))
        log(f"wheel {wheel.name} ({time.perf_counter() - t0:.1f} s)")
        for name, key_text, install in sets:
            venv, reused, secs = make_venv(cache, name, key_text, install)
            log(f"{name}: venv {venv} ({'cached' if reused else f'built in {secs:.1f} s'})")
            res = check_venv(venv, wheel, prebuilt, Path(work))
            log(f"{name}: {' '.join(f'{k}=={v}' for k, v in res['versions'].items())}")
            log(f"{name}: runtime tests: {res['summary']} ({res['seconds']} s)")
            if "opencv-python-headless" in res["versions"]:
                log(f"{name}: OpenCV device app: {opencv_app(venv, prebuilt, Path(work))}")
            if res["rc"] != 0:
                print(res["output"][-12000:], flush=True)
                failures.append(name)
    log(f"total {time.perf_counter() - t_all:.1f} s")
    if failures:
        log(f"FAILED: {', '.join(failures)}")
        return 1
    log("OK: the runtime tests pass in every device venv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
