"""The device side of the arm64 check: runs inside one runtime-only venv (aarch64 under qemu, or
its x86-64 twin with the same versions) and records what a device would see.

    python device_check.py --cases cases.json --data DIGITS_DIR --out OUT_DIR

It needs only what a device installs (edge-sdk core + one runtime), never TensorFlow. In one
process it records every attempt to import the conversion stack (the import-hygiene check:
``import edge_sdk``, doctor, ``load`` and ``infer`` must not even try), then:

- ``edge-sdk doctor --json`` through the installed console script;
- per case, in a child interpreter (a native crash is recorded, not fatal): ``edge_sdk.load`` with the profile's own chain (or the backend named for the case),
  the backend/delegate/fallback the facade reports, ``strict=True`` where the case expects a
  refusal, and the outputs for every validation digit (``infer_image``: the manifest's
  preprocessing, then the model) saved to ``<case>.npz``;
- ``edge-sdk bench`` on the first case, to see what it says about the host (emulated or not).

Everything goes to ``OUT_DIR/result.json``; the host compares (``compare.py``). Errors are
recorded per step, not raised, so one broken case does not hide the others.
"""

from __future__ import annotations

import argparse
import importlib.abc
import json
import os
import platform
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

#: Top-level packages a device install must never import (the conversion stack).
CONVERSION_STACK = ("tensorflow", "keras", "tf_keras", "onnx2tf", "nncf", "torch", "onnx", "tf2onnx")
ATTEMPTS: list[str] = []


LOOKUPS: list[str] = []


def _is_lookup() -> bool:
    """True when the finder was reached through ``importlib.util.find_spec``: a presence check
    (doctor asks whether TensorFlow is installed without importing it), not an import."""
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "find_spec" and code.co_filename.replace("\\", "/").endswith(("importlib/util.py",
                                                                                       "<frozen importlib.util>")):
            return True
        frame = frame.f_back
    return False


class _Recorder(importlib.abc.MetaPathFinder):
    """Records (without blocking) every import of the conversion stack, found or not."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in CONVERSION_STACK:
            (LOOKUPS if _is_lookup() else ATTEMPTS).append(name)
        return None


sys.meta_path.insert(0, _Recorder())

import numpy as np  # noqa: E402


def _versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("edge-sdk", "ai-edge-litert", "tflite-runtime", "onnxruntime", "openvino", "numpy", "pillow"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


def _error(exc: BaseException) -> dict[str, str]:
    return {"type": type(exc).__name__, "message": str(exc).splitlines()[0] if str(exc) else "",
            "traceback": traceback.format_exc(limit=4)}


def _script(name: str) -> str:
    """The console script installed beside this interpreter (the venv's ``edge-sdk``)."""
    return str(Path(sys.executable).with_name(name))


def run_doctor() -> dict:
    r = subprocess.run([_script("edge-sdk"), "doctor", "--json"], capture_output=True, text=True, timeout=600)
    out: dict = {"returncode": r.returncode, "stderr": r.stderr[-2000:]}
    try:
        report = json.loads(r.stdout)
    except ValueError:
        out["stdout"] = r.stdout[-2000:]
        return out
    out["host"] = report.get("host")
    out["runtimes"] = {k: v for k, v in report.get("runtimes", {}).items() if isinstance(v, dict) and v.get("installed")}
    out["litert_interpreter"] = report.get("backends", {}).get("litert", {}).get("interpreter")
    out["profiles"] = {row["profile"]: {"status": row["status"], "would_run_on": row["would_run_on"]}
                       for row in report.get("profiles", [])}
    return out


def run_bench(folder: str, backend: str | None, workdir: Path) -> dict:
    """``edge-sdk bench`` as a user would run it: what does it say about this host?"""
    j = workdir / "bench.json"
    cmd = [_script("edge-sdk"), "bench", folder, "--runs", "20", "--warmup", "2", "--power", "none", "--json-out", str(j)]
    if backend:
        cmd += ["--backend", backend]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out: dict = {"returncode": r.returncode, "warnings": [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")],
                 "stderr": r.stderr[-1500:],
                 "markdown_emulated_line": next((ln for ln in r.stdout.splitlines() if "Emulated" in ln), None)}
    if j.is_file():
        data = json.loads(j.read_text())
        out["host"] = data["environment"]["host"]
        res = data["results"][0]
        out["result"] = {"backend": res["backend"], "fallback": res["fallback"], "p50_ms": res["latency_ms"]["p50"],
                         "runs": res["runs"]}
    return out


def run_case(case: dict, data: Path, out_dir: Path) -> dict:
    """Load one artifact the way a device would, run every validation digit, save the outputs."""
    import edge_sdk

    rec: dict = {"case": case["id"]}
    folder = case["folder"]
    if case.get("expect_strict_refusal"):
        try:
            edge_sdk.load(folder, strict=True).close()
            rec["strict"] = {"refused": False}
        except edge_sdk.errors.DelegateUnavailableError as exc:
            rec["strict"] = {"refused": True, "message": str(exc).splitlines()[0]}
        except Exception as exc:  # noqa: BLE001 - recorded, judged on the host
            rec["strict"] = {"refused": False, "error": _error(exc)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        model = edge_sdk.load(folder, backend=case.get("backend"))
        rec["load_s"] = round(time.perf_counter() - t0, 3)
    rec["load_warnings"] = sorted({f"{w.category.__name__}: {w.message}" for w in caught})
    names = sorted(json.loads((data / "val_labels.json").read_text()))
    outs: dict[str, list[np.ndarray]] = {}
    with model:
        rec.update(backend=model.backend, delegate=model.delegate, fallback=bool(model.fallback),
                   format=model.describe()["format"], details=model.details)
        t0 = time.perf_counter()
        for name in names:
            res = model.infer_image(data / "val" / name)
            for k, v in res.outputs.items():
                outs.setdefault(k, []).append(np.asarray(v))
        rec["infer_s"] = round(time.perf_counter() - t0, 3)
        rec["result_fallback"] = bool(res.fallback)
        rec["model_sha256"] = res.model_sha256
    np.savez(out_dir / f"{case['id']}.npz", images=np.array(names), **{k: np.stack(v) for k, v in outs.items()})
    rec["outputs"] = {k: list(np.stack(v).shape) for k, v in outs.items()}
    return rec


def case_in_child(case: dict, data: Path, out_dir: Path) -> dict:
    """Run one case in its own interpreter, so a native crash (a segfault in a runtime under qemu)
    is recorded against that case instead of taking the whole check down."""
    spec = out_dir / f"{case['id']}.case.json"
    spec.write_text(json.dumps(case))
    r = subprocess.run([sys.executable, __file__, "--one-case", str(spec), "--data", str(data), "--out", str(out_dir)],
                       capture_output=True, text=True, timeout=1800)
    rec_path = out_dir / f"{case['id']}.json"
    if rec_path.is_file():
        rec = json.loads(rec_path.read_text())
    else:
        how = f"signal {-r.returncode}" if r.returncode < 0 else f"exit {r.returncode}"
        last = (r.stderr.strip().splitlines() or [""])[-1]
        rec = {"case": case["id"], "error": {"type": "Crash", "message": f"the process died ({how}): {last}",
                                             "traceback": r.stderr[-3000:]}}
    rec["stderr_tail"] = r.stderr[-1500:]
    return rec


def one_case(spec: Path, data: Path, out_dir: Path) -> int:
    case = json.loads(spec.read_text())
    try:
        rec = run_case(case, data, out_dir)
    except Exception as exc:  # noqa: BLE001 - recorded, judged on the host
        rec = {"case": case["id"], "error": _error(exc)}
    rec["hygiene"] = {"attempted": sorted(set(ATTEMPTS)), "looked_up": sorted(set(LOOKUPS)),
                      "loaded": sorted(m for m in sys.modules if m.split(".")[0] in CONVERSION_STACK)}
    (out_dir / f"{case['id']}.json").write_text(json.dumps(rec, indent=1, default=str) + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", help="JSON list of cases: id, folder, backend, expect_strict_refusal")
    ap.add_argument("--one-case", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--outputs-only", action="store_true", help="only the cases' outputs (no doctor, no bench)")
    ap.add_argument("--data", required=True, help="folder with val/ and val_labels.json")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.one_case:
        return one_case(args.one_case, Path(args.data), out_dir)
    cases = json.loads(Path(args.cases).read_text())
    result: dict = {"machine": platform.machine(), "python": platform.python_version(), "versions": _versions(),
                    "qemu_cpu": os.environ.get("QEMU_CPU"), "cases": [], "errors": []}
    t0 = time.perf_counter()
    try:
        import edge_sdk  # noqa: F401 - the first hygiene step
        from edge_sdk import doctor, hostinfo

        result["emulation"] = hostinfo.emulation()
        result["cpu_model"] = hostinfo.cpu_model()
        doctor.collect()  # in-process too, so the recorder sees doctor's imports
    except Exception as exc:  # noqa: BLE001
        result["errors"].append({"step": "import edge_sdk / doctor", **_error(exc)})
    if not args.outputs_only:
        try:
            result["doctor"] = run_doctor()
        except Exception as exc:  # noqa: BLE001
            result["errors"].append({"step": "edge-sdk doctor --json", **_error(exc)})
    for case in cases:
        try:
            result["cases"].append(case_in_child(case, Path(args.data), out_dir))
        except Exception as exc:  # noqa: BLE001
            result["cases"].append({"case": case["id"], "error": _error(exc)})
    if cases and not args.outputs_only:
        try:
            result["bench"] = run_bench(cases[0]["folder"], cases[0].get("backend"), out_dir)
        except Exception as exc:  # noqa: BLE001
            result["errors"].append({"step": "edge-sdk bench", **_error(exc)})
    # this process (import edge_sdk, doctor) and every case's process (load, infer)
    attempted = set(ATTEMPTS).union(*(c.get("hygiene", {}).get("attempted", []) for c in result["cases"]))
    loaded = {m for m in sys.modules if m.split(".")[0] in CONVERSION_STACK}.union(
        *(c.get("hygiene", {}).get("loaded", []) for c in result["cases"]))
    looked = set(LOOKUPS).union(*(c.get("hygiene", {}).get("looked_up", []) for c in result["cases"]))
    result["hygiene"] = {"checked": list(CONVERSION_STACK), "attempted": sorted(attempted), "loaded": sorted(loaded),
                         "looked_up": sorted(looked)}
    result["seconds"] = round(time.perf_counter() - t0, 1)
    (out_dir / "result.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
