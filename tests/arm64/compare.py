"""Judge the arm64 runs and render ``docs/arm64.md``: aarch64 outputs vs the x86-64 run of the same
artifact and runtime version (quantization steps, top-1), and the project's accuracy gate verdicts
(``gate.py``) of arm64 vs float and arm64 vs the x86 twin.

Pure functions over the files :mod:`device_check`, :mod:`artifacts` and :mod:`gate` write, so the
judgement itself is unit-tested (``test_compare.py``) without any emulation. The difference between
two int8 runs is given in quantization steps of the output's last quantized tensor (``steps.json``):
``|a - b| / step``; cosine and SQNR over all values are kept for the record.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

# ----------------------------------------------------------------------------- metrics
def is_class_scores(shape: tuple[int, ...]) -> bool:
    """Per-sample shape ``[C]`` or ``[1, C]`` with more than one class."""
    return len(shape) in (1, 2) and shape[-1] > 1 and (len(shape) == 1 or shape[0] == 1)


def top1(x: np.ndarray) -> np.ndarray:
    """Arg-max class per sample of a stacked ``[N, (1,) C]`` array."""
    return np.asarray(x).reshape(len(x), -1).argmax(axis=1)


def metrics(ref: np.ndarray, test: np.ndarray) -> dict[str, Any]:
    """cosine, sqnr_db, max_abs_err (and top1_agreement for class scores) of ``test`` against ``ref``.

    Both are stacked per-sample outputs ``[N, ...]``. Non-finite values or a shape mismatch give
    an ``error`` entry (which fails every threshold) rather than an exception.
    """
    ref = np.asarray(ref, np.float64)
    test = np.asarray(test, np.float64)
    if ref.shape != test.shape:
        return {"error": f"shape {list(test.shape)} vs {list(ref.shape)}"}
    if not np.isfinite(test).all():
        return {"error": f"{int((~np.isfinite(test)).sum())} non-finite values"}
    r, t = ref.ravel(), test.ravel()
    noise = float(np.sum((r - t) ** 2))
    signal = float(np.sum(r ** 2))
    denom = float(np.linalg.norm(r) * np.linalg.norm(t))
    cosine = float(np.dot(r, t) / denom) if denom > 0 else (1.0 if noise == 0 else 0.0)
    sqnr = math.inf if noise == 0 else (10.0 * math.log10(signal / noise) if signal > 0 else -math.inf)
    out: dict[str, Any] = {"cosine": cosine, "sqnr_db": sqnr, "max_abs_err": float(np.max(np.abs(r - t))) if r.size else 0.0}
    if is_class_scores(ref.shape[1:]):
        out["top1_agreement"] = float(np.mean(top1(ref) == top1(test)))
    return out


def step_diff(a: np.ndarray, b: np.ndarray, step: float | None) -> dict[str, Any]:
    """Max |a - b| in absolute terms and in quantization steps, and how many values differ."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    d = np.abs(a - b)
    out: dict[str, Any] = {"max_abs": float(d.max()) if d.size else 0.0, "values": int(d.size), "step": step}
    if step:
        steps = d / step
        out["max_steps"] = float(np.round(steps.max(), 3)) if d.size else 0.0
        out["differing"] = int(np.count_nonzero(steps > 0.5))
        # int8 outputs sit on the step grid: anything else means the step is not the output's
        out["on_grid"] = bool(np.all(np.abs(steps - np.round(steps)) < 0.02))
    else:
        out["max_steps"] = None
        out["differing"] = int(np.count_nonzero(d > 0))
    return out


def accuracy(x: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(top1(x) == labels))


# ----------------------------------------------------------------------------- checks
def check_venv(name: str, arm: dict, x86: dict, expect: dict) -> list[str]:
    """Install-level facts of one runtime venv, ARM and its x86 twin."""
    f: list[str] = []
    for side, res, machine in (("arm64", arm, "aarch64"), ("x86", x86, "x86_64")):
        where = f"{name} [{side}]"
        if res.get("machine") != machine:
            f.append(f"{where}: ran on {res.get('machine')!r}, expected {machine}")
        for err in res.get("errors", []):
            f.append(f"{where}: {err['step']}: {err['type']}: {err['message']}")
        hy = res.get("hygiene", {})
        if hy.get("attempted") or hy.get("loaded") or not hy:
            f.append(f"{where}: import hygiene: tried to import {hy.get('attempted') or hy.get('loaded') or 'unknown'}")
        doc = res.get("doctor") or {}
        if doc.get("returncode") != 0 or "profiles" not in doc:
            f.append(f"{where}: edge-sdk doctor --json failed (exit {doc.get('returncode')}): {doc.get('stderr', '')[-300:]}")
        bench = res.get("bench") or {}
        if bench.get("returncode") != 0:
            f.append(f"{where}: edge-sdk bench failed (exit {bench.get('returncode')}): {bench.get('stderr', '')[-300:]}")
    if arm.get("emulation") is None:
        f.append(f"{name} [arm64]: hostinfo.emulation() did not detect qemu-user")
    if x86.get("emulation") is not None:
        f.append(f"{name} [x86]: hostinfo.emulation() claims emulation on the native host: {x86['emulation']}")
    bench = arm.get("bench") or {}
    if not any("timings are not the device's" in w for w in bench.get("warnings", [])) \
            or not (bench.get("host") or {}).get("emulation") or not bench.get("markdown_emulated_line"):
        f.append(f"{name} [arm64]: edge-sdk bench under qemu did not say its timings are not the device's")
    if any("not the device's" in w for w in (x86.get("bench") or {}).get("warnings", [])):
        f.append(f"{name} [x86]: edge-sdk bench calls the native host emulated")
    doc = arm.get("doctor") or {}
    if doc.get("host", {}).get("machine") != "aarch64":
        f.append(f"{name} [arm64]: doctor reports machine {doc.get('host', {}).get('machine')!r}")
    for prof, status in expect.get("doctor", {}).items():
        got = doc.get("profiles", {}).get(prof, {}).get("status")
        if got != status:
            f.append(f"{name} [arm64]: doctor says {prof} is {got!r}, expected {status!r}")
    dist = expect["dist"]
    va, vx = arm.get("versions", {}).get(dist), x86.get("versions", {}).get(dist)
    if not va or va != vx:
        f.append(f"{name}: {dist} {va} on arm64 vs {vx} on x86: the comparison must be like for like")
    ea, ex = arm.get("versions", {}).get("edge-sdk"), x86.get("versions", {}).get("edge-sdk")
    if not ea or ea != ex:
        f.append(f"{name}: edge-sdk {ea} on arm64 vs {ex} on x86")
    return f


def check_case(case: dict, arm: dict | None, x86: dict | None) -> list[str]:
    """What the facade reported for one artifact on ARM (and that the x86 twin ran the same file)."""
    cid = case["id"]
    if arm is None or x86 is None:
        return [f"{cid}: no result from {'arm64' if arm is None else 'x86'}"]
    f = []
    for side, rec in (("arm64", arm), ("x86", x86)):
        if "error" in rec:
            e = rec["error"]
            f.append(f"{cid} [{side}]: {e['type']}: {e['message']}")
    if f:
        return f
    exp = case["expect"]
    if arm["backend"] != exp["backend"]:
        f.append(f"{cid} [arm64]: ran on {arm['backend']}, expected {exp['backend']}")
    if arm["fallback"] != exp["fallback"] or arm["result_fallback"] != exp["fallback"]:
        f.append(f"{cid} [arm64]: fallback reported {arm['fallback']}, expected {exp['fallback']}")
    if exp["fallback"] and not any("FallbackWarning" in w for w in arm["load_warnings"]):
        f.append(f"{cid} [arm64]: the fallback was not warned")
    if not exp["fallback"] and any("FallbackWarning" in w for w in arm["load_warnings"]):
        f.append(f"{cid} [arm64]: unexpected fallback warning: {arm['load_warnings']}")
    if exp.get("interpreter") and arm["details"].get("interpreter") != exp["interpreter"]:
        f.append(f"{cid} [arm64]: interpreter {arm['details'].get('interpreter')}, expected {exp['interpreter']}")
    if exp.get("strict_refusal") and not arm.get("strict", {}).get("refused"):
        f.append(f"{cid} [arm64]: strict=True did not refuse the fallback: {arm.get('strict')}")
    if arm["model_sha256"] != x86["model_sha256"]:
        f.append(f"{cid}: arm64 and x86 ran different model files")
    return f


def gate_failures(verdict: dict[str, Any] | None, what: str, names: list[str]) -> list[str]:
    """The failures the project's accuracy gate (``gate.py``) found, one line each."""
    if not verdict:
        return [f"{what}: no gate verdict"]
    if "error" in verdict:
        return [f"{what}: the gate could not judge it: {verdict['error']}"]
    fails = []
    for name in names:
        m = verdict["outputs"].get(name)
        if m is None:
            fails.append(f"{what} {name}: not judged by the gate")
            continue
        fails += [f"{what} {name}: {f}" for f in m.get("failures", [])]
    return fails


def evaluate_case(case: dict, arm_out: dict[str, np.ndarray], x86_out: dict[str, np.ndarray],
                  float_out: dict[str, np.ndarray], steps: dict[str, float | None], labels: np.ndarray,
                  gate: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Per output: arm64 vs x86 twin (steps, top-1 agreement), top-1 accuracy, and the gate's verdicts.

    Args:
        gate: ``{"vs_float": verdict, "vs_x86": verdict}`` from ``gate.py`` (the project's accuracy
            gate with the artifact's recorded kinds and its profile's thresholds).

    Returns:
        (one row per output, failures). arm64 vs float must pass the gate; so must arm64 vs the x86
        twin (an ARM run further from x86 than the gate allows int8 to be from float means
        something is broken on ARM, whatever the float comparison says).
    """
    rows, fails = [], []
    cid = case["id"]
    for name in sorted(float_out):
        if name not in arm_out or name not in x86_out:
            fails.append(f"{cid}: output '{name}' missing from the {'arm64' if name not in arm_out else 'x86'} run")
            continue
        a, x, fl = arm_out[name], x86_out[name], float_out[name]
        row: dict[str, Any] = {"output": name, "vs_x86": metrics(x, a), "vs_float": metrics(fl, a)}
        for key in ("vs_x86", "vs_float"):
            if "error" in row[key]:
                fails.append(f"{cid} {name} arm64 {key.replace('_', ' ')}: {row[key]['error']}")
        if "error" not in row["vs_x86"]:
            row["diff"] = step_diff(a, x, steps.get(name))
        if is_class_scores(fl.shape[1:]) and len(labels) == len(fl):
            row["top1"] = {side: accuracy(v, labels) for side, v in (("arm64", a), ("x86", x), ("float", fl))
                           if np.asarray(v).shape == fl.shape}
        d = row.get("diff") or {}
        if d.get("step") and not d.get("on_grid"):
            fails.append(f"{cid} {name}: outputs are not on the {d['step']:.6g} step grid: the step read from the model is wrong")
        for key in ("vs_float", "vs_x86"):
            verdict = gate.get(key) or {}
            row[f"gate_{key}"] = (verdict.get("outputs") or {}).get(name)
        rows.append(row)
    names = [r["output"] for r in rows]
    if names:
        fails += gate_failures(gate.get("vs_float"), f"{cid} arm64 vs float", names)
        fails += gate_failures(gate.get("vs_x86"), f"{cid} arm64 vs x86", names)
    extra = sorted(set(arm_out) - set(float_out))
    if extra:
        fails.append(f"{cid}: outputs {extra} have no float reference")
    return rows, fails


# ----------------------------------------------------------------------------- report
def _f(x: Any, nd: int = 4) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        if math.isinf(x):
            return "∞" if x > 0 else "-∞"
        return f"{x:.{nd}g}"
    return str(x)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


CPU_NOTES = {"cortex-a72": "Raspberry Pi 4's core, ARMv8.0-A", "cortex-a76": "Raspberry Pi 5's core, ARMv8.2-A: dotprod, fp16"}


def _num(x: Any) -> float | None:
    if isinstance(x, str):
        return {"inf": math.inf, "-inf": -math.inf}.get(x)
    return None if x is None else float(x)


def thresholds_text(th: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The thresholds that judge these outputs' kinds (the manifest's ``accuracy.thresholds``)."""
    kinds = {str((r.get("gate_vs_float") or {}).get("kind", "tensor")).split("(")[0] for r in rows} or {"tensor"}
    parts = []
    for kind in sorted(kinds):
        if kind in ("scores", "logits"):
            sc = th.get("scores") or {}
            parts.append(f"top-1 ≥ {th.get('min_top1_agreement')}, score error ≤ {sc.get('max_score_error')}")
        elif kind == "tensor":
            parts.append(f"cosine ≥ {th.get('min_cosine')}, SQNR ≥ {th.get('min_sqnr_db')} dB")
        else:
            parts.append(f"{kind}: {json.dumps(th.get(kind) or th)}")
    return "; ".join(parts)


def render(report: dict[str, Any]) -> str:
    """docs/arm64.md from the run's report dict (built by run.py)."""
    L = ["# aarch64 (emulated) verification", "",
         "Generated by `make test-arm64` (`tests/arm64/run.py`); do not edit by hand. "
         "What this covers and what it does not: [devices.md](devices.md#aarch64-verified-under-emulation).", "",
         f"Last run: {report['date']} on {report['host']}, {report['qemu']}, emulated CPUs "
         + " and ".join(f"`{c}` ({CPU_NOTES.get(c, '')})" for c in report["qemu_cpus"]) + f", Debian {report['root']['suite']} arm64 root "
         f"(Python {report['root_python']}), edge-sdk wheel `{report['wheel']}` built from this checkout"
         + (f" ({report['source']})" if report.get("source") else "") + ".", "",
         f"Result: **{'PASSED' if not report['failures'] else 'FAILED'}**"
         + (f" — {len(report['failures'])} failure(s), listed at the end." if report["failures"] else "."), "",
         "## Installs (one venv per device extra, aarch64; each run on both emulated CPUs)", "",
         "| venv | pip install | runtime on arm64 = x86 twin | numpy | `edge-sdk doctor` on arm64 | import hygiene (no TensorFlow) | `edge-sdk bench` says |",
         "|---|---|---|---|---|---|---|"]
    for v in report["venvs"]:
        arm = v["arm"]
        doc = arm.get("doctor", {}).get("profiles", {})
        docs = ", ".join(f"{p}: {doc.get(p, {}).get('status', '?')}" for p in v["doctor_profiles"])
        hy = arm.get("hygiene", {})
        clean = "clean" if hy and not hy.get("attempted") and not hy.get("loaded") else f"**tried {hy.get('attempted')}**"
        if hy.get("looked_up"):
            clean += f" (looked up, not imported: {', '.join(hy['looked_up'])})"
        said = "emulated, not the device's timings" if any(
            "not the device's" in w for w in (arm.get("bench") or {}).get("warnings", [])) else "**nothing**"
        L.append(f"| {v['name']} | `{v['install']}` | {v['dist']} {arm.get('versions', {}).get(v['dist'])} "
                 f"(x86: {v['x86'].get('versions', {}).get(v['dist'])}) | {arm.get('versions', {}).get('numpy')} | "
                 f"{docs} | {clean} | {said} |")
    conv = report.get("converter_versions") or {}
    L += ["", "Doctor's words: *native* = the profile's own runtime step runs here and this is its architecture; "
          "*fallback* = only a CPU stand-in runs (no Edge TPU here); *emulated* = the profile's runtime runs but the host "
          "is not that device's architecture (intel-cpu is an x86-64 profile: its OpenVINO IR runs on OpenVINO's ARM "
          "CPU plugin); *unavailable* = no runtime of its chain is installed in that venv. Hygiene: `import edge_sdk`, "
          "doctor, `load` and `infer` never tried to import tensorflow, keras, tf_keras, onnx2tf, nncf, torch, onnx or "
          "tf2onnx (a *looked up* package was only checked for presence with `importlib.util.find_spec`)."]
    L += ["", "## Parity: the same artifacts on aarch64 and on x86-64", "",
          "Each artifact is the quick start's (`examples/digits/digits_cnn.onnx` converted on the x86 host, "
          "calibrated on the 200 bundled calibration digits) and runs on the 300 bundled validation digits "
          "through `edge_sdk.load(...).infer_image` (the manifest's preprocessing). *x86 twin*: the same artifact "
          "with the same package versions in an x86-64 venv (like for like: only the architecture differs). "
          "*Converter host*: the same artifact on the converting workstation's pinned stack "
          f"(ai-edge-litert {conv.get('ai-edge-litert')}, onnxruntime {conv.get('onnxruntime')}, "
          f"openvino {conv.get('openvino')}), what the accuracy gate saw at conversion time. "
          "Δ is in quantization steps of the output's last quantized tensor (absolute where the output is "
          "computed in float); *values differing* counts values more than half a step apart, out of all.", "",
          "| venv | profile / format | ran on (arm64) | output | max Δ vs x86 twin | values differing | "
          "top-1 agreement vs x86 twin | max Δ vs converter host (its runtime) | top-1 accuracy arm64 / x86 twin / float |",
          "|---|---|---|---|---|---|---|---|---|"]
    gate = ["", "## Accuracy gate on aarch64: arm64 outputs vs the float model", "",
            "Judged by the project's own gate (`edge_sdk.converters.accuracy.compare`, what `edge-sdk convert` "
            "applies on the workstation) with the output kinds recorded in the manifest and the thresholds of the "
            "profile embedded in it; a failure fails the run. The arm64 outputs must also pass it against the x86 "
            "twin's. Cosine and SQNR are over all values, for the record.", "",
            "| venv | profile / format | the gate's figures (arm64 vs float) | cosine, SQNR | thresholds | vs x86 twin | verdict |",
            "|---|---|---|---|---|---|---|"]

    def delta(d: dict) -> str:
        if not d:
            return "n/a"
        if d.get("step"):
            return f"{_f(d.get('max_steps'), 3)} steps ({_f(d.get('max_abs'), 3)})"
        return f"{_f(d.get('max_abs'), 3)} (float output)"

    for c in report["cases"]:
        arm = c.get("arm") or {}
        ran = f"{arm.get('backend', '?')} [{arm.get('delegate', '?')}]" + (" **fallback**" if arm.get("fallback") else "")
        interp = (arm.get("details") or {}).get("interpreter")
        ran += f", {interp.split('.')[0]}" if interp else ""
        prec = (arm.get("details") or {}).get("inference_precision")
        if prec:
            xp = ((c.get("x86") or {}).get("details") or {}).get("inference_precision")
            ran += f", {prec}" + (f" (x86: {xp})" if xp else "")
        th = thresholds_text(c["thresholds"], c["rows"])
        verdict = "pass" if not c["failures"] else "**FAIL**"
        where = f"{c['venv']} | {c['profile']} / {c['format']}"
        if not c["rows"]:
            L.append(f"| {where} | {ran} | — | — | — | — | — | — |")
            gate.append(f"| {where} | — | — | {th} | — | {verdict} |")
        for r in c["rows"]:
            d = r.get("diff") or {}
            vc = r.get("vs_converter") or {}
            t1 = r.get("top1") or {}
            acc = " / ".join(_pct(t1.get(k)) for k in ("arm64", "x86", "float"))
            L.append(f"| {where} | {ran} | {r['output']} | {delta(d)} | {d.get('differing', '?')} / {d.get('values', '?')} | "
                     f"{_pct(r['vs_x86'].get('top1_agreement'))} | "
                     f"{delta(vc) + ' (' + vc['runtime'] + ')' if vc else 'n/a'} | {acc} |")
            gf, gx = r.get("gate_vs_float") or {}, r.get("gate_vs_x86") or {}
            figures = gf.get("line", "no verdict")
            cos = f"{_f(_num(gf.get('cosine')), 6)}, {_f(_num(gf.get('sqnr_db')), 4)} dB" if gf else "n/a"
            twin = ("passes" if gx.get("passed", not gx.get("failures")) else "**fails**") if gx else "n/a"
            gate.append(f"| {where} | {figures} | {cos} | {th} | {twin} | {verdict} |")
    L += gate
    st = report.get("selftest")
    L += ["", "## The harness can fail", ""]
    if st:
        L.append(f"Self-test: a tampered copy of the arm-cpu int8 ONNX ({st['what']}; manifest hashes updated so it "
                 f"loads) was run the same way in the `{st['venv']}` venv on aarch64. Expected: the gate fails it. "
                 f"Got: **{'failed as it must' if st['caught'] else 'PASSED — the harness cannot fail'}**"
                 + (f" — {st['failures'][0]}" if st["failures"] else "") + ".")
    else:
        L.append("Self-test not run in this run (`--no-selftest`).")
    L += ["", "## Not measured here", "",
          "Timing: every latency under qemu is the emulator's (`edge-sdk bench` says so above); thermals, "
          "NEON/dotprod performance, memory bandwidth and real delegates (Edge TPU, GPU, NPU) need the board. "
          "See [devices.md](devices.md#aarch64-verified-under-emulation).", "",
          f"Run time: {report['timing']}."]
    if report["failures"]:
        L += ["", "## Failures", ""] + [f"- {x}" for x in report["failures"]]
    return "\n".join(L) + "\n"
