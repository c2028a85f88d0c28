"""Float TFLite -> int8 TFLite without leaving TFLite: fold, calibrate with LiteRT, quantize with MLIR.

Model-zoo TFLite files (MediaPipe's above all) carry no SignatureDef, sparse weights behind
``DENSIFY``, fp16 weights behind ``DEQUANTIZE`` and custom ops that only LiteRT's XNNPACK runs
(``Convolution2DTransposeBias``). Every other tool trips on one of these. This route:

1. **folds** ``DENSIFY``/``DEQUANTIZE`` chains over constants into dense float32 constants
   (:func:`fold_constants`), computed by LiteRT itself on a sub-model of just those ops, so
   sparse and fp16 weights are read exactly as the runtime reads them. Every route (OpenVINO's
   TFLite frontend, tf2onnx for the ONNX formats) starts from this dense model;
2. writes the static input shapes (:func:`static_shapes`);
3. **calibrates** by running the model in the LiteRT interpreter (the one that runs the custom
   ops) over the calibration feeds and recording every float activation's min/max in the
   flatbuffer (what TensorFlow's own calibrator records; no signature needed);
4. **quantizes** with TensorFlow's MLIR quantizer (``mlir_quantize``, the quantizer behind
   ``TFLiteConverter``), with the profile's weight granularity and I/O dtypes, and with nodes or
   op types kept in float on request (mixed precision). Custom ops stay float, with
   quantize/dequantize around them, and are reported by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import numpy as np

from edge_sdk._deps import require
from edge_sdk.errors import ConversionError

FOLDABLE = ("DENSIFY", "DEQUANTIZE")


def _schema():
    return require("ai_edge_litert.schema_py_generated", "rewriting TFLite models")


def _builtin_names(schema) -> dict[int, str]:
    return {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_") and isinstance(v, int)}


def _load(model: bytes):
    schema = _schema()
    try:
        return schema, schema.ModelT.InitFromPackedBuf(bytearray(model), 0)
    except Exception as exc:  # noqa: BLE001 - flatbuffers raises assorted errors on garbage
        raise ConversionError(f"Not a readable TFLite model ({type(exc).__name__}).") from None


def _pack(m, size_hint: int) -> bytes:
    import flatbuffers

    builder = flatbuffers.Builder(size_hint + 1024)
    builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _op_names(schema, m) -> list[str]:
    names = _builtin_names(schema)
    out = []
    for oc in m.operatorCodes:
        code = max(oc.builtinCode, oc.deprecatedBuiltinCode)
        name = names.get(code, f"BUILTIN_{code}")
        if name == "CUSTOM":
            custom = oc.customCode.decode() if isinstance(oc.customCode, bytes) else str(oc.customCode)
            name = f"CUSTOM:{custom}"
        out.append(name)
    return out


def used_ops(model: bytes) -> set[str]:
    """Names of the ops a TFLite model uses, custom ones as ``CUSTOM:<name>``."""
    schema, m = _load(model)
    used = {m.subgraphs[s].operators[k].opcodeIndex for s in range(len(m.subgraphs or []))
            for k in range(len(m.subgraphs[s].operators or []))}
    names = _op_names(schema, m)
    return {names[i] for i in used}


def custom_ops(model: bytes) -> list[str]:
    """Names of the custom ops a TFLite model uses (e.g. ``Convolution2DTransposeBias``)."""
    return sorted(n.split(":", 1)[1] for n in used_ops(model) if n.startswith("CUSTOM:"))


def _is_const(m, sg, idx: int) -> bool:
    t = sg.tensors[idx]
    buf = m.buffers[t.buffer] if 0 <= t.buffer < len(m.buffers) else None
    return buf is not None and ((buf.data is not None and len(buf.data) > 0) or (buf.offset or 0) > 1)


def fold_constants(model: bytes) -> tuple[bytes, dict[str, int]]:
    """Replace ``DENSIFY``/``DEQUANTIZE`` chains over constants by dense float32 constants.

    Returns:
        (the folded model, ``{op name: count folded}``); the input itself when there is nothing to fold.

    Raises:
        ConversionError: the model cannot be read, or LiteRT cannot evaluate the folded ops.
    """
    schema, m = _load(model)
    if not m.subgraphs:
        raise ConversionError("The TFLite model has no subgraph.")
    sg = m.subgraphs[0]
    names = _op_names(schema, m)
    fold, made, counts = [], set(), {}
    for k, op in enumerate(sg.operators or []):
        name = names[op.opcodeIndex]
        if name in FOLDABLE and all(i < 0 or i in made or _is_const(m, sg, i) for i in op.inputs):
            fold.append(k)
            made.update(int(o) for o in op.outputs)
            counts[name] = counts.get(name, 0) + 1
    if not fold:
        return model, {}
    consumed = {int(i) for k, op in enumerate(sg.operators) if k not in set(fold) for i in op.inputs if i >= 0}
    keep = sorted({int(o) for k in fold for o in sg.operators[k].outputs} & (consumed | {int(o) for o in sg.outputs}))
    values = _evaluate(model, [sg.operators[k] for k in fold], keep)
    for idx in keep:
        buf = schema.BufferT()
        buf.data = np.frombuffer(np.ascontiguousarray(values[idx]).tobytes(), np.uint8)
        m.buffers.append(buf)
        t = sg.tensors[idx]
        t.buffer = len(m.buffers) - 1
        t.sparsity = None
    dropped = set(fold)
    sg.operators = [op for k, op in enumerate(sg.operators) if k not in dropped]
    used = {int(i) for op in sg.operators for i in list(op.inputs) + list(op.outputs) if i >= 0}
    used |= {int(i) for i in list(sg.inputs) + list(sg.outputs)}
    for idx, t in enumerate(sg.tensors):  # the sparse / fp16 originals: nobody reads them any more
        if idx not in used and 0 <= t.buffer < len(m.buffers) and idx not in keep:
            m.buffers[t.buffer].data = None
    return _pack(m, len(model) + sum(v.nbytes for v in values.values())), counts


def decompose_prelu(model: bytes) -> tuple[bytes, int]:
    """Rewrite every ``PRELU`` as ``MUL`` (x1, fused RELU), ``SUB``, ``MUL``, ``ADD``:
    ``relu(x) + alpha * (x - relu(x))``.

    XNNPACK (LiteRT 2.1 and 2.3) does not take int8 ``PRELU``: each one stays on LiteRT's own
    kernels and cuts the delegated graph in two. On MediaPipe's BlazePalm the int8 model ran 5x
    slower than its float source (25 PReLUs, 26 partitions). Neither does it take int8 ``RELU``, so
    the ReLU is a ``MUL`` by one with a fused ReLU (an ``ADD`` of zero is not taken either). The
    four ops are exact in float and XNNPACK takes all of them in int8 (as does the Edge TPU compiler). The ``ADD`` writes the PReLU's own
    output tensor, so names downstream (recovery's float layers) are unchanged.

    Returns:
        (the rewritten model, how many PReLUs were rewritten); the input itself when there are none.
    """
    def pick(m, sg, name: str, op) -> bool | None:
        return name == "PRELU" and len(op.inputs) == 2 and _is_const(m, sg, int(op.inputs[1])) or None

    def build(edit: "_Editor", op, _) -> list:
        return _relu_plus_scaled_negative(edit, int(op.inputs[0]), int(op.inputs[1]), int(op.outputs[0]), "prelu")

    return _rewrite_ops(model, pick, build)


def relu_0_to_1_as_relu6(model: bytes) -> tuple[bytes, int]:
    """Rewrite every ``RELU_0_TO_1`` (``min(max(x, 0), 1)``, the hard sigmoid's clamp onnx2tf writes
    in MobileNetV3's squeeze-excite blocks) as ``MUL`` by 6, ``RELU6``, ``MUL`` by 1/6, exact in float.

    For targets whose operator table lacks it but has ``MUL`` and ``RELU6`` (the Edge TPU): the
    PP-OCR direction classifier's first one left 11 of its 116 ops mappable. Each op keeps its own
    int8 scale (a ``MINIMUM`` with 1 would share one, as ``MAXIMUM`` did for leaky ReLU). The last
    ``MUL`` writes the op's own output tensor: names downstream hold.

    Returns:
        (the rewritten model, how many were rewritten); the input itself when there are none.
    """
    def pick(m, sg, name: str, op) -> bool | None:
        return name == "RELU_0_TO_1" or None

    def build(edit: "_Editor", op, _) -> list:
        x, y = int(op.inputs[0]), int(op.outputs[0])
        up, clamped = edit.tensor_like(y, "relu01_x6"), edit.tensor_like(y, "relu01_relu6")
        return [edit.op("MUL", [x, edit.const_float(6.0, y, "relu01_six")], [up], "MulOptions"),
                edit.op("RELU6", [up], [clamped], None),
                edit.op("MUL", [clamped, edit.const_float(1.0 / 6.0, y, "relu01_sixth")], [y], "MulOptions")]

    return _rewrite_ops(model, pick, build)


def _relu_plus_scaled_negative(edit: "_Editor", x: int, alpha: int, y: int, prefix: str) -> list:
    """``y = relu(x) + alpha * (x - relu(x))`` as ``MUL`` (x1, fused RELU), ``SUB``, ``MUL``, ``ADD``;
    the ``ADD`` writes ``y`` (the replaced op's own output tensor)."""
    r, neg = edit.tensor_like(y, f"{prefix}_relu"), edit.tensor_like(y, f"{prefix}_negative")
    scaled = edit.tensor_like(y, f"{prefix}_scaled")
    relu = edit.op("MUL", [x, edit.one()], [r], "MulOptions")  # int8 RELU is not delegated; MUL's fused RELU is
    relu.builtinOptions.fusedActivationFunction = edit.schema.ActivationFunctionType.RELU
    return [relu, edit.op("SUB", [x, r], [neg], "SubOptions"),
            edit.op("MUL", [neg, alpha], [scaled], "MulOptions"), edit.op("ADD", [r, scaled], [y], "AddOptions")]


def decompose_leaky_relu(model: bytes) -> tuple[bytes, int]:
    """Rewrite every ``LEAKY_RELU`` (slope ``alpha``) as :func:`decompose_prelu` rewrites a PReLU:
    ``relu(x) + alpha * (x - relu(x))`` (``MUL`` x1 with a fused ReLU, ``SUB``, ``MUL``, ``ADD``),
    exact in float.

    For targets whose operator table lacks ``LEAKY_RELU`` but has those ops (the Edge TPU): each
    leaky ReLU otherwise ends the part the compiler maps (the openWakeWord embedding's first one
    left 3 of its 66 ops on the TPU). ``max(x, alpha * x)`` is exact too, but int8 ``MAXIMUM``
    shares one scale between its inputs and output (which one it got was not inspected): the
    embedding's cosine against float fell from 0.997 to 0.90. XNNPACK runs int8
    ``LEAKY_RELU`` itself, so the CPU profiles keep it. The ``ADD`` writes the op's own output
    tensor: names downstream hold.

    Returns:
        (the rewritten model, how many were rewritten); the input itself when there are none.
    """
    def pick(m, sg, name: str, op) -> float | None:
        if name != "LEAKY_RELU" or op.builtinOptions is None:
            return None
        return float(op.builtinOptions.alpha)

    def build(edit: "_Editor", op, alpha: float) -> list:
        y = int(op.outputs[0])
        return _relu_plus_scaled_negative(edit, int(op.inputs[0]), edit.const_float(alpha, y, "leaky_alpha"), y, "leaky")

    return _rewrite_ops(model, pick, build)


def _rewrite_ops(model: bytes, pick, build) -> tuple[bytes, int]:
    """Replace ops of the main subgraph: ``pick(m, sg, op name, op)`` returns what ``build`` needs
    for an op to replace (None to keep it); ``build(editor, op, picked)`` returns the ops that
    replace it (the last writing the op's own output tensor, so names downstream hold).

    Returns:
        (the rewritten model, how many ops were replaced); the input itself when none.
    """
    schema, m = _load(model)
    if not m.subgraphs:
        return model, 0
    names = _op_names(schema, m)
    sg = m.subgraphs[0]
    targets = {k: got for k, op in enumerate(sg.operators or [])
               if (got := pick(m, sg, names[op.opcodeIndex], op)) is not None}
    if not targets:
        return model, 0
    edit = _Editor(schema, m, sg)
    sg.operators = [new for k, op in enumerate(sg.operators)
                    for new in (build(edit, op, targets[k]) if k in targets else [op])]
    return _pack(m, len(model) + 4096 * len(targets)), len(targets)


def delay_float_ops(model: bytes) -> tuple[bytes, int]:
    """Reorder the main subgraph's ops so that those an integer accelerator cannot run (custom ops,
    DEQUANTIZE, ops with a float output) come as late as the graph allows: a valid topological
    order (the same computation) in which every integer op runs before them where it can.

    The Edge TPU compiler maps the ops before the first it cannot run and leaves every later op on
    the CPU. TensorFlow's quantizer puts the DEQUANTIZE of a tensor that a float layer of the tail
    reads right after that tensor's producer: a skip connection read by a float head layer ended
    the mapped part a fifth of the way into BlazeFace (full range). Moved next to its reader, the
    tail is the float layers alone.

    Returns:
        (the reordered model, how many ops changed position); the input itself when none did.
    """
    import heapq

    schema, m = _load(model)
    if not m.subgraphs or not m.subgraphs[0].operators:
        return model, 0
    names = _op_names(schema, m)
    sg = m.subgraphs[0]
    ops = list(sg.operators)
    floats = {schema.TensorType.FLOAT32, schema.TensorType.FLOAT16}
    producer = {t: k for k, op in enumerate(ops) for t in (op.outputs if op.outputs is not None else []) if t >= 0}
    deps = [{producer[t] for t in (op.inputs if op.inputs is not None else []) if t >= 0 and t in producer and producer[t] != k}
            for k, op in enumerate(ops)]
    readers: list[list[int]] = [[] for _ in ops]
    for k, d in enumerate(deps):
        for p in d:
            readers[p].append(k)

    def cpu(k: int) -> bool:
        name = names[ops[k].opcodeIndex]
        outs = ops[k].outputs if ops[k].outputs is not None else []
        return name.startswith("CUSTOM:") or name == "DEQUANTIZE" or any(sg.tensors[t].type in floats for t in outs if t >= 0)

    waiting = [len(d) for d in deps]
    ready = [(cpu(k), k) for k in range(len(ops)) if not waiting[k]]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, k = heapq.heappop(ready)
        order.append(k)
        for r in readers[k]:
            waiting[r] -= 1
            if not waiting[r]:
                heapq.heappush(ready, (cpu(r), r))
    if len(order) != len(ops):  # a cycle: not a graph this can reorder
        return model, 0
    moved = sum(1 for pos, k in enumerate(order) if pos != k)
    if not moved:
        return model, 0
    sg.operators = [ops[k] for k in order]
    return _pack(m, len(model)), moved


#: MediaPipe's TfLitePadding codes in ``Convolution2DTransposeBias``'s options -> the schema's Padding.
_MP_PADDING = {1: "SAME", 2: "VALID"}


def builtin_transpose_conv(model: bytes) -> tuple[bytes, int]:
    """Rewrite MediaPipe's custom ``Convolution2DTransposeBias`` (input, weights, 1-D bias; options
    padding, stride_w, stride_h as int32) as the builtin ``TRANSPOSE_CONV`` followed by an ``ADD``
    of the bias: the same arithmetic in float, in ops every tool reads.

    Only LiteRT runs the custom op: OpenVINO's TFLite frontend and tf2onnx refuse the model
    (MediaPipe's selfie segmentation: no intel-cpu, jetson-orin or ONNX artifact), and the int8
    route left it float between quantize/dequantize pairs, where the Edge TPU stops mapping. The
    ``ADD`` writes the custom op's own output tensor, so names downstream are unchanged. An op
    whose options or output shape are not what MediaPipe writes (static) is left as it is.

    Returns:
        (the rewritten model, how many ops were rewritten); the input itself when there are none.
    """
    def pick(m, sg, name: str, op) -> tuple | None:
        if name != "CUSTOM:Convolution2DTransposeBias" or len(op.inputs) != 3 or len(op.outputs) != 1:
            return None
        opts = bytes(bytearray(op.customOptions)) if op.customOptions is not None else b""
        if len(opts) < 12:
            return None
        padding, stride_w, stride_h = (int(v) for v in np.frombuffer(opts[:12], np.int32))
        out = sg.tensors[int(op.outputs[0])]
        shape = None if out.shape is None else [int(d) for d in out.shape]
        if padding not in _MP_PADDING or stride_w < 1 or stride_h < 1 or not shape or min(shape) < 1 \
                or not _is_const(m, sg, int(op.inputs[1])):
            return None
        return padding, stride_w, stride_h, shape

    def build(edit: "_Editor", op, picked: tuple) -> list:
        padding, stride_w, stride_h, shape = picked
        x, w, b = (int(i) for i in op.inputs)
        y = int(op.outputs[0])
        conv_out = edit.tensor_like(y, "transpose_conv")
        tconv = edit.op("TRANSPOSE_CONV", [edit.const_int32(shape, y, "output_shape"), w, x], [conv_out],
                        "TransposeConvOptions")
        tconv.builtinOptions.padding = getattr(edit.schema.Padding, _MP_PADDING[padding])
        tconv.builtinOptions.strideW, tconv.builtinOptions.strideH = stride_w, stride_h
        return [tconv, edit.op("ADD", [conv_out, b], [y], "AddOptions")]

    return _rewrite_ops(model, pick, build)


#: The TensorFlow Object Detection API's post-processing custom op (decode against anchors + NMS).
DETECTION_POSTPROCESS = "TFLite_Detection_PostProcess"


def decode_detection_postprocess(model: bytes) -> tuple[bytes, dict[str, Any]] | None:
    """Replace a trailing ``TFLite_Detection_PostProcess`` (box decoding against constant anchors,
    then NMS, four post-NMS outputs) by its decoding written in builtin ops; NMS is left to the head.

    The custom op ends SSD MobileNet and EfficientDet-Lite TFLite files. Only LiteRT runs it:
    OpenVINO reads it with a dynamic detection count, tf2onnx turns it into NMS ops of dynamic size,
    and its outputs are detection *lists* whose order moves with any score change, so no gate can
    compare them position by position. The rewritten model has two static outputs the gate judges
    and every runtime runs: ``decoded_boxes [1, N, 4]`` (``x1, y1, x2, y2`` in input pixels,
    decoded as the op decodes: centre-size encodings over ``y_scale/x_scale/h_scale/w_scale``,
    ``exp`` sizes, times the anchors) and ``class_scores [1, N, C]`` (the op's class predictions
    without its background column(s)). The ``boxes-scores`` head then does what the op's NMS did,
    with its thresholds (returned here).

    Returns:
        (the rewritten model, the op's parameters: ``conf``, ``iou``, ``max_det``, ``agnostic``
        (fast NMS: class-agnostic), ``classes``, ``anchors``, ``background`` (columns dropped),
        ``boxes``/``scores`` output names), or None when the model has no such op at its tail
        with constant anchors.
    """
    from flatbuffers import flexbuffers

    schema, m = _load(model)
    if not m.subgraphs:
        return None
    names = _op_names(schema, m)
    sg = m.subgraphs[0]
    ops = list(sg.operators or [])
    found = [k for k, op in enumerate(ops) if names[op.opcodeIndex] == f"CUSTOM:{DETECTION_POSTPROCESS}"]
    if len(found) != 1:
        return None
    op = ops[found[0]]
    outs = [int(t) for t in op.outputs]
    graph_outs = [int(t) for t in sg.outputs]
    if len(op.inputs) != 3 or not set(outs) >= set(graph_outs) or not _is_const(m, sg, int(op.inputs[2])):
        return None
    if any(int(t) in outs for other in ops if other is not op for t in (other.inputs if other.inputs is not None else [])):
        return None  # something reads the detections: not a tail this can cut
    try:
        opts = flexbuffers.Loads(bytes(bytearray(op.customOptions)))
    except Exception:  # noqa: BLE001 - options this reader cannot parse: leave the op alone
        return None
    enc, pred, anc = (int(t) for t in op.inputs)
    raw = m.buffers[sg.tensors[anc].buffer].data
    if sg.tensors[anc].type != schema.TensorType.FLOAT32 or raw is None or not len(raw) or len(raw) % 16:
        return None  # anchors not stored inline as float32 [N, 4]
    anchors = np.frombuffer(bytes(bytearray(raw)), np.float32).reshape(-1, 4)
    n = len(anchors)
    enc_shape = [int(d) for d in sg.tensors[enc].shape]
    pred_shape = [int(d) for d in sg.tensors[pred].shape]
    classes = int(opts.get("num_classes", 0))
    if enc_shape[:2] != [1, n] or enc_shape[2] < 4 or pred_shape[:2] != [1, n] or not 0 < classes <= pred_shape[2]:
        return None
    # Input pixels: the op's boxes are 0..1 of the input; the first input is the image [1, H, W, C].
    in_shape = [int(d) for d in sg.tensors[int(sg.inputs[0])].shape]
    height, width = (in_shape[1], in_shape[2]) if len(in_shape) == 4 else (1, 1)
    scale = {k: float(opts.get(k, 1.0)) or 1.0 for k in ("y_scale", "x_scale", "h_scale", "w_scale")}
    pix = np.array([width, height], np.float32)
    # anchors are (ycenter, xcenter, h, w); everything below is in x, y order
    a_c, a_s = anchors[:, [1, 0]], anchors[:, [3, 2]]
    centre_mul = (a_s / np.array([scale["x_scale"], scale["y_scale"]], np.float32) * pix)[None]
    centre_add = (a_c * pix)[None]
    size_mul = (1.0 / np.array([scale["w_scale"], scale["h_scale"]], np.float32))
    half = (0.5 * a_s * pix)[None]
    edit = _Editor(schema, m, sg)
    F = schema.TensorType.FLOAT32

    def t(name: str, cols: int) -> int:
        return edit.tensor(name, [1, n, cols], F)

    new_ops: list = []

    def emit(name: str, inputs: list[int], out: str, cols: int, options: str | None = None, axis: int | None = None) -> int:
        """Append one op writing a new [1, n, cols] tensor ``out``; its index."""
        idx = t(out, cols)
        op = edit.op(name, inputs, [idx], options)
        if axis is not None:
            op.builtinOptions.axis = axis
        new_ops.append(op)
        return idx

    # encodings (y, x, h, w[, ...]) -> (x, y, w, h), split into centre and size offsets
    xywh = emit("GATHER", [enc, edit.const_int32([1, 0, 3, 2], enc, "xywh_order")], "decode/xywh", 4, "GatherOptions", 2)
    xy_raw, wh_raw = t("decode/xy_raw", 2), t("decode/wh_raw", 2)
    sp = edit.op("SPLIT", [edit.const_int32([2], enc, "split_axis"), xywh], [xy_raw, wh_raw], "SplitOptions")
    sp.builtinOptions.numSplits = 2
    sg.tensors[sp.inputs[0]].shape = []  # SPLIT's axis is a scalar
    new_ops.append(sp)
    xy = emit("MUL", [xy_raw, edit.const(centre_mul, "decode/centre_mul")], "decode/xy_scaled", 2, "MulOptions")
    centre = emit("ADD", [xy, edit.const(centre_add, "decode/centre_add")], "decode/centre", 2, "AddOptions")
    wh = emit("MUL", [wh_raw, edit.const(size_mul, "decode/size_mul")], "decode/wh_scaled", 2, "MulOptions")
    half_wh = emit("MUL", [emit("EXP", [wh], "decode/wh_exp", 2), edit.const(half, "decode/half_anchor")],
                   "decode/half", 2, "MulOptions")
    corners = [emit("SUB", [centre, half_wh], "decode/x1y1", 2, "SubOptions"),
               emit("ADD", [centre, half_wh], "decode/x2y2", 2, "AddOptions")]
    boxes = emit("CONCATENATION", corners, "decoded_boxes", 4, "ConcatenationOptions", 2)
    background = pred_shape[2] - classes
    # GATHER, not SLICE: OpenVINO's TFLite frontend reads a SLICE's output as dynamic
    scores = emit("GATHER", [pred, edit.const_int32(list(range(background, background + classes)), pred, "classes")],
                  "class_scores", classes, "GatherOptions", 2)
    sg.operators = ops[:found[0]] + ops[found[0] + 1:] + new_ops
    sg.outputs = [boxes, scores]
    for sd in m.signatureDefs or []:
        kept = []
        for key, idx in (("decoded_boxes", boxes), ("class_scores", scores)):
            tm = schema.TensorMapT()
            tm.name, tm.tensorIndex = key, idx
            kept.append(tm)
        sd.outputs = kept
    params = {"conf": float(opts.get("nms_score_threshold", 0.0)), "iou": float(opts.get("nms_iou_threshold", 0.5)),
              "max_det": int(opts.get("max_detections", 100)), "agnostic": not bool(opts.get("use_regular_nms", 0)),
              "classes": classes, "anchors": n, "background": background, "size": [width, height],
              "boxes": "decoded_boxes", "scores": "class_scores"}
    return _pack(m, len(model) + 64 * n), params


class _Editor:
    """New tensors, ops and opcodes for a graph rewrite (object API of the TFLite schema)."""

    def __init__(self, schema, m, sg):
        self.schema, self.m, self.sg = schema, m, sg
        self._one: int | None = None

    def opcode(self, name: str) -> int:
        code = getattr(self.schema.BuiltinOperator, name)
        for i, oc in enumerate(self.m.operatorCodes):
            if max(oc.builtinCode, oc.deprecatedBuiltinCode) == code:
                return i
        oc = self.schema.OperatorCodeT()
        oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = code, min(code, 127), 1
        self.m.operatorCodes.append(oc)
        return len(self.m.operatorCodes) - 1

    def tensor_like(self, idx: int, suffix: str) -> int:
        src = self.sg.tensors[idx]
        t = self.schema.TensorT()
        t.shape = None if src.shape is None else list(src.shape)
        t.shapeSignature = None if src.shapeSignature is None else list(src.shapeSignature)
        t.type = src.type
        base = src.name.decode() if isinstance(src.name, bytes) else str(src.name)
        t.name = f"{base}/{suffix}"
        self.m.buffers.append(self.schema.BufferT())
        t.buffer = len(self.m.buffers) - 1
        self.sg.tensors.append(t)
        return len(self.sg.tensors) - 1

    def const_int32(self, values: list[int], like: int, suffix: str) -> int:
        """A new constant int32 tensor named after tensor ``like``."""
        buf = self.schema.BufferT()
        buf.data = np.frombuffer(np.asarray(values, np.int32).tobytes(), np.uint8)
        self.m.buffers.append(buf)
        t = self.schema.TensorT()
        base = self.sg.tensors[like].name
        t.name = f"{base.decode() if isinstance(base, bytes) else base}/{suffix}"
        t.shape, t.type, t.buffer = [len(values)], self.schema.TensorType.INT32, len(self.m.buffers) - 1
        self.sg.tensors.append(t)
        return len(self.sg.tensors) - 1

    def const(self, values: np.ndarray, name: str) -> int:
        """A new float32 constant holding ``values`` (its shape kept)."""
        a = np.ascontiguousarray(values, np.float32)
        buf = self.schema.BufferT()
        buf.data = np.frombuffer(a.tobytes(), np.uint8)
        self.m.buffers.append(buf)
        t = self.schema.TensorT()
        t.shape, t.type, t.name, t.buffer = list(a.shape), self.schema.TensorType.FLOAT32, name, len(self.m.buffers) - 1
        self.sg.tensors.append(t)
        return len(self.sg.tensors) - 1

    def tensor(self, name: str, shape: list[int], dtype: int) -> int:
        """A new activation tensor."""
        t = self.schema.TensorT()
        t.name, t.shape, t.type = name, list(shape), dtype
        self.m.buffers.append(self.schema.BufferT())
        t.buffer = len(self.m.buffers) - 1
        self.sg.tensors.append(t)
        return len(self.sg.tensors) - 1

    def _scalar(self, value: float, name: str) -> int:
        """A new float32 constant of shape [1]."""
        return self.const(np.asarray([value], np.float32), name)

    def const_float(self, value: float, like: int, suffix: str) -> int:
        """A new float32 scalar constant (shape [1]) named after tensor ``like``."""
        base = self.sg.tensors[like].name
        return self._scalar(value, f"{base.decode() if isinstance(base, bytes) else base}/{suffix}")

    def one(self) -> int:
        """The constant 1.0, made once per edit."""
        if self._one is None:
            self._one = self._scalar(1.0, "rewrite_one")
        return self._one

    def op(self, name: str, inputs: list[int], outputs: list[int], options: str | None) -> Any:
        op = self.schema.OperatorT()
        op.opcodeIndex, op.inputs, op.outputs = self.opcode(name), inputs, outputs
        if options:
            op.builtinOptionsType = getattr(self.schema.BuiltinOptions, options)
            op.builtinOptions = getattr(self.schema, f"{options}T")()
        return op


def _evaluate(model: bytes, ops: list, outputs: list[int]) -> dict[int, np.ndarray]:
    """Run just ``ops`` (constant inputs only) in LiteRT, without delegates; their outputs by index."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    schema, sub = _load(model)
    ssg = sub.subgraphs[0]
    ssg.operators = ops
    ssg.inputs = []
    ssg.outputs = list(outputs)
    sub.subgraphs = [ssg]
    sub.signatureDefs = []
    try:
        it = Interpreter(model_content=_pack(sub, len(model)),
                         experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        it.allocate_tensors()
        it.invoke()
        return {d["index"]: it.get_tensor(d["index"]).copy() for d in it.get_output_details()}
    except Exception as exc:  # noqa: BLE001 - LiteRT raises RuntimeError/ValueError
        raise ConversionError(f"LiteRT could not densify the model's constant weights: {str(exc)[:200]}") from None


def static_shapes(model: bytes, input_shapes: dict[str, list[int]]) -> bytes:
    """Drop the dynamic dims (``shape_signature``); the static shape must be the file's default.

    Raises:
        ConversionError: an input's static shape differs from the model's default shape.
    """
    _, m = _load(model)
    for sg in m.subgraphs:
        for idx in sg.inputs:
            t = sg.tensors[idx]
            name = t.name.decode() if isinstance(t.name, bytes) else t.name
            want = input_shapes.get(name)
            if want is not None and list(t.shape) != list(want):
                raise ConversionError(f"Input '{name}': static shape {want} differs from the model's default shape "
                                      f"{list(t.shape)}; a float TFLite source is converted at its own shape.")
        for t in sg.tensors:
            t.shapeSignature = None
    return _pack(m, len(model))


#: Two-sided percentile of each activation kept by the ``percentile`` calibration (per sample,
#: averaged over samples, as NNCF's MEAN_QUANTILE does).
PERCENTILE_TAIL = 1e-4


def strip_input_casts(model: bytes) -> tuple[bytes, list[int]]:
    """A uint8 model input whose only reader is a CAST to float32 (EfficientDet-Lite's exports take
    pixels so) becomes a float32 input, and the CAST goes: its readers read the input instead.

    For an integer-only target: the CAST has no integer form, and the whole graph after it stayed
    off the accelerator. Quantized to uint8 with the range 0..255 (scale 1, zero point 0), the new
    input takes exactly the pixels the source took, so the input contract does not change.

    Returns:
        (the model, the tensor indices of the inputs made float); the model itself when none.
    """
    schema, m = _load(model)
    if not m.subgraphs:
        return model, []
    names = _op_names(schema, m)
    sg = m.subgraphs[0]
    readers: dict[int, list[int]] = {}
    for k, op in enumerate(sg.operators or []):
        for i in op.inputs if op.inputs is not None else []:
            readers.setdefault(int(i), []).append(k)
    drop: dict[int, int] = {}  # CAST op index -> the input it reads
    for i in (int(x) for x in sg.inputs):
        ks = readers.get(i, [])
        if sg.tensors[i].type != schema.TensorType.UINT8 or len(ks) != 1 or names[sg.operators[ks[0]].opcodeIndex] != "CAST":
            continue
        out = int(sg.operators[ks[0]].outputs[0])
        if sg.tensors[out].type == schema.TensorType.FLOAT32 and out not in {int(x) for x in sg.outputs}:
            drop[ks[0]] = i
    if not drop:
        return model, []
    renamed = {int(sg.operators[k].outputs[0]): i for k, i in drop.items()}
    for k, op in enumerate(sg.operators):
        if op.inputs is not None and k not in drop:
            op.inputs = [renamed.get(int(x), int(x)) for x in op.inputs]
    sg.operators = [op for k, op in enumerate(sg.operators) if k not in drop]
    for i in drop.values():
        sg.tensors[i].type = schema.TensorType.FLOAT32
    return _pack(m, len(model)), sorted(drop.values())


def calibrate(model: bytes, feeds: Iterable) -> dict[int, dict[str, tuple[float, float]]]:
    """Ranges of every float activation over ``feeds``: ``{tensor: {method: (low, high)}}``
    (:meth:`RangeStats.ranges`). The model runs
    in LiteRT with its default delegate (XNNPACK implements MediaPipe's custom ops), with every
    float activation made a model output so that each one is really computed.

    Args:
        model: A float TFLite model with static shapes.
        feeds: Each a ``{input name: array}`` or a list of arrays in the model's input order.

    Raises:
        ConversionError: LiteRT cannot run the model, or a feed does not fit it.
    """
    from ai_edge_litert.interpreter import Interpreter

    schema, m = _load(model)
    sg = m.subgraphs[0]
    model_inputs = {int(i) for i in sg.inputs}
    produced = {int(o) for op in sg.operators for o in op.outputs} | model_inputs  # orphans have no values
    floats = [i for i, t in enumerate(sg.tensors)
              if t.type == schema.TensorType.FLOAT32 and i in produced and not _is_const(m, sg, i)]
    # Every float activation becomes a model output: a delegate must then write each one out
    # instead of keeping it inside its partition, where ``preserve_all_tensors`` would read stale memory.
    _, probe = _load(model)
    probe.subgraphs[0].outputs = sorted(set(int(o) for o in probe.subgraphs[0].outputs) | (set(floats) - model_inputs))
    probe.signatureDefs = []
    acc = {i: RangeStats() for i in floats}
    try:
        it = Interpreter(model_content=_pack(probe, len(model)))
        it.allocate_tensors()
        in_details = it.get_input_details()
        by_name = {d["name"]: d["index"] for d in in_details}
        dtypes = {d["name"]: d["dtype"] for d in in_details}  # integer inputs are fed as they are
        outputs = [d["index"] for d in it.get_output_details() if d["index"] in acc]
        for feed in feeds:
            items = feed.items() if isinstance(feed, dict) else zip([d["name"] for d in in_details], feed)
            fed = []
            for name, arr in items:
                it.set_tensor(by_name[name], np.asarray(arr, dtypes.get(name, np.float32)))
                fed.append(by_name[name])
            it.invoke()
            for i in outputs + [i for i in fed if i in acc]:
                a = it.get_tensor(i)
                if a.size:
                    acc[i].add(a)
    except KeyError as exc:
        raise ConversionError(f"Calibration feed names input {exc}, which the TFLite model does not have.") from None
    except Exception as exc:  # noqa: BLE001 - LiteRT raises RuntimeError/ValueError
        raise ConversionError(f"LiteRT could not run the float TFLite model for calibration: {str(exc)[:300]}") from None
    return {i: v.ranges() for i, v in acc.items() if v.mins and np.isfinite(v.lo)}


#: Range methods the statistics below serve: global min/max; per-sample ``PERCENTILE_TAIL``
#: quantiles averaged; the median over samples of each sample's min and max (a recovery
#: alternative: a few samples' outliers cut at min/max cost, NNCF's MEDIAN_MINMAX).
RANGE_METHODS = ("minmax", "percentile", "median")


def tail_values(flat: np.ndarray, k: int, nan: bool = False) -> tuple[float, float]:
    """The values at sorted positions ``k`` and ``size - 1 - k`` of ``flat`` (what
    ``np.partition(flat, (k, size - 1 - k))`` puts there), exactly, without partitioning the
    whole tensor: a strided sample gives a threshold on each side; when at least ``k + 1`` values
    lie beyond it, the wanted value is among them and only they are partitioned. Otherwise (or
    when ``nan``: the tensor holds NaNs, which the partition sorts last) the whole tensor is.
    On PP-OCRv4 rec's activations (20 samples, tensors of 13k-265k values) 6.2x faster than the
    full partition, the values the same; that partition was 10% of BlazePose's detector's
    conversion and 20% of rec's (cProfile)."""
    n = flat.size
    if n > 16384 and not nan:
        s = flat[:: max(1, n // 8192)]
        m = min(s.size // 2, int(np.ceil(20 * (k + 1) / n * s.size)) + 8)  # generous: ~20x the tail's share
        ps = np.partition(s, (m, s.size - 1 - m))
        low_side, high_side = flat[flat <= ps[m]], flat[flat >= ps[s.size - 1 - m]]
        if low_side.size > k and high_side.size > k and low_side.size + high_side.size < n:
            return (float(np.partition(low_side, k)[k]),
                    float(np.partition(high_side, high_side.size - 1 - k)[high_side.size - 1 - k]))
    part = np.partition(flat, (k, n - 1 - k))
    return float(part[k]), float(part[n - 1 - k])


class RangeStats:
    """One activation tensor's statistics over the calibration samples, for every range method
    (:data:`RANGE_METHODS`) from one pass. Shared by the TFLite route and ONNX QDQ."""

    def __init__(self) -> None:
        self.lo, self.hi = np.inf, -np.inf
        self.q_lo = self.q_hi = 0.0  # sums over samples of each sample's PERCENTILE_TAIL quantiles
        self.mins: list[float] = []
        self.maxs: list[float] = []

    def add(self, a: np.ndarray) -> None:
        """Account for one sample's values of the tensor."""
        flat = a.reshape(-1)
        lo, hi = float(flat.min()), float(flat.max())
        self.lo, self.hi = min(self.lo, lo), max(self.hi, hi)
        self.mins.append(lo)
        self.maxs.append(hi)
        k = int(PERCENTILE_TAIL * flat.size)
        if k >= 1:
            lo, hi = tail_values(flat, k, nan=lo != lo or hi != hi)
        self.q_lo += lo
        self.q_hi += hi

    def ranges(self) -> dict[str, tuple[float, float]]:
        """``{method: (low, high)}`` for every method of :data:`RANGE_METHODS`."""
        n = len(self.mins)
        return {"minmax": (self.lo, self.hi), "percentile": (self.q_lo / n, self.q_hi / n),
                "median": (float(np.median(self.mins)), float(np.median(self.maxs)))}


def apply_stats(model: bytes, stats: dict[int, dict[str, tuple[float, float]]], method: str) -> bytes:
    """Write the chosen method's ranges (one of :data:`RANGE_METHODS`) into the flatbuffer's min/max."""
    if method not in RANGE_METHODS:
        raise ConversionError(f"Calibration method '{method}' is not one the TFLite route offers ({', '.join(RANGE_METHODS)}).")
    schema, m = _load(model)
    sg = m.subgraphs[0]
    for i, ranges in stats.items():
        t = sg.tensors[i]
        if t.quantization is None:
            t.quantization = schema.QuantizationParametersT()
        a, b = ranges[method]
        t.quantization.min, t.quantization.max = [a], [b]
    return _pack(m, len(model))


def quantize(calibrated: bytes, *, per_tensor: bool, input_dtype: str, output_dtype: str,
             float_nodes: Iterable[str] = (), float_ops: Iterable[str] = (), log: Path | None = None,
             per_tensor_dense: bool | None = None) -> bytes:
    """Quantize a calibrated model with TensorFlow's MLIR quantizer.

    Args:
        calibrated: Output of :func:`calibrate`.
        per_tensor: Per-tensor weights instead of per-channel (every weighted op).
        per_tensor_dense: Per-tensor weights for fully connected layers only (None: as ``per_tensor``);
            the Edge TPU profile's per-channel convolutions with per-tensor dense layers.
        input_dtype / output_dtype: ``float32``, ``int8`` or ``uint8``.
        float_nodes: Tensor names of ops to keep in float (mixed precision).
        float_ops: Op types (TFLite builtin names, e.g. ``"MEAN"``) to keep in float.
        log: Where the quantizer's console output goes.

    Raises:
        ConversionError: the quantizer failed.
    """
    from .console import import_tensorflow, quiet

    tf = import_tensorflow("int8 TFLite quantization")
    from tensorflow.lite.python import convert

    types = {"float32": tf.float32, "int8": tf.int8, "uint8": tf.uint8}
    try:
        with quiet(log or Path("/dev/null")):
            quantized = bytes(convert.mlir_quantize(
                calibrated, disable_per_channel=per_tensor,
                disable_per_channel_for_dense_layers=per_tensor if per_tensor_dense is None else per_tensor_dense,
                input_data_type=types[input_dtype],
                output_data_type=types[output_dtype], denylisted_ops=sorted(set(float_ops)) or None,
                denylisted_nodes=sorted(set(float_nodes)) or None))
    except Exception as exc:  # noqa: BLE001 - the converter raises ConverterError and friends
        from .tool_errors import tool_error

        raise tool_error("tflite", exc, "TensorFlow's quantizer could not quantize the TFLite model",
                         "Keep the op it names float (--float-nodes), or use another format (onnx-qdq, openvino-ir).") from None
    return float_weights_back(quantized, calibrated)[0]


def _const_floats(schema, m, sg) -> dict[tuple[int, ...], list[np.ndarray]]:
    """The float32 constants of a graph by shape."""
    out: dict[tuple[int, ...], list[np.ndarray]] = {}
    for i, t in enumerate(sg.tensors):
        if t.type == schema.TensorType.FLOAT32 and _is_const(m, sg, i) and m.buffers[t.buffer].data is not None:
            shape = tuple(int(d) for d in (t.shape if t.shape is not None else ()))
            a = np.frombuffer(bytes(m.buffers[t.buffer].data), np.float32)
            if a.size == int(np.prod(shape)):
                out.setdefault(shape, []).append(a.reshape(shape))
    return out


def float_weights_back(quantized: bytes, float_model: bytes) -> tuple[bytes, list[str]]:
    """Give an op the quantizer left float its float weights back.

    TensorFlow's MLIR quantizer, asked to keep an op float (``denylisted_nodes``/``_ops``), still
    stores the weights of some (``TRANSPOSE_CONV``) as int8: a *hybrid* op that dequantizes its
    weights and, in LiteRT's hybrid kernels, quantizes its input on the fly. The op is then float in
    name only. MediaPipe's selfie segmenter ends in such a layer (one output channel, weights from
    -20.2 to 4.0: one int8 scale of 0.16 for all 64): kept "float", its worst frame's IoU against the
    float model was 0.73 with every other op float too; with its weights float again, 1.0.

    Each int8 constant read by an op whose activations are all float is replaced by the float
    constant of the same shape in ``float_model`` that quantizes to exactly it (at its own scales);
    a constant with no such original (a source that was itself weight-quantized) stays as it is.

    Returns:
        (the model, a ``"#op OP_NAME"`` label per op given its weights back).
    """
    schema, m = _load(quantized)
    sg = m.subgraphs[0]
    names = _op_names(schema, m)
    f32, i8 = schema.TensorType.FLOAT32, schema.TensorType.INT8
    originals: dict[tuple[int, ...], list[np.ndarray]] | None = None
    fixed: list[str] = []
    for k, op in enumerate(sg.operators or []):
        ins = [int(i) for i in (op.inputs if op.inputs is not None else []) if i >= 0]
        consts = {i for i in ins if _is_const(m, sg, i)}
        acts = [i for i in ins if i not in consts]
        if not acts or any(sg.tensors[i].type != f32 for i in acts):
            continue
        for i in sorted(consts):
            t = sg.tensors[i]
            qp = t.quantization
            if t.type != i8 or qp is None or qp.scale is None or len(qp.scale) == 0 or m.buffers[t.buffer].data is None:
                continue
            if originals is None:
                _, fm = _load(float_model)
                originals = _const_floats(schema, fm, fm.subgraphs[0])
            shape = tuple(int(d) for d in t.shape)
            q = np.frombuffer(bytes(m.buffers[t.buffer].data), np.int8).reshape(shape).astype(np.float32)
            scale = np.asarray(qp.scale, np.float32)
            if scale.size > 1:
                bshape = [1] * q.ndim
                bshape[int(qp.quantizedDimension)] = -1
                scale = scale.reshape(bshape)
            match = [a for a in originals.get(shape, []) if np.all(np.abs(a / scale - q) <= 0.501)]
            if not match or any(not np.array_equal(a, match[0]) for a in match[1:]):
                continue
            if sum(1 for other in sg.tensors if other.buffer == t.buffer) == 1:
                m.buffers[t.buffer].data = None  # the int8 copy: nobody reads it any more
            buf = schema.BufferT()
            buf.data = np.frombuffer(np.ascontiguousarray(match[0], np.float32).tobytes(), np.uint8)
            m.buffers.append(buf)
            t.buffer, t.type, t.quantization = len(m.buffers) - 1, f32, None
            label = f"#{k} {names[op.opcodeIndex]}"
            if label not in fixed:
                fixed.append(label)
    if not fixed:
        return quantized, []
    return _pack(m, len(quantized) * 2), fixed


def quantize_float_tflite(model: bytes, input_shapes: dict[str, list[int]], calib: list[dict], *, per_tensor: bool,
                          input_dtype: str, output_dtype: str, method: str = "minmax", float_nodes: Iterable[str] = (),
                          float_ops: Iterable[str] = (), log: Path | None = None,
                          per_tensor_dense: bool | None = None) -> tuple[bytes, dict[str, Any]]:
    """fold -> static shapes -> calibrate -> quantize in one call; returns the int8 model and what was done."""
    folded, counts = fold_constants(model)
    static = static_shapes(folded, input_shapes)
    stats = calibrate(static, calib)
    q = quantize(apply_stats(static, stats, method), per_tensor=per_tensor, input_dtype=input_dtype,
                 output_dtype=output_dtype, float_nodes=float_nodes, float_ops=float_ops, log=log,
                 per_tensor_dense=per_tensor_dense)
    return q, {"folded": counts, "calibrated_tensors": len(stats), "custom_ops": custom_ops(model)}
