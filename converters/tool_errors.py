"""The conversion tools' failures, said as their real cause: one table for every tool edge-sdk
drives (ONNX Runtime's quantizer, NNCF, OpenVINO's frontends, TensorFlow's TFLite converter and
quantizer, tf2onnx), each known failure mapped to a cause and a hint, tested with the tool's real
message (``tests/test_tool_errors.py``).

What a user reads is the tool's own first informative line, cleaned: no ANSI colours, no MLIR
``loc(...)`` or source-file locations (TensorFlow glues the Python frame that traced the function
into its error, which was one of edge-sdk's own files), no C++ ``Check ... failed at src/...``
lines, never an empty message (OpenVINO's "FrontEnd API failed with OpConversionFailure:" is
followed by the line that says which op). A Python error raised inside the tool's own code
(``ValueError: The truth value of an array ... is ambiguous`` in ONNX Runtime's quantizer) is said
to be the tool's, with its file and line, and never blamed on the calibration data.
"""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass

from edge_sdk.errors import ConversionError

#: The tools, their names as a user knows them, and where their Python code lives (for the frame).
TOOLS = {
    "ort-quantizer": ("ONNX Runtime's quantizer", ("onnxruntime/quantization/",)),
    "nncf": ("NNCF", ("nncf/",)),
    "ov-frontend": ("OpenVINO", ("openvino/",)),
    "tflite": ("TensorFlow's TFLite converter", ("tensorflow/lite/", "tensorflow/compiler/mlir/")),
    "tf2onnx": ("tf2onnx", ("tf2onnx/",)),
}

#: Python errors that, raised in a tool's own code, are that tool's internal failure.
INTERNAL = (TypeError, ValueError, KeyError, IndexError, AttributeError, AssertionError, ZeroDivisionError,
            NotImplementedError, UnboundLocalError)

OTHER_FORMATS = ("onnx-qdq runs on ONNX Runtime (profiles arm-cpu, jetson-orin), openvino-ir on OpenVINO "
                 "(intel-cpu), tflite-int8 on LiteRT (arm-cpu, coral-edgetpu)")


@dataclass(frozen=True)
class Known:
    """One known failure: the tool, what its message says, the cause and the hint (``{0}``... are
    the pattern's groups)."""

    tool: str
    pattern: str
    cause: str
    hint: str


KNOWN: tuple[Known, ...] = (
    Known("tflite", r"'tf\.(\w+)' op is neither a custom op nor a flex op",
          "op {0} (tf.{0}) has no TFLite builtin kernel, and edge-sdk makes no Flex or custom ops",
          "The TFLite formats need every op as a TFLite builtin: rewrite {0} before export (a GELU's Erf: its tanh "
          "approximation), or use a format whose runtime has it: onnx-qdq or openvino-ir."),
    Known("nncf", r"Could not find a node (\S+?)!? in NNCFGraph",
          "NNCF lost node {0} while building its graph of the model: a limitation of NNCF with this graph, "
          "not a problem with the calibration data",
          "Keep that node float (--float-nodes '{0}'), or use another format: " + OTHER_FORMATS + "."),
    Known("nncf", r"dataset must not be empty|(?:shape|Shape) .* does not match|[Ii]ncompatible .*shape",
          "NNCF could not run the calibration data through the model",
          "Check the calibration data against the model's inputs (names, shapes, dtypes)."),
    Known("ov-frontend", r"No (?:translator|conversion rule) found for (\S+?)(?: node)?\.",
          "OpenVINO's frontend has no translator for op {0}",
          "Replace the op before export, or use a format whose runtime has it: onnx-qdq or tflite-int8."),
    Known("ov-frontend", r"No conversion rule found for operations: ([^\n]+?)(?: Summary|$)",
          "OpenVINO's frontend has no conversion rule for {0}",
          "Replace the op before export, or use a format whose runtime has it: onnx-qdq or tflite-int8."),
    Known("ov-frontend", r"While validating ONNX node '<Node\((\w+)\): ([^>]*)>' (.+?)(?: Summary|$)",
          "OpenVINO's ONNX frontend cannot convert node '{1}' ({0}): {2}",
          "Export that op with settings OpenVINO supports, or use another format (onnx-qdq or tflite-int8)."),
    Known("ov-frontend", r"Conversion (?:is failed|failed) for:? ([\w.:/-]+)",
          "OpenVINO's frontend failed to convert {0}",
          "Use another format (onnx-qdq or tflite-int8), or simplify that part of the model before export."),
    Known("tf2onnx", r"Unsupported ops: (.+)",
          "tf2onnx has no ONNX form for {0}",
          "The TFLite formats and OpenVINO read the model directly and may still convert."),
    Known("ort-quantizer", r"Could not find an implementation for (\w+)",
          "ONNX Runtime has no CPU kernel for {0} at these types, so the quantizer cannot calibrate through it",
          "Use the openvino-ir or tflite-int8 format, or export the op with supported types."),
)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: A source location: MLIR's loc(...), and file paths with a line (``/x/y.py:583:1:``, ``src/a.cpp:12``).
_LOCATION = re.compile(r"loc\((?:[^()]|\([^()]*\))*\)|(?:(?<![^\s(])(?:[A-Za-z]:|[\w.-]*[\w-]))?"
                       r"(?:[/\\][\w.@+~-]+)+\.(?:py|pyx|cc|cpp|c|h|hpp|mlir)(?::\d+)+:?")
#: Lines that only say where in a tool's C++ source a check failed.
_SOURCE_ONLY = re.compile(r"^(?:Exception from\s|Check\s'.*'\s+failed at\s|Traceback \(most recent call last\)|File \"|"
                          r"<unknown>:|.*\bnote:\s)")


def clean(text: str) -> list[str]:
    """The informative lines of a tool's message, locations removed (none empty)."""
    out = []
    for raw in _ANSI.sub("", str(text)).splitlines():
        line = raw.strip()
        if not line or _SOURCE_ONLY.match(line):
            continue
        line = re.sub(r"\s{2,}", " ", re.sub(r"\(\s*\)", "", _LOCATION.sub("", line))).strip(" :")
        line = re.sub(r"^(?:error|Error)\s*:\s*", "", line).strip()
        if line and line not in out:
            out.append(line)
    return out


def first_line(exc: BaseException, limit: int = 300) -> str:
    """What the tool said, in one line: its first informative line, with the next one where the first
    ends in a colon (the cause follows it) or names nothing but a failed step."""
    lines = clean(str(exc))
    if not lines:
        return type(exc).__name__
    text = lines[0]
    if len(lines) > 1 and (str(exc).strip().splitlines()[0].rstrip().endswith(":") or len(text) < 40
                           or text.startswith("Could not translate MLIR")):
        text += ": " + lines[1]
    return text[:limit]


def tool_frame(exc: BaseException, tool: str) -> str:
    """The innermost frame of ``exc``'s traceback inside the tool's own package, as
    ``package/file.py:line (function)`` ('' if none)."""
    prefixes = TOOLS[tool][1]
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = frame.filename.replace("\\", "/")
        for prefix in prefixes:
            if f"/{prefix}" in path:
                return f"{prefix}{path.rsplit('/' + prefix, 1)[1]}:{frame.lineno} ({frame.name})"
    return ""


def tool_error(tool: str, exc: BaseException, doing: str, hint: str) -> ConversionError:
    """The :class:`ConversionError` for ``exc`` raised by ``tool`` while ``doing`` (``"NNCF could not
    quantize model.onnx"``): a known failure's cause and hint; else a Python error inside the tool's
    own code said as such, with its frame; else the tool's first line with ``hint``."""
    said = first_line(exc)
    whole = " ".join(clean(str(exc)))
    for known in KNOWN:
        if known.tool != tool:
            continue
        m = re.search(known.pattern, whole)
        if m:
            groups = [g.strip().rstrip(".") for g in m.groups()] if m.groups() else []
            return ConversionError(f"{doing}: {known.cause.format(*groups)} ({TOOLS[tool][0]} said: {said})",
                                   known.hint.format(*groups))
    frame = tool_frame(exc, tool)
    if isinstance(exc, INTERNAL) and frame:
        return ConversionError(
            f"{doing}: {TOOLS[tool][0]} failed inside its own code ({type(exc).__name__}: {said}, at {frame}); "
            "the model has a pattern it does not handle there",
            "This is not a problem with your calibration data. Keep the layers around it float (--float-nodes), "
            f"or use another format: {OTHER_FORMATS}.")
    return ConversionError(f"{doing}: {said}", hint)
