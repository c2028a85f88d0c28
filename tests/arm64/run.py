"""`make test-arm64`: the device side of edge-sdk on aarch64 (emulated by qemu-user), every runtime.

    sudo .venv/bin/python tests/arm64/run.py [--cache DIR] [--docs docs/arm64.md] [--git-ref REF]
                                           [--no-selftest | --selftest-tamper] [--keep]

1. Host: installs debootstrap, qemu-user-static and binfmt-support with apt-get where missing,
   mounts binfmt_misc and enables qemu-aarch64. If that cannot work here, the run FAILS with the
   reason (exit 2); it never skips.
2. Builds (or reuses, keyed by its recipe) a Debian bookworm arm64 root under the cache
   (default ``~/.cache/edge-sdk-arm64``, outside the clone).
3. Builds the edge-sdk wheel from this checkout (the working tree, or ``--git-ref``), and with it,
   on the x86 host, the quick-start artifacts (arm-cpu int8 TFLite + int8 ONNX, coral-edgetpu,
   intel-cpu) and the float reference outputs.
4. In the root, one venv per device extra — ``[litert]``, ``tflite-runtime==2.14.0`` (legacy
   package, core install), ``[onnxruntime]``, ``[openvino]`` — with the wheel installed by pip
   from PyPI (venvs cached by the wheel's requirements; the wheel itself is reinstalled each run),
   ``pip check`` clean. Each has an x86-64 twin with exactly the same package versions.
5. In every venv, on both emulated cores (Cortex-A72 and Cortex-A76) and on x86-64,
   ``device_check.py``: doctor, import hygiene, the artifacts on the 300 validation digits, bench.
6. Judges (``compare.py``, ``gate.py``): expected backends/fallbacks, doctor says arm-cpu native,
   no TensorFlow, bench says emulated, arm64 outputs vs the x86 twin (quantization steps, top-1),
   and the project's own accuracy gate on arm64 vs float (and vs the x86 twin). Writes
   ``docs/arm64.md``. Any failure: exit 1.
7. Self-test: a tampered artifact (re-hashed so it loads) runs the same way on aarch64 and must be
   failed by the gate; if it passes, the run fails. ``--selftest-tamper`` runs only this.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import contextlib
import fcntl
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))

from arm64 import compare, host  # noqa: E402
from arm64.host import HarnessError, log  # noqa: E402

DIGITS = REPO / "examples" / "digits"
ROOT_VENVS = "/opt/edge-sdk-venvs"
VENV_RECIPE_VERSION = 1

LITERT = {"backend": "litert/xnnpack", "fallback": False}
VENVS = [
    {"name": "litert", "extra": "litert", "reqs": [], "dist": "ai-edge-litert", "doctor": {"arm-cpu": "native"},
     "cases": [("arm-cpu", "tflite-int8", "litert", {**LITERT, "interpreter": "ai_edge_litert.interpreter"}),
               ("coral-edgetpu", "tflite-int8", None, {**LITERT, "fallback": True, "strict_refusal": True,
                                                       "interpreter": "ai_edge_litert.interpreter"})]},
    {"name": "tflite-runtime", "extra": None, "reqs": ["tflite-runtime==2.14.0", "numpy<2"], "dist": "tflite-runtime",
     "doctor": {"arm-cpu": "native"},
     "cases": [("arm-cpu", "tflite-int8", "litert", {**LITERT, "interpreter": "tflite_runtime.interpreter"}),
               ("coral-edgetpu", "tflite-int8", None, {**LITERT, "fallback": True, "strict_refusal": True,
                                                       "interpreter": "tflite_runtime.interpreter"})]},
    {"name": "onnxruntime", "extra": "onnxruntime", "reqs": [], "dist": "onnxruntime", "doctor": {"arm-cpu": "native"},
     "cases": [("arm-cpu", "onnx-qdq", "onnxruntime", {"backend": "onnxruntime/CPUExecutionProvider", "fallback": False})]},
    {"name": "openvino", "extra": "openvino", "reqs": [], "dist": "openvino", "doctor": {},
     "cases": [("intel-cpu", "openvino-ir", None, {"backend": "openvino/CPU", "fallback": False})]},
]
SELFTEST_VENV = "onnxruntime"


def install_spec(v: dict, wheel: str) -> list[str]:
    return [f"{wheel}[{v['extra']}]" if v["extra"] else wheel, *v["reqs"]]


def cases_of(v: dict, arts: str, cpu: str) -> list[dict]:
    return [{"id": f"{v['name']}@{cpu}__{prof}__{fmt}", "venv": v["name"], "cpu": cpu, "profile": prof, "format": fmt,
             "folder": f"{arts}/{prof}", "backend": backend, "expect_strict_refusal": bool(exp.get("strict_refusal")),
             "expect": exp} for prof, fmt, backend, exp in v["cases"]]


# ----------------------------------------------------------------------------- the wheel
def snapshot_source(dest: Path, git_ref: str | None) -> str:
    """Copy the checkout's files (working tree: tracked + untracked-not-ignored; or a commit)."""
    if git_ref:
        sha = host.sh(["git", "-C", str(REPO), "rev-parse", "--verify", git_ref + "^{commit}"], what="git rev-parse").stdout.strip()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", sha], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        return f"commit {sha[:12]}"
    files = host.sh(["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"], what="git ls-files").stdout
    for rel in filter(None, files.split("\0")):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    head = host.sh(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"], what="git rev-parse").stdout.strip()
    dirty = host.sh(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"], what="git status").stdout.strip()
    return f"working tree at {head}" + (" with uncommitted changes" if dirty else "")


def build_wheel(work: Path, git_ref: str | None) -> tuple[Path, Path, str, str]:
    """(wheel, unpacked wheel, digest, source description)."""
    src = work / "src"
    src.mkdir()
    source = snapshot_source(src, git_ref)
    dist = work / "dist"
    host.sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(src)],
            what="building the edge-sdk wheel", timeout=600)
    (wheel,) = dist.glob("edge_sdk-*.whl")
    unpacked = work / "wheel"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(unpacked)
        record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
        digest = host.key_of(z.read(record).decode())  # the RECORD lists the sha256 of every file
    return wheel, unpacked, digest, source


def requires_dist(unpacked: Path) -> list[str]:
    meta = next(unpacked.glob("*.dist-info/METADATA")).read_text()
    return sorted(ln.split(":", 1)[1].strip() for ln in meta.splitlines() if ln.startswith("Requires-Dist:"))


def tree_digest(folder: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


# ----------------------------------------------------------------------------- host artifacts
#: Where the load crash guard remembers verified artifacts during a run (per run, so every run
#: trial-loads each artifact once as a device's first load does, and no run touches ~/.cache/edge-sdk).
VERIFIED_ENV = "EDGE_SDK_VERIFIED_CACHE"


def host_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env[VERIFIED_ENV] = str(Path.cwd() / "verified-x86")  # cwd: the run's temp folder
    env.update(extra)
    return env


def host_python_env(unpacked: Path) -> dict[str, str]:
    return host_env(PYTHONPATH=str(unpacked), TF_CPP_MIN_LOG_LEVEL="3")


def ensure_artifacts(cache: Path, unpacked: Path, digest: str) -> Path:
    """Quick-start artifacts + float reference + steps, cached by wheel, converter stack and data."""
    freeze = host.sh([sys.executable, "-m", "pip", "freeze", "--exclude-editable"], what="pip freeze").stdout
    key = host.key_of({"wheel": digest, "stack": freeze, "digits": tree_digest(DIGITS),
                       "script": (HERE / "artifacts.py").read_text()})
    final = cache / f"artifacts-{key}"
    if (final / ".ready").is_file():
        log(f"artifacts: cached ({final.name})")
        return final
    for stale in [*cache.glob("artifacts-*"), *cache.glob("tmp-artifacts-*")]:
        shutil.rmtree(stale, ignore_errors=True)
    tmp = cache / f"tmp-artifacts-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    log("artifacts: converting the quick-start model for arm-cpu, coral-edgetpu, intel-cpu on the x86 host")
    t0 = time.monotonic()
    try:
        host.sh([sys.executable, str(HERE / "artifacts.py"), "--out", str(tmp)], what="converting the quick-start artifacts",
                env=host_python_env(unpacked), timeout=1800)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    (tmp / ".ready").write_text(key + "\n")
    os.rename(tmp, final)
    log(f"artifacts: done in {time.monotonic() - t0:.0f} s")
    return final


# ----------------------------------------------------------------------------- venvs
def arm_venv_key(v: dict, reqs: list[str]) -> str:
    return host.key_of({"root": host.root_key(), "name": v["name"], "extra": v["extra"], "reqs": v["reqs"],
                        "requires_dist": reqs, "recipe": VENV_RECIPE_VERSION})


#: venvs already prepared (wheel reinstalled, pip check clean) in this run: path -> (freeze, created)
_PREPARED: dict[str, tuple[str, bool]] = {}
#: one preparer per venv at a time (each venv runs on several emulated CPUs, in parallel)
_LOCKS: dict[str, threading.Lock] = collections.defaultdict(threading.Lock)


def ensure_arm_venv(root: Path, v: dict, wheel_in_root: str, reqs: list[str]) -> tuple[str, str, bool]:
    """(venv path inside the root, pip freeze, created now?)."""
    with _LOCKS["arm64 " + v["name"]]:
        return _ensure_arm_venv(root, v, wheel_in_root, reqs)


def _ensure_arm_venv(root: Path, v: dict, wheel_in_root: str, reqs: list[str]) -> tuple[str, str, bool]:
    path = f"{ROOT_VENVS}/{v['name']}-{arm_venv_key(v, reqs)}"
    if path in _PREPARED:
        return path, *_PREPARED[path]
    full = root / path.lstrip("/")
    name = v["name"]
    created = False
    if not (full / ".edge-sdk-ready").is_file():
        for stale in (root / ROOT_VENVS.lstrip("/")).glob(f"{name}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        log(f"arm64 venv {name}: pip install {' '.join(install_spec(v, Path(wheel_in_root).name))}")
        t0 = time.monotonic()
        host.in_root(root, ["/usr/bin/python3", "-m", "venv", path], what=f"creating the {name} venv in the arm64 root")
        host.in_root(root, [f"{path}/bin/pip", "install", "-q", *install_spec(v, wheel_in_root)],
                     what=f"pip install into the arm64 {name} venv", timeout=1800)
        created = True
        log(f"arm64 venv {name}: installed in {time.monotonic() - t0:.0f} s")
    else:
        host.in_root(root, [f"{path}/bin/pip", "install", "-q", "--no-deps", "--force-reinstall", wheel_in_root],
                     what=f"reinstalling the edge-sdk wheel into the arm64 {name} venv")
    host.in_root(root, [f"{path}/bin/pip", "check"], what=f"pip check in the arm64 {name} venv")
    freeze = host.in_root(root, [f"{path}/bin/pip", "freeze", "--all"], what=f"pip freeze ({name})").stdout
    (full / ".edge-sdk-ready").write_text(freeze)
    _PREPARED[path] = (freeze, created)
    return path, freeze, created


def constraints_from(freeze: str) -> str:
    skip = ("edge-sdk", "edge_sdk", "pip==", "setuptools==", "wheel==")
    return "\n".join(ln for ln in freeze.splitlines() if "==" in ln and not ln.lower().startswith(skip)) + "\n"


def ensure_x86_venv(cache: Path, v: dict, wheel: Path, reqs: list[str], arm_freeze: str) -> Path:
    """The x86-64 twin: the same extra, pinned to exactly the versions pip chose on arm64."""
    with _LOCKS["x86 " + v["name"]]:
        return _ensure_x86_venv(cache, v, wheel, reqs, arm_freeze)


def _ensure_x86_venv(cache: Path, v: dict, wheel: Path, reqs: list[str], arm_freeze: str) -> Path:
    cons = constraints_from(arm_freeze)
    key = host.key_of({"name": v["name"], "cons": cons, "reqs": v["reqs"], "requires_dist": reqs,
                       "python": platform.python_version(), "recipe": VENV_RECIPE_VERSION})
    path = cache / "x86-venvs" / f"{v['name']}-{key}"
    pip = str(path / "bin" / "pip")
    if str(path) in _PREPARED:
        return path
    if not (path / ".edge-sdk-ready").is_file():
        for stale in (cache / "x86-venvs").glob(f"{v['name']}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        log(f"x86 venv {v['name']}: pip install (pinned to the arm64 versions)")
        path.parent.mkdir(parents=True, exist_ok=True)
        host.sh(["/usr/bin/python3", "-m", "venv", str(path)], what=f"creating the x86 {v['name']} venv")
        (path / "constraints.txt").write_text(cons)
        host.sh([pip, "install", "-q", "-c", str(path / "constraints.txt"), *install_spec(v, str(wheel))],
                what=f"pip install into the x86 {v['name']} venv", timeout=1800)
    else:
        host.sh([pip, "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
                what=f"reinstalling the edge-sdk wheel into the x86 {v['name']} venv")
    host.sh([pip, "check"], what=f"pip check in the x86 {v['name']} venv")
    (path / ".edge-sdk-ready").write_text("ok\n")
    _PREPARED[str(path)] = ("", False)
    return path


# ----------------------------------------------------------------------------- one venv, both sides
def run_venv(v: dict, cpu: str, root: Path, work_in_root: str, cache: Path, wheel: Path, reqs: list[str],
             arts: Path, results: Path, extra_cases: list[dict] | None = None) -> dict:
    name = f"{v['name']}@{cpu}"
    wheel_in_root = f"{work_in_root}/{wheel.name}"
    venv, freeze, created = ensure_arm_venv(root, v, wheel_in_root, reqs)
    x86_venv = ensure_x86_venv(cache, v, wheel, reqs, freeze)
    arm_cases = extra_cases if extra_cases is not None else cases_of(v, f"{work_in_root}/arts", cpu)
    x86_cases = [{**c, "folder": c["folder"].replace(f"{work_in_root}/arts", str(arts / "out"))
                  .replace(f"{work_in_root}/tampered", str(results.parent / "tampered"))} for c in arm_cases]
    tag = f"selftest@{cpu}" if extra_cases is not None else name
    root_work = root / work_in_root.lstrip("/")
    (root_work / f"cases-{tag}.json").write_text(json.dumps(arm_cases))
    x86_cases_file = results / f"cases-{tag}-x86.json"
    x86_cases_file.write_text(json.dumps(x86_cases))
    t0 = time.monotonic()
    host.in_root(root, [f"{venv}/bin/python", f"{work_in_root}/device_check.py", "--cases", f"{work_in_root}/cases-{tag}.json",
                        "--data", f"{work_in_root}/data", "--out", f"{work_in_root}/out/{tag}"],
                 what=f"device_check in the arm64 {name} venv", timeout=1800,
                 env={VERIFIED_ENV: f"{work_in_root}/verified-{cpu}"}, cpu=cpu)
    t_arm = time.monotonic() - t0
    t0 = time.monotonic()
    host.sh([str(x86_venv / "bin" / "python"), str(HERE / "device_check.py"), "--cases", str(x86_cases_file),
             "--data", str(DIGITS), "--out", str(results / "x86" / tag)], what=f"device_check in the x86 {name} venv",
            timeout=1800, env=host_env())
    t_x86 = time.monotonic() - t0
    arm_dir = results / "arm64" / tag
    shutil.rmtree(arm_dir, ignore_errors=True)
    shutil.copytree(root_work / "out" / tag, arm_dir)
    log(f"{tag}: device_check arm64 {t_arm:.0f} s, x86 {t_x86:.0f} s")
    return {"venv": v, "cpu": cpu, "cases": arm_cases, "arm_dir": arm_dir, "x86_dir": results / "x86" / tag,
            "created": created, "freeze": freeze, "seconds": {"arm64": round(t_arm), "x86": round(t_x86)}}


def run_converter_reference(arts: Path, unpacked: Path, results: Path) -> Path:
    """The same cases on the converting host's own stack (the pinned ``[convert]`` runtimes in
    .venv, the wheel's code): what the accuracy gate saw at conversion time. Reported beside the
    like-for-like x86 twin, not judged: a device runs whatever runtime version it installed."""
    cases = [c for v in VENVS for cpu in host.CPUS for c in cases_of(v, str(arts / "out"), cpu)]
    cases_file = results / "cases-converter.json"
    cases_file.write_text(json.dumps(cases))
    out = results / "converter"
    host.sh([sys.executable, str(HERE / "device_check.py"), "--cases", str(cases_file), "--data", str(DIGITS),
             "--out", str(out), "--outputs-only"], what="device_check on the converting host's stack",
            env=host_python_env(unpacked), timeout=1800)
    return out


# ----------------------------------------------------------------------------- judging
def load_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k: z[k] for k in z.files if k != "images"}


def thresholds_of(folder: Path) -> dict:
    """The manifest's ``accuracy.thresholds`` (for the report; the gate itself reads the profile)."""
    m = json.loads((folder / "manifest.json").read_text())
    return (m.get("accuracy") or {}).get("thresholds") or (m["profile"]["spec"] or {}).get("accuracy") or {}


def run_gate(runs: list[dict], arts: Path, unpacked: Path, results: Path,
             art_dir_for: dict[str, Path] | None = None) -> dict[str, dict]:
    """The project's accuracy gate (gate.py, the wheel's code) on every case: arm64 vs float, arm64 vs x86."""
    jobs = []
    for run in runs:
        for case in run["cases"]:
            arm_npz, x86_npz = run["arm_dir"] / f"{case['id']}.npz", run["x86_dir"] / f"{case['id']}.npz"
            if not (arm_npz.is_file() and x86_npz.is_file()):
                continue  # check_case reports why
            folder = str((art_dir_for or {}).get(case["id"], arts / "out" / case["profile"]))
            jobs += [{"id": f"{case['id']}|vs_float", "folder": folder, "reference": str(arts / "float.npz"),
                      "reference_prefix": f"{case['profile']}__", "test": str(arm_npz)},
                     {"id": f"{case['id']}|vs_x86", "folder": folder, "reference": str(x86_npz), "test": str(arm_npz)}]
    tag = "selftest" if art_dir_for else "all"
    jobs_file, out = results / f"gate-jobs-{tag}.json", results / f"gate-{tag}.json"
    jobs_file.write_text(json.dumps(jobs))
    host.sh([sys.executable, str(HERE / "gate.py"), "--jobs", str(jobs_file), "--out", str(out)],
            what="the accuracy gate on the arm64 outputs", env=host_python_env(unpacked), timeout=1800)
    verdicts = json.loads(out.read_text())
    where = verdicts.pop("edge_sdk")
    if not where.startswith(str(unpacked)):
        raise HarnessError(f"gate.py judged with edge_sdk from {where}, not the wheel under test")
    gates: dict[str, dict] = {}
    for key, verdict in verdicts.items():
        cid, side = key.split("|")
        gates.setdefault(cid, {})[side] = verdict
    return gates


def judge_venv(run: dict, arts: Path, gates: dict[str, dict], art_dir_for: dict[str, Path] | None = None,
               converter: Path | None = None) -> tuple[dict, list[dict], list[str]]:
    v = run["venv"]
    conv = json.loads((converter / "result.json").read_text()) if converter else {}
    arm = json.loads((run["arm_dir"] / "result.json").read_text())
    x86 = json.loads((run["x86_dir"] / "result.json").read_text())
    label = f"{v['name']} @ {run['cpu']}"
    failures = compare.check_venv(label, arm, x86, {"doctor": v["doctor"], "dist": v["dist"]})
    floats = np.load(arts / "float.npz")
    images = [str(x) for x in floats["images"]]
    labels_map = json.loads((DIGITS / "val_labels.json").read_text())
    labels = np.array([labels_map[i] for i in images])
    steps_all = json.loads((arts / "steps.json").read_text())
    cases_out = []
    for case in run["cases"]:
        arm_rec = next((c for c in arm.get("cases", []) if c["case"] == case["id"]), None)
        x86_rec = next((c for c in x86.get("cases", []) if c["case"] == case["id"]), None)
        folder = (art_dir_for or {}).get(case["id"], arts / "out" / case["profile"])
        th = thresholds_of(folder)
        fails = compare.check_case(case, arm_rec, x86_rec)
        rows: list[dict] = []
        if not fails:
            arm_npz, x86_npz = run["arm_dir"] / f"{case['id']}.npz", run["x86_dir"] / f"{case['id']}.npz"
            with np.load(arm_npz) as z:
                if [str(x) for x in z["images"]] != images:
                    fails.append(f"{case['id']}: arm64 ran other images than the float reference")
            prefix = f"{case['profile']}__"
            float_out = {k[len(prefix):]: floats[k] for k in floats.files if k.startswith(prefix)}
            step = steps_all.get(f"{case['profile']}/{case['format']}", {})
            arm_out = load_npz(arm_npz)
            rows, more = compare.evaluate_case(case, arm_out, load_npz(x86_npz), float_out, step, labels,
                                               gates.get(case["id"], {}))
            fails += more
            conv_npz = converter / f"{case['id']}.npz" if converter else None
            if conv_npz is not None and conv_npz.is_file():
                conv_rec = next((c for c in conv.get("cases", []) if c["case"] == case["id"]), {})
                conv_out = load_npz(conv_npz)
                for row in rows:
                    name = row["output"]
                    if name in conv_out and name in arm_out and conv_out[name].shape == arm_out[name].shape:
                        row["vs_converter"] = {**compare.step_diff(arm_out[name], conv_out[name], step.get(name)),
                                               **compare.metrics(conv_out[name], arm_out[name]),
                                               "runtime": _runtime_of(conv_rec, conv.get("versions", {}))}
        cases_out.append({"id": case["id"], "venv": label, "profile": case["profile"], "format": case["format"],
                          "arm": arm_rec, "x86": x86_rec, "rows": rows, "failures": fails, "thresholds": th})
        failures += fails
    venv_out = {"name": label, "install": " ".join(install_spec(v, "edge_sdk-*.whl")), "dist": v["dist"],
                "doctor_profiles": ["arm-cpu", "coral-edgetpu", "intel-cpu"], "arm": arm, "x86": x86}
    return venv_out, cases_out, failures


def _runtime_of(rec: dict, versions: dict) -> str:
    backend = (rec.get("backend") or "").split("/")[0]
    interp = (rec.get("details") or {}).get("interpreter", "")
    dist = {"litert": "tflite-runtime" if interp.startswith("tflite_runtime") else "ai-edge-litert",
            "onnxruntime": "onnxruntime", "openvino": "openvino"}.get(backend)
    return f"{dist} {versions.get(dist)}" if dist else "?"


# ----------------------------------------------------------------------------- main
@contextlib.contextmanager
def cache_lock(cache: Path):
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another arm64 run using {cache}")
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def selftest(root: Path, work_in_root: str, cache: Path, wheel: Path, reqs: list[str], arts: Path,
             results: Path, unpacked: Path) -> dict:
    """Run a tampered arm-cpu ONNX through the same path; the gate must fail it."""
    tampered = results.parent / "tampered"
    r = host.sh([sys.executable, str(HERE / "artifacts.py"), "--out", str(arts), "--tamper", str(tampered)],
                what="writing the tampered artifact", env=host_python_env(unpacked))
    info = json.loads(r.stdout.strip().splitlines()[-1])
    dst = root / work_in_root.lstrip("/") / "tampered"
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(tampered, dst)
    v = next(x for x in VENVS if x["name"] == SELFTEST_VENV)
    case = {"id": "selftest__arm-cpu-tampered__onnx-qdq", "venv": v["name"], "cpu": host.QEMU_CPU, "profile": "arm-cpu",
            "format": "onnx-qdq",
            "folder": f"{work_in_root}/tampered", "backend": "onnxruntime", "expect_strict_refusal": False,
            "expect": {"backend": "onnxruntime/CPUExecutionProvider", "fallback": False}}
    run = run_venv(v, host.QEMU_CPU, root, work_in_root, cache, wheel, reqs, arts, results, extra_cases=[case])
    art_dir_for = {case["id"]: tampered}
    _, cases, _ = judge_venv(run, arts, run_gate([run], arts, unpacked, results, art_dir_for), art_dir_for)
    fails = cases[0]["failures"]
    caught = any("vs float" in f for f in fails)
    what = f"{info['node']}: int8 weights and bias rotated by one class"
    log(f"self-test: tampered artifact {'FAILED the gate, as it must' if caught else 'PASSED: the harness cannot fail'}")
    for f in fails[:4]:
        log(f"  self-test failure: {f}")
    return {"venv": f"{v['name']} @ {host.QEMU_CPU}", "what": what, "caught": caught, "failures": fails}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("EDGE_SDK_ARM64_CACHE")
                                                        or Path.home() / ".cache" / "edge-sdk-arm64"))
    ap.add_argument("--docs", type=Path, default=REPO / "docs" / "arm64.md", help="where to write the parity table")
    ap.add_argument("--git-ref", help="build the wheel from this commit instead of the working tree")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--no-selftest", action="store_true", help="skip the tampered-artifact self-test")
    mode.add_argument("--selftest-tamper", action="store_true", help="run only the tampered-artifact self-test")
    ap.add_argument("--keep", action="store_true", help="keep the run's work folder inside the root")
    args = ap.parse_args()
    t_start = time.monotonic()
    cache = args.cache.expanduser().resolve()
    args.docs = args.docs.resolve()
    if REPO == cache or REPO in cache.parents:
        print(f"arm64: FAILED: the cache {cache} must live outside the clone", file=sys.stderr)
        return 2
    phases: dict[str, float] = {}
    try:
        host.ensure_root_user()
        host.ensure_host_tools()
        binfmt = host.ensure_binfmt()
        log(f"binfmt: {binfmt}")
        with cache_lock(cache), tempfile.TemporaryDirectory(prefix="edge-sdk-arm64-") as tmpd:
            work = Path(tmpd)
            # Never run anything from the checkout: `python -m edge_sdk...` helpers (the load crash
            # guard's trial server) would import the checkout's edge_sdk/ instead of the installed one.
            os.chdir(work)
            t0 = time.monotonic()
            wheel, unpacked, digest, source = build_wheel(work, args.git_ref)
            reqs = requires_dist(unpacked)
            log(f"wheel: {wheel.name} from the {source} ({digest})")
            with cf.ThreadPoolExecutor(2) as pool:  # debootstrap (emulated) and conversion (native) side by side
                root_was_cached = (cache / f"root-{host.root_key()}" / ".edge-sdk-root-ready").is_file()
                f_root = pool.submit(host.ensure_root, cache)
                f_arts = pool.submit(ensure_artifacts, cache, unpacked, digest)
                for fut in cf.as_completed([f_root, f_arts]):
                    if fut.exception() is not None:  # say it now, not after the other one finishes
                        log(f"FAILED: {fut.exception()}".splitlines()[0] + " (waiting for the other step to stop)")
                root, arts = f_root.result(), f_arts.result()
            phases["root + artifacts"] = time.monotonic() - t0
            host.refresh_root_config(root)
            root_python = host.check_root_runs(root).split()[1]
            run_id = f"run-{os.getpid()}"
            work_in_root = f"/work/{run_id}"
            root_work = root / work_in_root.lstrip("/")
            shutil.rmtree(root / "work", ignore_errors=True)  # earlier runs' leftovers
            (root_work / "data").mkdir(parents=True)
            shutil.copy2(wheel, root_work / wheel.name)
            shutil.copy2(HERE / "device_check.py", root_work / "device_check.py")
            shutil.copytree(DIGITS / "val", root_work / "data" / "val")
            shutil.copy2(DIGITS / "val_labels.json", root_work / "data" / "val_labels.json")
            shutil.copytree(arts / "out", root_work / "arts")
            results = work / "results"
            results.mkdir()
            report = {"date": time.strftime("%Y-%m-%d"), "host": f"{platform.machine()} {_cpu()}",
                      "qemu": host.qemu_version(), "qemu_cpus": list(host.CPUS), "root": host.ROOT_RECIPE,
                      "root_python": root_python, "wheel": wheel.name, "source": source,
                      "venvs": [], "cases": [], "failures": [], "selftest": None}
            try:
                t0 = time.monotonic()
                if not args.selftest_tamper:
                    with cf.ThreadPoolExecutor(2) as pool:
                        futs = [pool.submit(run_venv, v, cpu, root, work_in_root, cache, wheel, reqs, arts, results)
                                for cpu in host.CPUS for v in VENVS]
                        runs = [f.result() for f in futs]
                    converter = run_converter_reference(arts, unpacked, results)
                    report["converter_versions"] = json.loads((converter / "result.json").read_text())["versions"]
                    phases["venvs + device runs"] = time.monotonic() - t0
                    gates = run_gate(runs, arts, unpacked, results)
                    for run in runs:
                        venv_out, cases_out, fails = judge_venv(run, arts, gates, converter=converter)
                        report["venvs"].append(venv_out)
                        report["cases"] += cases_out
                        report["failures"] += fails
                if not args.no_selftest:
                    t0 = time.monotonic()
                    st = selftest(root, work_in_root, cache, wheel, reqs, arts, results, unpacked)
                    report["selftest"] = st
                    phases["self-test"] = time.monotonic() - t0
                    if not st["caught"]:
                        report["failures"].append("self-test: the tampered artifact passed the arm64 gate: "
                                                  "this harness cannot fail")
            finally:
                if not args.keep:
                    shutil.rmtree(root / "work", ignore_errors=True)
            total = time.monotonic() - t_start
            built = ([] if root_was_cached else ["arm64 root debootstrapped"]) + \
                [f"{n} venv(s) installed" for n in [len([p for p, (_, c) in _PREPARED.items() if c])] if n]
            report["timing"] = f"{total / 60:.1f} min in all (" + ", ".join(
                f"{k} {v:.0f} s" for k, v in phases.items()) + "); cache: " + (
                "cold — " + ", ".join(built) if built else "warm (root and venvs reused)")
            if not args.selftest_tamper:
                args.docs.write_text(compare.render(report))
                log(f"wrote {args.docs}")
            (cache / "last-report.json").write_text(json.dumps(report, indent=1, default=_json_default) + "\n")
    except HarnessError as exc:
        print(f"arm64: FAILED: {exc}", file=sys.stderr)
        return 2
    for c in report["cases"]:
        for r in c["rows"]:
            d = r.get("diff") or {}
            log(f"{c['id']} {r['output']}: max Δ vs x86 {d.get('max_steps')} steps ({d.get('max_abs', 0):.3g}), "
                f"top-1 arm64/x86/float {r.get('top1')}, vs float SQNR {r['vs_float'].get('sqnr_db', 0):.1f} dB")
    if report["failures"]:
        print(f"arm64: FAILED ({len(report['failures'])}):", file=sys.stderr)
        for f in report["failures"]:
            print(f"  - {f}", file=sys.stderr)
        return 1
    print(f"arm64: passed in {(time.monotonic() - t_start) / 60:.1f} min", file=sys.stderr)
    return 0


def _cpu() -> str:
    from_cpuinfo = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                from_cpuinfo = line.split(":", 1)[1].strip()
                break
    return f"{from_cpuinfo}, {os.cpu_count()} cores"


def _json_default(o):
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, np.generic):
        return o.item()
    return str(o)


if __name__ == "__main__":
    sys.exit(main())
