"""Our graphs are valid before they are judged: every graph edge-sdk emits is checked as the
format's own tooling checks it, and a graph that fails is edge-sdk's bug (exit 70), named by its
step, op and node - never a hint that a runtime lacks a kernel.

* ONNX: ``onnx.checker`` with full (strict) shape inference, on the file as written. A source whose
  float model fails the same strict check (an exporter's quirk we inherited) is held to the plain
  checker instead: we answer for what we changed, not for what we were given.
* Every format: the gate loads it through the runtime facade first; a runtime that refuses the
  graph itself (ONNX Runtime's INVALID_GRAPH, a shape or type inference error) rather than an op
  it has no kernel for is the same bug (:func:`invalid_graph`).

Measured on the 270 distinct int8 ONNX artifacts of the practice and wider sets' cache (published
and rejected): all pass the strict check, in 4 s together.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from edge_sdk.errors import ConversionBugError

#: What a runtime says when the graph itself is invalid (not when it lacks a kernel for an op).
INVALID_GRAPH_MARKS = ("INVALID_GRAPH", "INVALID_PROTOBUF", "ShapeInferenceError", "TypeInferenceError",
                       "This is an invalid model")

_NODE = re.compile(r"\(op_type:\s*([\w.]+),\s*node name:\s*([^)]*)\)")
_ORT_NODE = re.compile(r"In Node, \(\"([^\"]*)\", (\w+),")

BUG_HINT = ("This is a bug in edge-sdk, not in your model or data: please report it with this message. "
            "The other formats and profiles were still converted.")


def _node(text: str) -> str:
    m = _NODE.search(text)
    if m:
        return f"node '{m.group(2).strip()}' ({m.group(1)})"
    m = _ORT_NODE.search(text)
    return f"node '{m.group(1)}' ({m.group(2)})" if m else ""


def _first(text: str) -> str:
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "") or "(no message)"


def check_onnx(path: Path, fmt: str, step: str, float_model: Path | None = None, cache: dict[str, Any] | None = None) -> None:
    """Check an ONNX file we wrote (strict shape inference), before anything judges it.

    Args:
        path: The emitted model.
        fmt: Its artifact format (for the message).
        step: What wrote it (``"QDQ quantizer"``, ``"float layers edit"``).
        float_model: The float model it was made from: where that fails the strict check too, the
            emitted one is held to the plain checker.
        cache: Where the float model's own verdict is kept between candidates.

    Raises:
        ConversionBugError: the emitted graph is invalid (exit 70), naming the step, op and node.
    """
    import onnx

    try:
        onnx.checker.check_model(str(path), full_check=True)
        return
    except Exception as exc:  # noqa: BLE001 - onnx raises ValidationError and InferenceError
        strict_error = exc
    if float_model is not None and not _strict_ok(float_model, cache):
        try:
            onnx.checker.check_model(str(path))
            return
        except Exception as exc:  # noqa: BLE001
            strict_error = exc
    text = _first(str(strict_error))
    where = _node(str(strict_error))
    raise ConversionBugError(f"edge-sdk emitted an invalid {fmt} graph at its {step} step"
                             + (f", {where}" if where else "") + f": {text}", BUG_HINT)


def _strict_ok(float_model: Path, cache: dict[str, Any] | None) -> bool:
    import onnx

    key = f"strict-onnx-check:{float_model}"
    if cache is not None and key in cache:
        return bool(cache[key])
    try:
        onnx.checker.check_model(str(float_model), full_check=True)
        ok = True
    except Exception:  # noqa: BLE001
        ok = False
    if cache is not None:
        cache[key] = ok
    return ok


def invalid_graph(message: str, fmt: str, runtime: str) -> ConversionBugError | None:
    """The bug to raise when a runtime refused a graph we emitted as invalid (None when its
    message is about something else: a missing kernel, a type it cannot run here)."""
    if not any(mark in message for mark in INVALID_GRAPH_MARKS):
        return None
    where = _node(message)
    return ConversionBugError(f"edge-sdk emitted an invalid {fmt} graph: {runtime} refuses it"
                              + (f" at {where}" if where else "") + f": {_first(message)[:400]}", BUG_HINT)


#: Loads a TFLite file in LiteRT, feeds zeros and invokes: what the crash guard's trial does, alone.
_LITERT_RUN = """
import sys, numpy as np
try:
    from ai_edge_litert.interpreter import Interpreter
except ImportError:
    from tflite_runtime.interpreter import Interpreter
it = Interpreter(model_path=sys.argv[1]); it.allocate_tensors()
for d in it.get_input_details():
    it.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
it.invoke()
"""


def _crashes(model: bytes, work: Path, timeout: float) -> bool:
    import subprocess
    import sys

    path = work / "bisect.tflite"
    path.write_bytes(model)
    try:
        proc = subprocess.run([sys.executable, "-c", _LITERT_RUN, str(path)], capture_output=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        return True
    return proc.returncode < 0  # killed by a signal: SIGSEGV, SIGABRT


def crashing_tflite_op(model_path: Path, work: Path, timeout: float = 60.0) -> str:
    """The first operator LiteRT crashes on, found by bisection: the model cut after its first k
    operators (their outputs made the graph's) is run in a child process, k halved each time (a
    crash in ``allocate_tensors`` or ``invoke`` of operator k shows once k is kept). Returns
    ``"CONV_2D (operator 3 of 12, output 'name')"``, or '' where the cut models do not crash alone."""
    from .tflite_native import _schema

    schema = _schema()
    import flatbuffers

    data = model_path.read_bytes()
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    work.mkdir(parents=True, exist_ok=True)

    def cut(k: int) -> bytes:
        model = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
        sub = model.subgraphs[0]
        sub.operators = sub.operators[:k + 1]
        sub.outputs = list(sub.operators[k].outputs)
        builder = flatbuffers.Builder(0)
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())

    model = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    ops = model.subgraphs[0].operators or []
    lo, hi = 0, len(ops) - 1
    if hi < 0 or not _crashes(cut(hi), work, timeout):
        return ""
    while lo < hi:
        mid = (lo + hi) // 2
        if _crashes(cut(mid), work, timeout):
            hi = mid
        else:
            lo = mid + 1
    op = ops[lo]
    code = model.operatorCodes[op.opcodeIndex]
    kind = names.get(max(code.builtinCode, code.deprecatedBuiltinCode), "?")
    if code.customCode:
        kind = code.customCode.decode(errors="replace")
    out = model.subgraphs[0].tensors[op.outputs[0]].name.decode(errors="replace") if len(op.outputs) else "?"
    return f"{kind} (operator {lo} of {len(ops)}, output '{out}')"


def crash_bug(message: str, fmt: str, runtime: str, model_path: Path, work: Path) -> ConversionBugError:
    """The bug to raise when the runtime crashed or hung on a file edge-sdk just made and hashed
    here (so it is no damage in transit), naming the op a bisection finds (TFLite)."""
    m = re.search(r"(crashed|hung) the \S+ runtime in a trial load \(([^)]*)\)", message)
    what = f"{'crashes' if not m or m.group(1) == 'crashed' else 'hangs'} {runtime} in a trial load" + \
        (f" ({m.group(2)})" if m else "")
    where = ""
    if fmt == "tflite-int8" and model_path.is_file():
        try:
            found = crashing_tflite_op(model_path, work)
        except Exception:  # noqa: BLE001 - the op is a pointer for the report; the bug stands without it
            found = ""
        where = f"; the first op it crashes on (bisection): {found}" if found else "; no single op crashes alone"
    return ConversionBugError(f"the {fmt} artifact edge-sdk just made {what}{where}. It was written and hashed here, "
                              "so this is a bug in the conversion, not a damaged file", BUG_HINT)
