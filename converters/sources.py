"""Read the user's source model: detect its format, hash it, list its inputs and outputs.

Source formats: ONNX (``.onnx``), TF SavedModel (a folder with ``saved_model.pb``), Keras
(``.keras``/``.h5``/``.hdf5``) and float TFLite (``.tflite``). Each reader turns "cannot read this" into
one :class:`~edge_sdk.errors.ModelLoadError`; heavy frameworks are imported only for the format
at hand. :func:`to_static_onnx` gives every source one common form: a float ONNX file with all
shapes fixed, whose tensor names match the source's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import numpy as np

from edge_sdk._deps import require
from edge_sdk.errors import ConversionError, ModelLoadError
from edge_sdk.fsutil import sha256_bytes, sha256_file
from edge_sdk.manifest import TensorSpec
from edge_sdk.registry import Registry

from .base import SourceModel
from .console import import_tensorflow, quiet

#: Opset used when a TF/TFLite source is exported to ONNX (tf2onnx 1.17 supports it).
TF2ONNX_OPSET = 17
SUPPORTED = "ONNX (.onnx), TF SavedModel (folder with saved_model.pb), Keras (.keras/.h5/.hdf5), float TFLite (.tflite)"


def detect_format(path: Path) -> str:
    """Name the source format of ``path``.

    Raises:
        ModelLoadError: the path does not exist or is of no supported kind.
    """
    if not path.exists():
        raise ModelLoadError(f"Model not found: {path}", "Check the path; supported: " + SUPPORTED)
    if path.is_dir():
        if (path / "saved_model.pb").is_file():
            return "savedmodel"
        raise ModelLoadError(f"{path} is a folder but not a TF SavedModel (no saved_model.pb).", "Supported: " + SUPPORTED)
    suffix = path.suffix.lower()
    kinds = {".onnx": "onnx", ".keras": "keras", ".h5": "keras", ".hdf5": "keras", ".tflite": "tflite"}
    if suffix not in kinds:
        raise ModelLoadError(f"Unsupported model file '{path.name}'.", "Supported: " + SUPPORTED)
    return kinds[suffix]


def _dtype_name(dtype) -> str:
    name = np.dtype(dtype).name
    return name if name in ("float32", "float16", "int8", "uint8", "int16", "int32", "int64", "bool") else "float32"


def _dims(shape) -> list[int]:
    return [int(d) if d is not None and int(d) > 0 else -1 for d in shape]


def _hash_source(path: Path) -> str:
    if path.is_file():
        return sha256_file(path)
    # A SavedModel is a folder: hash the sorted (relative path, file hash) list.
    parts = [f"{p.relative_to(path).as_posix()}:{sha256_file(p)}" for p in sorted(path.rglob("*")) if p.is_file()]
    return sha256_bytes("\n".join(parts).encode())


# ----------------------------------------------------------------------------- readers
def _read_onnx(path: Path) -> tuple[list[TensorSpec], list[TensorSpec]]:
    onnx = require("onnx", "reading ONNX models")
    try:
        model = onnx.load(str(path), load_external_data=False)
        onnx.checker.check_model(model)
    except Exception as exc:  # noqa: BLE001 - protobuf/checker raise many types: all mean "corrupt"
        raise ModelLoadError(f"Cannot read ONNX model {path}: {str(exc).splitlines()[0][:200]}",
                             "The file is corrupt or not ONNX; export it again.") from None
    inits = {i.name for i in model.graph.initializer}

    def spec(vi) -> TensorSpec:
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1 for d in tt.shape.dim]
        return TensorSpec(vi.name, dims, _dtype_name(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)))

    return ([spec(v) for v in model.graph.input if v.name not in inits], [spec(v) for v in model.graph.output])


def load_keras(path: Path):
    """Load a Keras model (inference only) or raise :class:`ModelLoadError`."""
    tf = import_tensorflow("reading Keras models")
    try:
        return tf.keras.models.load_model(str(path), compile=False)
    except Exception as exc:  # noqa: BLE001 - Keras raises many types for a bad file
        raise ModelLoadError(f"Cannot read Keras model {path}: {str(exc).splitlines()[0][:200]}",
                             "Save it again with model.save('model.keras').") from None


def keras_output_names(model) -> list[str]:
    names = list(getattr(model, "output_names", None) or [])
    return names if len(names) == len(model.outputs) else [f"output_{i}" for i in range(len(model.outputs))]


def _read_keras(path: Path):
    model = load_keras(path)
    ins = [TensorSpec(t.name.split(":")[0], _dims(t.shape), _dtype_name(t.dtype)) for t in model.inputs]
    outs = [TensorSpec(n, _dims(t.shape), _dtype_name(t.dtype)) for n, t in zip(keras_output_names(model), model.outputs)]
    return ins, outs


def load_signature(path: Path):
    """The ``serving_default`` (else the first) signature of a SavedModel."""
    tf = import_tensorflow("reading SavedModels")
    try:
        loaded = tf.saved_model.load(str(path))
    except Exception as exc:  # noqa: BLE001
        raise ModelLoadError(f"Cannot read SavedModel {path}: {str(exc).splitlines()[0][:200]}",
                             "Export it again with tf.saved_model.save or model.export().") from None
    sigs = dict(loaded.signatures)
    if not sigs:
        raise ModelLoadError(f"SavedModel {path} has no signatures.", "Export it with a serving signature.")
    return loaded, sigs.get("serving_default") or sigs[sorted(sigs)[0]]


def _read_savedmodel(path: Path):
    _, sig = load_signature(path)
    ins = [TensorSpec(k, _dims(s.shape), _dtype_name(s.dtype.as_numpy_dtype))
           for k, s in sorted(sig.structured_input_signature[1].items())]
    outs = [TensorSpec(k, _dims(s.shape), _dtype_name(s.dtype.as_numpy_dtype))
            for k, s in sorted(sig.structured_outputs.items())]
    return ins, outs


def tflite_interpreter(path: Path):
    """A LiteRT interpreter for ``path`` or :class:`ModelLoadError`."""
    litert = require("ai_edge_litert.interpreter", "reading TFLite models")
    try:
        return litert.Interpreter(model_path=str(path))
    except Exception as exc:  # noqa: BLE001
        raise ModelLoadError(f"Cannot read TFLite model {path}: {str(exc).splitlines()[0][:200]}",
                             "The file is corrupt or not a TFLite flatbuffer; convert it again.") from None


def _read_tflite(path: Path):
    it = tflite_interpreter(path)
    _check_custom_ops(path, it)

    def spec(d) -> TensorSpec:
        return TensorSpec(d["name"], _dims(d.get("shape_signature", d["shape"])), _dtype_name(d["dtype"]))

    return [spec(d) for d in it.get_input_details()], [spec(d) for d in it.get_output_details()]


def _check_custom_ops(path: Path, it) -> None:
    """A TFLite model whose custom ops LiteRT cannot run here (MediaPipe's face landmarks with
    attention: Landmarks2TransformMatrix, registered by MediaPipe's own runtime) cannot be run as
    the float reference, calibrated or checked: said now, before any work, instead of a
    RuntimeError from the interpreter half-way through. Custom ops LiteRT runs (MediaPipe's
    Convolution2DTransposeBias, TFLite_Detection_PostProcess) pass."""
    from .tflite_native import custom_ops

    customs = custom_ops(Path(path).read_bytes())
    if not customs:
        return
    try:
        it.allocate_tensors()
    except Exception as exc:  # noqa: BLE001 - LiteRT raises RuntimeError with the op's name
        text = str(exc)
        if "unresolved custom op" not in text.lower():
            return  # e.g. a dynamic shape still unresolved: the shape step says so later
        first = text.split("custom op:", 1)[-1].split(".")[0].strip() or "?"
        raise ConversionError(
            f"{Path(path).name} uses custom op(s) {', '.join(customs)}, and LiteRT cannot run {first}: it is "
            "registered by the application that made the model (MediaPipe's own runtime, for example), not by "
            "LiteRT, ONNX Runtime or OpenVINO. edge-sdk needs to run the float model to calibrate it and to "
            "check the int8 result against it.",
            "Use a variant of the model without these ops (MediaPipe: face_landmark.tflite instead of "
            "face_landmark_with_attention.tflite), or export it again from its training framework without them.") from None


#: ONNX op types that only a quantized model has: integer compute (ONNX Runtime's dynamic
#: quantization writes DynamicQuantizeLSTM, MatMulInteger, DynamicQuantizeLinear...) or quantized
#: activations (QuantizeLinear; a DequantizeLinear alone may only unpack compressed weights).
QUANTIZED_OPS = frozenset({
    "DynamicQuantizeLSTM", "DynamicQuantizeMatMul", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger",
    "MatMulIntegerToFloat", "QLinearConv", "QLinearMatMul", "QLinearAdd", "QLinearMul", "QLinearSigmoid",
    "QLinearLeakyRelu", "QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearConcat", "QLinearSoftmax",
    "QGemm", "QAttention", "QEmbedLayerNormalization", "MatMulNBits", "QuantizeLinear"})


def refuse_quantized(source: SourceModel, fmt: str) -> None:
    """An ONNX source that is already quantized (``source.quantized_ops``, found when it was read)
    cannot be calibrated to int8 again: ONNX Runtime's quantizer failed on ddddocr's recognizer
    (DynamicQuantizeLSTM) with "KeyError: '140_scale'", onnx2tf with "no converter for
    DynamicQuantizeLSTM". Said per format, naming the ops."""
    found = source.quantized_ops
    if found:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(found.items(), key=lambda kv: -kv[1]))
        raise ConversionError(
            f"{Path(source.path).name} is already quantized ({ops}); {fmt} quantizes a float model to int8 with the "
            "calibration data, and a quantized one cannot be quantized again.",
            "Convert the float model this one was quantized from (before onnxruntime's quantize_dynamic or "
            "quantize_static). Every int8 format gives this answer: none quantizes quantized weights again.")


READERS: Registry[Callable] = Registry("source format", ModelLoadError)
READERS.register("onnx", _read_onnx)
READERS.register("keras", _read_keras)
READERS.register("savedmodel", _read_savedmodel)
READERS.register("tflite", _read_tflite)


def read_source(path: str | Path) -> SourceModel:
    """Detect, hash and describe the source model.

    Raises:
        ModelLoadError: missing, unsupported, unreadable or corrupt model.
    """
    path = Path(path)
    fmt = detect_format(path)
    ins, outs = READERS.get(fmt)(path)
    if not ins or not outs:
        raise ModelLoadError(f"{path} declares no inputs or no outputs.", "Export the model with its inputs and outputs.")
    batch_axes, image_size, quantized = _onnx_facts(path) if fmt == "onnx" else ({}, None, {})
    return SourceModel(path=path, format=fmt, sha256=_hash_source(path), inputs=ins, outputs=outs,  # type: ignore[arg-type]
                       batch_axes=batch_axes, image_size=image_size, quantized_ops=quantized)


def _onnx_facts(path: Path) -> tuple[dict[str, list[int]], tuple[int, int] | None, dict[str, int]]:
    """What an ONNX file says beyond its tensor specs: per input the axes past the first whose
    symbolic name is the batch's (the name of some input's dynamic dim 0), the ``(height,
    width)`` its metadata records as the image size (Ultralytics writes ``imgsz: [640, 640]`` or
    ``640``) or None, and the count of each op type only a quantized model has (:data:`QUANTIZED_OPS`)."""
    onnx = require("onnx", "reading ONNX models")
    model = onnx.load(str(path), load_external_data=False)
    nums = [int(v) for v in re.findall(r"\d+", {p.key: p.value for p in model.metadata_props}.get("imgsz", ""))[:3]]
    nums = nums * 2 if len(nums) == 1 else nums
    image_size = (nums[0], nums[1]) if len(nums) == 2 and all(0 < n <= 16384 for n in nums) else None
    quantized: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type in QUANTIZED_OPS:
            quantized[node.op_type] = quantized.get(node.op_type, 0) + 1
    return _batch_axes(model.graph), image_size, quantized


def _batch_axes(graph) -> dict[str, list[int]]:
    """Input name -> the axes past the first named like the batch (some input's dynamic dim 0)."""
    inits = {i.name for i in graph.initializer}
    dims = {v.name: list(v.type.tensor_type.shape.dim) for v in graph.input if v.name not in inits}
    batch = {d[0].dim_param for d in dims.values() if d and d[0].dim_param}
    out = {}
    for name, d in dims.items():
        axes = [i for i, x in enumerate(d) if i > 0 and x.dim_param and x.dim_param in batch and not x.dim_value]
        if axes:
            out[name] = axes
    return out


# ----------------------------------------------------------------------------- static ONNX
def with_static_outputs(source: SourceModel, input_shapes: dict[str, list[int]]) -> SourceModel:
    """``source`` with the output shapes its ONNX graph has at ``input_shapes`` (one run with zeros
    where shape inference leaves a dim open, as an Ultralytics export with dynamic height/width
    does); ``source`` itself when its outputs are static already or it is not ONNX.

    Raises:
        ConversionError: the graph does not run at that shape.
    """
    if source.format != "onnx" or all(d > 0 for o in source.outputs for d in o.shape):
        return source
    import dataclasses

    onnx = require("onnx", "reading ONNX models")
    fixed = fix_onnx_shapes(onnx.load(str(source.path)), input_shapes)
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in fixed.graph.output}
    return dataclasses.replace(source, outputs=[dataclasses.replace(o, shape=shapes.get(o.name, o.shape))
                                                for o in source.outputs])


def fix_onnx_shapes(model, input_shapes: dict[str, list[int]]):
    """Fix the inputs of an ONNX ``ModelProto`` to ``input_shapes`` and make every output static.

    Shapes are re-inferred after fixing; outputs whose shape inference leaves open (e.g. behind
    a computed Reshape) get the shape a real run with zeros produces.

    Raises:
        ConversionError: an output stays dynamic, or the graph does not run at that shape.
    """
    onnx = require("onnx", "fixing ONNX shapes")
    ort = require("onnxruntime", "fixing ONNX shapes")
    check_ops(model)
    inits = {i.name for i in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        dims = vi.type.tensor_type.shape.dim
        for d, v in zip(dims, input_shapes[vi.name]):
            d.Clear()
            d.dim_value = int(v)
    del model.graph.value_info[:]
    for vi in model.graph.output:
        vi.type.tensor_type.ClearField("shape")
    model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        feed = {i.name: np.zeros(input_shapes[i.name], dtype=_ort_dtype(i.type)) for i in sess.get_inputs()}
        real = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))
    except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types
        raise ConversionError(f"The model does not run with the static input shapes {input_shapes}: {_ort_message(exc)}",
                              "Check --input-shape values against what the model accepts.") from None
    for vi in model.graph.output:
        shape = real[vi.name].shape
        tt = vi.type.tensor_type
        inferred = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim] if tt.HasField("shape") else []
        if inferred and any(i not in (-1, s) for i, s in zip(inferred, shape)):
            raise ConversionError(f"Output '{vi.name}': inferred shape {inferred} disagrees with the real shape {list(shape)}.")
        tt.ClearField("shape")
        for s in shape:
            tt.shape.dim.add().dim_value = int(s)
    return model


#: Op domains the conversion tools know (ONNX Runtime contrib ops are checked by ORT itself).
_KNOWN_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")


def unknown_ops(model) -> dict[str, list[str]]:
    """Ops outside the standard ONNX domains (or unknown to them): ``{"domain::Op": [node names]}``."""
    from onnx import defs

    bad: dict[str, list[str]] = {}
    for node in model.graph.node:
        if node.domain == "com.microsoft":
            continue
        known = node.domain in _KNOWN_DOMAINS and defs.has(node.op_type, node.domain or "")
        if not known:
            key = f"{node.domain + '::' if node.domain else ''}{node.op_type}"
            bad.setdefault(key, []).append(node.name or "<unnamed>")
    return bad


def check_ops(model) -> None:
    """Refuse a graph with non-standard ops that the installed runtimes really cannot run.

    ONNX Runtime (a session is created) and OpenVINO (``read_model``) are asked, not assumed;
    a TFLite custom op that tf2onnx passed through (``TFL_...``) is said to run in LiteRT.

    Raises:
        ConversionError: naming each op, which runtimes can and cannot run it, and what to do.
    """
    bad = unknown_ops(model)
    if not bad:
        return
    verdicts = _runtime_verdicts(model)
    if verdicts.get(ORT_LABEL) is True:
        return  # a custom op ONNX Runtime has (e.g. a registered contrib op): the ONNX formats can run it
    listing = "; ".join(f"{op} (nodes: {', '.join(n[:40] for n in nodes[:2])}{'...' if len(nodes) > 2 else ''})"
                        for op, nodes in bad.items())
    can = [r for r, ok in verdicts.items() if ok is True]
    cannot = [r for r, ok in verdicts.items() if ok is False]
    tflite_custom = [op.split("TFL_", 1)[1] for op in bad if "TFL_" in op]
    msg = f"Op(s) {listing}: checked here, {' and '.join(cannot) or 'no runtime'} cannot run them"
    if can:
        msg += f"; {' and '.join(can)} can"
    hint = "Replace them with standard ONNX ops before export."
    if tflite_custom:
        msg += f"; they are TFLite custom op(s) ({', '.join(tflite_custom)}) that LiteRT runs"
        hint = "The TFLite formats (profiles arm-cpu, coral-edgetpu) take the model as it is; ONNX targets need it without the custom op."
    elif verdicts.get(OV_LABEL) is True:
        hint = "OpenVINO runs them: the intel-cpu profile can take this model. " + hint
    raise ConversionError(msg + ".", hint)


#: How the op check names the runtimes it tried (in its messages).
ORT_LABEL, OV_LABEL = "ONNX Runtime", "OpenVINO"


def _runtime_verdicts(model) -> dict[str, bool | None]:
    """Can ONNX Runtime / OpenVINO build this graph? (None: that runtime is not installed.)"""
    import tempfile

    from edge_sdk._deps import available

    out: dict[str, bool | None] = {}
    blob = model.SerializeToString()
    if available("onnxruntime"):
        ort = require("onnxruntime", "checking ops")
        try:
            ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
            out[ORT_LABEL] = True
        except Exception:  # noqa: BLE001 - ORT raises its own types for unknown ops
            out[ORT_LABEL] = False
    if available("openvino"):
        ov = require("openvino", "checking ops")
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "m.onnx"
            path.write_bytes(blob)
            try:
                ov.Core().read_model(str(path))
                out[OV_LABEL] = True
            except Exception:  # noqa: BLE001 - OpenVINO raises RuntimeError subclasses
                out[OV_LABEL] = False
    return out


def _ort_message(exc: BaseException) -> str:
    """ORT's message without its C++ source location and signature."""
    text = re.sub(r"/onnxruntime_src/\S+ [^)]*\)\s*", "", str(exc))
    return text.strip()[:300]


def _ort_dtype(type_str: str):
    table = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
             "tensor(int32)": np.int32, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}
    return table.get(type_str, np.float32)


def _tf_function_to_onnx(fn, source: SourceModel, input_shapes: dict[str, list[int]], out: Path) -> None:
    tf = import_tensorflow("exporting TF models to ONNX")
    tf2onnx = require("tf2onnx", "exporting TF models to ONNX")
    specs = [tf.TensorSpec(input_shapes[s.name], tf.dtypes.as_dtype(s.dtype), name=s.name) for s in source.inputs]
    names = [s.name for s in source.inputs]

    @tf.function(input_signature=specs)
    def serve(*args):
        return fn(dict(zip(names, args)))

    try:
        with quiet(Path(out).parent / "tf2onnx.log"):
            tf2onnx.convert.from_function(serve, input_signature=specs, opset=TF2ONNX_OPSET, output_path=str(out))
    except Exception as exc:  # noqa: BLE001 - tf2onnx raises anything
        from .tool_errors import tool_error

        raise tool_error("tf2onnx", exc, f"tf2onnx could not convert {source.path.name}",
                         "An op may be unsupported by ONNX; try an OpenVINO or TFLite profile.") from None


def to_static_onnx(source: SourceModel, input_shapes: dict[str, list[int]], out: str | Path,
                   tflite_path: Path | None = None) -> Path:
    """Write the source as a float ONNX file with all shapes static; tensor names match the source.

    Args:
        source: The source model.
        input_shapes: Static shape per input name.
        out: Path of the ONNX file to write.
        tflite_path: For a TFLite source, the file tf2onnx reads (the folded form; default the source).

    Returns:
        ``out``.

    Raises:
        ConversionError: the export or the shape fixing fails.
    """
    onnx = require("onnx", "fixing ONNX shapes")
    out = Path(out)
    out_names = [s.name for s in source.outputs]
    if source.format == "onnx":
        model = onnx.load(str(source.path))
    elif source.format == "keras":
        kmodel = load_keras(source.path)
        _tf_function_to_onnx(lambda feed: dict(zip(out_names, _as_list(kmodel(feed if len(feed) > 1 else next(iter(feed.values())), training=False)))),
                             source, input_shapes, out)
        model = onnx.load(str(out))
    elif source.format == "savedmodel":
        _, sig = load_signature(source.path)
        _tf_function_to_onnx(lambda feed: sig(**feed), source, input_shapes, out)
        model = onnx.load(str(out))
    else:
        import_tensorflow("exporting TFLite models to ONNX")  # tf2onnx imports TF: quietly, first
        tf2onnx = require("tf2onnx", "exporting TFLite models to ONNX")
        try:
            with quiet(Path(out).parent / "tf2onnx.log"):
                tf2onnx.convert.from_tflite(str(tflite_path or source.path), opset=TF2ONNX_OPSET, output_path=str(out))
        except Exception as exc:  # noqa: BLE001
            raise _tf2onnx_error(source, exc) from None
        model = onnx.load(str(out))
    _check_names(model, source)
    model = fix_onnx_shapes(model, input_shapes)
    name_nodes(model)
    self_contained_branches(model)
    onnx.save(model, str(out))
    return out


def self_contained_branches(model) -> int:
    """Make every ``If`` readable by OpenVINO and onnx2tf, its meaning unchanged: a condition of shape
    ``[1, 1]`` (valid ONNX: one element) becomes a scalar, and the outer initializers a branch reads
    are copied into the branch.

    openWakeWord's classifiers (``hey_jarvis_v0.1.onnx``) run a verifier head under ``If(score >=
    t)``: OpenVINO refused the ``[1, 1]`` condition, and onnx2tf lost the branch's outer weights
    (``KeyError: 'verifier_model.1.weight'``).

    Idempotent: the TFLite route's onnx2tf copy of an already static ONNX form runs it again.

    Returns:
        How many changes were made (conditions made scalar, initializers copied into branches).
    """
    from onnx import helper, numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    changed, moved = 0, set()
    for node in list(graph.node):
        if node.op_type != "If":
            continue
        for attr in node.attribute:
            if attr.type != attr.GRAPH:
                continue
            sub = attr.g
            own = {i.name for i in sub.initializer} | {i.name for i in sub.input} | {o for n in sub.node for o in n.output}
            for name in sorted({i for n in sub.node for i in n.input} - own):
                if name in inits:
                    sub.initializer.append(inits[name])
                    moved.add(name)
                    changed += 1
        # Named after the If's first output (unique in a valid graph, where node names may be
        # empty); a condition made scalar on an earlier pass is left as it is.
        tag = f"{node.output[0]}/cond_scalar"
        if node.input[0] == tag:
            continue
        shape = numpy_helper.from_array(np.zeros(0, np.int64), f"{tag}_shape")
        graph.initializer.append(shape)
        graph.node.insert(list(graph.node).index(node),
                          helper.make_node("Reshape", [node.input[0], shape.name], [tag], name=tag))
        node.input[0] = tag
        changed += 1
    # The copies' originals, when the main graph itself does not read them (ONNX Runtime warns
    # about every unused initializer it removes).
    read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    for init in [i for i in graph.initializer if i.name in moved and i.name not in read]:
        graph.initializer.remove(init)
    return changed


def name_nodes(model) -> int:
    """Give every unnamed node a unique name (``<op>_<index>``): recovery keeps layers float, and
    sensitivity reports them, by node name; ``onnx.helper`` graphs often leave names empty.

    Returns:
        How many nodes were named.
    """
    taken = {n.name for n in model.graph.node if n.name}
    named = 0
    for i, node in enumerate(model.graph.node):
        if node.name:
            continue
        name, k = f"{node.op_type}_{i}", 0
        while name in taken:
            k += 1
            name = f"{node.op_type}_{i}_{k}"
        node.name = name
        taken.add(name)
        named += 1
    return named


def _tf2onnx_error(source: SourceModel, exc: BaseException) -> ConversionError:
    """tf2onnx's failure, naming the custom ops it cannot read and who can run the model instead."""
    from .tflite_native import custom_ops

    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    customs = custom_ops(Path(source.path).read_bytes())
    if customs or "custom" in text.lower() or "Unsupported ops" in text:
        ops = ", ".join(customs) or "custom ops"
        return ConversionError(
            f"No ONNX form of {source.path.name}: tf2onnx {version_of_tf2onnx()} cannot read its TFLite op(s) {ops} "
            f"({text}); ONNX Runtime and TensorRT formats need that form.",
            "LiteRT runs the model as it is: the TFLite formats (profiles arm-cpu, coral-edgetpu) still convert. "
            "For ONNX targets, export the model without the custom op.")
    return ConversionError(f"tf2onnx could not convert {source.path.name}: {text}",
                           "The TFLite formats (arm-cpu, coral-edgetpu) and OpenVINO (intel-cpu) read TFLite "
                           "directly and may still convert.")


def version_of_tf2onnx() -> str:
    from edge_sdk._deps import version_of

    return version_of("tf2onnx") or ""


def _as_list(y) -> list:
    return list(y) if isinstance(y, (list, tuple)) else [y]


def _check_names(model, source: SourceModel) -> None:
    inits = {i.name for i in model.graph.initializer}
    got_in = sorted(v.name for v in model.graph.input if v.name not in inits)
    got_out = sorted(v.name for v in model.graph.output)
    if got_in != sorted(s.name for s in source.inputs) or got_out != sorted(s.name for s in source.outputs):
        raise ConversionError(
            f"The ONNX form of {source.path.name} has inputs {got_in} / outputs {got_out}, "
            f"not the source's {[s.name for s in source.inputs]} / {[s.name for s in source.outputs]}.",
            "Give the model's inputs and outputs plain names (letters, digits, '_').")

