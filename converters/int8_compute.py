"""How much of an "int8" artifact's compute really runs in int8 ("int8 means int8").

A recipe that keeps every convolution float, a weights-only compression, a quantizer that
skipped an op type: each still writes a file named int8. This module reads the artifact itself
(no runtime, no TensorFlow) and counts its compute ops, the MAC-heavy ones (convolutions,
matmuls, fully connected layers, recurrent cells), and how many of them take 8-bit inputs:

* **ONNX QDQ**: the op's activation and weight inputs come from ``DequantizeLinear`` nodes whose
  zero points are int8/uint8 (looking through reshapes and transposes), or the op is an integer
  op itself (``QLinearConv``, ``ConvInteger``, ``MatMulInteger``...);
* **OpenVINO IR**: each data input passes through a ``FakeQuantize`` of 255/256 levels, or is an
  i8/u8 ``Constant`` decompressed by ``Convert`` (+ ``Subtract``) + ``Multiply`` (NNCF's compressed
  weights), and at least one input (the activation) is fake-quantized: a weights-only
  compression runs float compute. Read from the ``.xml`` with :mod:`xml.etree`, following edges;
* **TFLite**: the op's activation and weight tensors are int8/uint8 (an int16 activation or a
  hybrid float-activation op is not int8 compute).

Each op is also weighed by its multiply-accumulates (MACs: output elements x the reduction each
one takes, from the static shapes the artifact carries: ONNX shape inference, the IR's port dims,
TFLite tensor shapes), because a count treats a 1x1 head like a backbone convolution: ``mac_share``
is the share of the work that runs in int8, ``share`` the share of the ops. Where one op's MACs
cannot be read (a dynamic dimension, an attention op, an Edge TPU custom op), ``macs`` is None and
the count is all there is.

Subgraphs are read too (ONNX If/Loop/Scan attributes, IR If/Loop/TensorIterator bodies, TFLite
IF/WHILE subgraphs), each in its own scope; the ops in an If's branches are also reported on their
own (``conditional``), since they run only on its condition. A loop body is weighed once, not per
iteration (its trip count is data), so a share over a loop-heavy graph leans toward the rest.

:func:`int8_share` never raises: a file it cannot read gives ``share: None`` and the error.

Recorded per candidate in its gate report (``int8_compute``: the manifest's
``accuracy.formats.<format>.int8_compute``), the summary table's ``int8 compute`` column and
``--json``. :func:`floor_failure` decides with it: an int8 artifact whose share is under the
profile's ``quantization.min_int8_share`` (``--min-int8-share``), or that has compute ops and
none of them in int8, is not published as int8 (build.py fails its gate with the reason first).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Sequence

#: The formats this module reads, and their model file's suffix.
SUFFIX = {"onnx-qdq": ".onnx", "openvino-ir": ".xml", "tflite-int8": ".tflite"}
#: Formats whose artifact is meant to compute in int8.
INT8_FORMATS = frozenset(SUFFIX)
#: How many float op types the result lists.
LIST_TOP = 10

ONNX_COMPUTE = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum", "LSTM", "GRU", "RNN",
                          "DeformConv", "Attention", "MultiHeadAttention"})
#: Integer ops: compute in int8 by construction.
ONNX_INTEGER = frozenset({"QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "QGemm", "QAttention",
                          "QLinearConvTranspose", "DynamicQuantizeMatMul", "DynamicQuantizeLSTM",
                          "MatMulIntegerToFloat"})
ONNX_TRANSPARENT = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity"})
#: ONNX TensorProto data types of 8-bit integers (UINT8, INT8).
ONNX_8BIT = frozenset({2, 3})

OV_COMPUTE = frozenset({"Convolution", "GroupConvolution", "ConvolutionBackpropData", "GroupConvolutionBackpropData",
                        "DeformableConvolution", "BinaryConvolution", "MatMul", "Einsum", "LSTMSequence", "LSTMCell",
                        "GRUSequence", "GRUCell", "RNNSequence", "RNNCell"})
OV_TRANSPARENT = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Broadcast"})
OV_8BIT = frozenset({"i8", "u8"})
OV_LEVELS = frozenset({255, 256})

TFLITE_COMPUTE = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "BATCH_MATMUL",
                            "CONV_3D", "CONV_3D_TRANSPOSE", "LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM",
                            "BIDIRECTIONAL_SEQUENCE_LSTM", "UNIDIRECTIONAL_SEQUENCE_RNN", "BIDIRECTIONAL_SEQUENCE_RNN",
                            "RNN", "SVDF"})
#: A compiled Edge TPU model's mapped part: the TPU computes only in 8 bits.
TFLITE_INT8_CUSTOM = frozenset({"CUSTOM:edgetpu-custom-op"})


def model_path(folder_or_file: str | Path, fmt: str) -> Path:
    """The model file of ``fmt`` in an artifact folder (the manifest's ``model`` entry of that
    format, else the converters' file name, else the only file with the format's suffix), or the
    file itself.

    Raises:
        FileNotFoundError: no such file.
    """
    p = Path(folder_or_file)
    if p.is_file():
        return p
    if not p.is_dir():
        raise FileNotFoundError(f"{p} does not exist")
    manifest = p / "manifest.json"
    if manifest.is_file():
        try:
            for a in json.loads(manifest.read_text()).get("artifacts", []):
                if a.get("format") == fmt and a.get("role", "model") == "model" and (p / a["path"]).is_file():
                    return p / a["path"]
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
    suffix = SUFFIX[fmt]
    if (p / f"model{suffix}").is_file():
        return p / f"model{suffix}"
    found = sorted(f for f in p.glob(f"*{suffix}") if not f.name.endswith(f"_edgetpu{suffix}"))
    if len(found) == 1:
        return found[0]
    raise FileNotFoundError(f"no {fmt} model file in {p}" + (f" (several: {[f.name for f in found]})" if found else ""))


def int8_share(folder_or_file: str | Path, fmt: str) -> dict[str, Any]:
    """How many of the artifact's compute ops run in int8.

    Args:
        folder_or_file: the model file, or an artifact folder holding it.
        fmt: ``onnx-qdq``, ``openvino-ir`` or ``tflite-int8``.

    Returns:
        ``{"compute_ops": n, "int8_ops": k, "share": k / n (3 decimals; None when n is 0),
        "macs": the compute ops' multiply-accumulates (None where one op's cannot be read),
        "int8_macs": those of the int8 ops, "mac_share": int8_macs / macs (3 decimals, or None),
        "float_ops": up to 10 op types (sorted) of the compute ops that run float}``, over the graph
        and every subgraph in it; where some ops sit in an If's branches (they run only on its
        condition), ``"conditional"`` has the same figures for those alone. When the file
        cannot be read, ``{"compute_ops": 0, "int8_ops": 0, "share": None, "macs": None,
        "int8_macs": None, "mac_share": None, "error": "..."}``.
    """
    try:
        if fmt not in SUFFIX:
            raise ValueError(f"format '{fmt}' is not one of {sorted(SUFFIX)}")
        path = model_path(folder_or_file, fmt)
        reader = {"onnx-qdq": _onnx_ops, "openvino-ir": _openvino_ops, "tflite-int8": _tflite_ops}[fmt]
        ops = reader(path)
    except Exception as exc:  # noqa: BLE001 - a figure about the artifact; never fails a conversion
        return {"compute_ops": 0, "int8_ops": 0, "share": None, "macs": None, "int8_macs": None, "mac_share": None,
                "error": f"{type(exc).__name__}: {exc}"[:300]}
    out = _tally([(kind, q, m) for kind, q, m, _ in ops])
    branch = [(kind, q, m) for kind, q, m, cond in ops if cond]
    if branch:  # an If's branches run only on their condition: their part, on its own
        out["conditional"] = {k: v for k, v in _tally(branch).items() if k != "float_ops"}
    return out


def _tally(ops: list[tuple[str, bool, int | None]]) -> dict[str, Any]:
    n, k = len(ops), sum(1 for _, q, _ in ops if q)
    known = all(m is not None for _, _, m in ops)
    macs = sum(int(m) for _, _, m in ops if m is not None) if known else None
    int8_macs = sum(int(m) for _, q, m in ops if q and m is not None) if known else None
    return {"compute_ops": n, "int8_ops": k, "share": round(k / n, 3) if n else None,
            "macs": macs, "int8_macs": int8_macs, "mac_share": round(int8_macs / macs, 3) if macs else None,
            "float_ops": sorted({op for op, q, _ in ops if not q})[:LIST_TOP]}


def _prod(dims: Sequence[int]) -> int:
    out = 1
    for d in dims:
        out *= int(d)
    return out


def _known(*shapes: Sequence[int] | None) -> bool:
    return all(s is not None and all(isinstance(d, int) and d > 0 for d in s) for s in shapes)


def _matmul_k(a: Sequence[int], out: Sequence[int]) -> int:
    """The reduction length of ``a @ b`` given ``a``'s shape and the output's: ``a`` is (.., M, K)
    or, transposed, (.., K, M); where both read the same (M == K) either is right."""
    if len(a) == 1:
        return int(a[0])
    if len(out) >= 2 and a[-2] == out[-2]:
        return int(a[-1])
    return int(a[-2])


def _macs(kind: str, ins: list[Sequence[int] | None], out: Sequence[int] | None) -> int | None:
    """Multiply-accumulates of one compute op from its input and output shapes, in the framework's
    own layout (``kind`` names it: ``onnx:Conv``, ``ov:Convolution``, ``tflite:CONV_2D``...); None
    where a shape is unknown or the op is not one this reads."""
    x = ins[0] if ins else None
    w = ins[1] if len(ins) > 1 else None
    fw, op = kind.split(":", 1)
    if op in ("Conv", "Convolution", "CONV_2D", "DeformConv", "DeformableConvolution", "BinaryConvolution"):
        return _prod(out) * _prod(w[1:]) if _known(w, out) else None  # (O, C/g, k...) / OHWI
    if op == "GroupConvolution":  # (G, O/G, C/G, k...)
        return _prod(out) * _prod(w[2:]) if _known(w, out) else None
    if op == "DEPTHWISE_CONV_2D":  # (1, kh, kw, C*m)
        return _prod(out) * _prod(w[1:3]) if _known(w, out) else None
    if op in ("ConvTranspose", "ConvolutionBackpropData"):  # each input value scattered over (O/g, k...)
        return _prod(x) * _prod(w[1:]) if _known(x, w) else None
    if op == "GroupConvolutionBackpropData":  # (G, C/G, O/G, k...)
        return _prod(x) * _prod(w[2:]) if _known(x, w) else None
    if op == "TRANSPOSE_CONV":  # (output_shape, weights OHWI, input): ins given as (input, weights)
        return _prod(x) * _prod(w[:3]) if _known(x, w) else None
    if op == "CONV_3D":  # (kd, kh, kw, C, O)
        return _prod(out) * _prod(w[:4]) if _known(w, out) else None
    if op in ("MatMul", "BATCH_MATMUL"):
        return _prod(out) * _matmul_k(x, out) if _known(x, out) else None
    if op == "Gemm":  # (M, K) or transposed; output (M, N)
        return _prod(out) * (int(x[1]) if x[0] == out[0] else int(x[0])) if _known(x, out) and len(x) == 2 else None
    if op == "FULLY_CONNECTED":  # weights (O, I)
        return _prod(out) * int(w[-1]) if _known(w, out) else None
    if op in ("LSTM", "GRU", "RNN", "LSTMSequence", "GRUSequence", "RNNSequence", "LSTMCell", "GRUCell", "RNNCell",
              "UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM", "UNIDIRECTIONAL_SEQUENCE_RNN",
              "BIDIRECTIONAL_SEQUENCE_RNN"):
        # every step multiplies its input and its hidden state by the gate weights: steps x batch
        # (the input's values over its feature size) x the weights' elements
        weights = [s for s in ins[1:] if s is not None]
        return (_prod(x) // int(x[-1])) * sum(_prod(s) for s in weights) if _known(x, *weights) and weights else None
    return None


def floor_failure(c: dict[str, Any] | None, floor: float, target: str = "") -> str:
    """Why an int8 artifact with this ``int8_compute`` is not int8 enough, or ``""``.

    It is not when it has compute ops and none of them runs in int8, or when its share of the
    work (``mac_share``; ``share``, the op count, where the MACs are not known) is under ``floor``.
    An artifact whose file could not be read (``share`` None) or that has no compute ops is not
    judged here: there is nothing to weigh."""
    if not c or c.get("share") is None or not c.get("compute_ops"):
        return ""
    by_macs = c.get("mac_share") is not None
    share = float(c["mac_share"] if by_macs else c["share"])
    if c.get("int8_ops") and share >= floor:
        return ""
    kinds = ", ".join(c.get("float_ops") or []) or "all"
    runs = f"; the float model runs on {target} as it is" if target else ""
    if not c.get("int8_ops"):
        found = f"none of its {c['compute_ops']} compute ops runs in int8 ({kinds} float)"
    else:
        what = "multiply-accumulates" if by_macs else "compute ops"
        found = (f"{share:.1%} of its {what} run in int8 ({c['int8_ops']} of {c['compute_ops']} ops; {kinds} float), "
                 f"under the floor of {floor:.0%}")
    return (f"not an int8 artifact: {found}{runs}; keep fewer layers float (--float-nodes, or calibration data "
            "that covers them), or set the floor with --min-int8-share")


def label(c: dict[str, Any] | None) -> str:
    """The summary table's cell: ``100% of MACs (12/12 ops)``, ``84% of MACs (2/3 ops; float: Conv)``,
    ``67% of ops (2/3; float: Conv)`` where the MACs are not known, ``-`` where nothing is."""
    if not c or c.get("share") is None:
        return "-"
    kept = f"; float: {', '.join(c['float_ops'])}" if c.get("float_ops") else ""
    cond = c.get("conditional") or {}
    if cond.get("share") is not None:  # an If's branches: how much of that part is int8
        branch = cond["mac_share"] if cond.get("mac_share") is not None and c.get("mac_share") is not None else cond["share"]
        kept += f"; If branches {branch:.0%}"
    if c.get("mac_share") is not None:
        return f"{c['mac_share']:.0%} of MACs ({c['int8_ops']}/{c['compute_ops']} ops{kept})"
    return f"{c['share']:.0%} of ops ({c['int8_ops']}/{c['compute_ops']}{kept})"


# ----------------------------------------------------------------------------- ONNX
def _onnx_graphs(g, conditional: bool = False):
    """The graph and every subgraph in it (If branches, Loop and Scan bodies), each with whether
    it runs only on a condition (inside an If branch)."""
    import onnx

    yield g, conditional
    for n in g.node:
        for a in n.attribute:
            inner = conditional or n.op_type == "If"
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _onnx_graphs(a.g, inner)
            for sub in a.graphs:
                yield from _onnx_graphs(sub, inner)


def _onnx_shapes(model) -> dict[str, list[int]]:
    """Every tensor's static shape that ONNX shape inference finds, in the graph and its subgraphs
    (initializers by their dims)."""
    import onnx

    try:
        g = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # noqa: BLE001 - shapes are for weighing; a graph it cannot infer keeps the count
        g = model.graph
    shapes: dict[str, list[int]] = {}
    for sub, _ in _onnx_graphs(g):
        shapes.update({i.name: [int(d) for d in i.dims] for i in sub.initializer})
        for v in list(sub.value_info) + list(sub.input) + list(sub.output):
            t = v.type.tensor_type
            if t.HasField("shape"):
                shapes[v.name] = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
    return shapes


#: Where an ONNX compute op's weights sit, when they are not its second input (LSTM/GRU/RNN: W, R).
ONNX_RECURRENT = frozenset({"LSTM", "GRU", "RNN"})


def _onnx_ops(path: Path) -> list[tuple[str, bool, int | None, bool]]:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    graphs = list(_onnx_graphs(model.graph))
    shapes = _onnx_shapes(model)
    # names are read across the graph and its subgraphs alike: a branch sees the outer scope's tensors
    dtype: dict[str, int] = {i.name: i.data_type for g, _ in graphs for i in g.initializer}
    for g, _ in graphs:
        for n in g.node:
            if n.op_type == "Constant":
                for a in n.attribute:
                    if a.name == "value" and a.t is not None:
                        dtype[n.output[0]] = a.t.data_type
    producer = {o: n for g, _ in graphs for n in g.node for o in n.output}

    def quantizer_dtype(node) -> int | None:
        """The integer type a QuantizeLinear / DequantizeLinear works in."""
        if len(node.input) > 2 and node.input[2]:
            return dtype.get(node.input[2])
        if node.op_type == "QuantizeLinear":
            return 2  # no zero point: uint8
        x = producer.get(node.input[0])
        if node.input[0] in dtype:
            return dtype[node.input[0]]
        return quantizer_dtype(x) if x is not None and x.op_type == "QuantizeLinear" else None

    def dequantized_8bit(tensor: str) -> bool:
        node, hops = producer.get(tensor), 0
        while node is not None and node.op_type in ONNX_TRANSPARENT and node.input and hops < 16:
            node, hops = producer.get(node.input[0]), hops + 1
        return node is not None and node.op_type == "DequantizeLinear" and quantizer_dtype(node) in ONNX_8BIT

    def weighed(n, kind: str) -> int | None:
        if kind.startswith("QLinear"):  # (x, x_scale, x_zp, w, ...)
            ins = [n.input[0], n.input[3] if len(n.input) > 3 else ""]
        elif kind in ONNX_RECURRENT:
            ins = list(n.input)[:3]
        else:
            ins = list(n.input)[:2]
        base = {"QLinearConv": "Conv", "ConvInteger": "Conv", "QLinearMatMul": "MatMul", "MatMulInteger": "MatMul",
                "MatMulIntegerToFloat": "MatMul", "QLinearConvTranspose": "ConvTranspose", "QGemm": "Gemm",
                "DynamicQuantizeMatMul": "MatMul", "DynamicQuantizeLSTM": "LSTM"}.get(kind, kind)
        return _macs(f"onnx:{base}", [shapes.get(t) if t else None for t in ins], shapes.get(n.output[0]) if n.output else None)

    ops = []
    for g, conditional in graphs:
        for n in g.node:
            if n.op_type in ONNX_INTEGER:
                ops.append((n.op_type, True, weighed(n, n.op_type), conditional))
            elif n.op_type in ONNX_COMPUTE and n.domain in ("", "ai.onnx", "com.microsoft"):
                data = [t for t in list(n.input)[:2] if t]
                ops.append((n.op_type, bool(data) and all(dequantized_8bit(t) for t in data), weighed(n, n.op_type),
                            conditional))
    return ops


# ----------------------------------------------------------------------------- OpenVINO IR
def _ov_dims(port) -> list[int] | None:
    try:
        return [int(d.text) for d in port.findall("dim")]
    except (TypeError, ValueError):  # a dynamic dimension ("?", "-1")
        return None


def _openvino_ops(path: Path) -> list[tuple[str, bool, int | None, bool]]:
    ops: list[tuple[str, bool, int | None, bool]] = []
    _openvino_graph(ET.parse(str(path)).getroot(), False, ops)
    return ops


#: Layers holding graphs of their own (each with its own layer ids), and the tags of those graphs.
OV_BODIES = ("then_body", "else_body", "body")


def _openvino_graph(net, conditional: bool, ops: list) -> None:
    """The compute ops of one graph (the net, or an If / Loop / TensorIterator body: its own
    ``layers`` and ``edges``, its own id space), appended to ``ops``; bodies recursively."""
    found_layers, found_edges = net.find("layers"), net.find("edges")
    layers = {layer.get("id"): layer for layer in (found_layers.findall("layer") if found_layers is not None else [])}
    into: dict[tuple[str | None, str | None], str | None] = {}  # (to layer, to port) -> from layer
    for e in found_edges.findall("edge") if found_edges is not None else []:
        into[(e.get("to-layer"), e.get("to-port"))] = e.get("from-layer")

    def in_ports(layer) -> list[str]:
        inp = layer.find("input")
        return [p.get("id") for p in inp.findall("port")] if inp is not None else []

    def source(layer_id: str | None, port: str | None):
        src = into.get((layer_id, port))
        return layers.get(src) if src is not None else None

    def fake_quantized(layer) -> bool:
        data = layer.find("data")
        try:
            return int((data.get("levels") if data is not None else 0) or 0) in OV_LEVELS
        except ValueError:
            return False

    def compressed_weight(layer, hops: int = 0) -> bool:
        """A Multiply / Subtract / Convert chain back to an i8/u8 Constant."""
        if layer is None or hops > 8:
            return False
        kind = layer.get("type")
        if kind == "Const":
            data = layer.find("data")
            return data is not None and data.get("element_type") in OV_8BIT
        if kind in ("Convert", "Multiply", "Subtract") or kind in OV_TRANSPARENT:
            first = in_ports(layer)[:1]
            return bool(first) and compressed_weight(source(layer.get("id"), first[0]), hops + 1)
        return False

    def quantized(layer) -> str:
        """'fq' (fake-quantized 8-bit), 'weight' (an i8/u8 compressed constant) or ''."""
        hops = 0
        while layer is not None and layer.get("type") in OV_TRANSPARENT and hops < 16:
            first = in_ports(layer)[:1]
            layer, hops = (source(layer.get("id"), first[0]) if first else None), hops + 1
        if layer is None:
            return ""
        if layer.get("type") == "FakeQuantize":
            return "fq" if fake_quantized(layer) else ""
        if layer.get("type") in ("Convert", "Multiply", "Subtract") and compressed_weight(layer):
            return "weight"
        # An activation dequantized from 8 bits (what ONNX Runtime's QDQ becomes in OpenVINO):
        # FakeQuantize(256) -> Convert(u8/i8) -> Convert(f32) -> Subtract -> Multiply.
        seen_convert, hops = False, 0
        while layer is not None and layer.get("type") in ("Convert", "Multiply", "Subtract") and hops < 6:
            seen_convert = seen_convert or layer.get("type") == "Convert"
            first = in_ports(layer)[:1]
            layer, hops = (source(layer.get("id"), first[0]) if first else None), hops + 1
        if seen_convert and layer is not None and layer.get("type") == "FakeQuantize" and fake_quantized(layer):
            return "fq"
        return ""

    def weighed(layer, kind: str) -> int | None:
        inp, outp = layer.find("input"), layer.find("output")
        ins = [_ov_dims(p) for p in inp.findall("port")] if inp is not None else []
        outs = [_ov_dims(p) for p in outp.findall("port")] if outp is not None else []
        if "Sequence" in kind or "Cell" in kind:  # (X, H0, [C0,] [seq_len,] W, R, B): weigh by W and R
            w_r = [d for d in ins[1:] if d is not None and len(d) >= 2][-3:-1] if "Sequence" in kind else ins[-3:-1]
            ins = ins[:1] + w_r
        data = layer.find("data")
        if kind == "MatMul" and ins and ins[0] is not None and data is not None and data.get("transpose_a") == "true":
            # transpose_a: the reduction is the other axis
            a = list(ins[0])
            if len(a) >= 2:
                a[-1], a[-2] = a[-2], a[-1]
                ins = [a] + ins[1:]
        return _macs(f"ov:{kind}", ins, outs[0] if outs else None)

    for layer in layers.values():
        kind = layer.get("type")
        for tag in OV_BODIES:
            body = layer.find(tag)
            if body is not None:
                _openvino_graph(body, conditional or kind == "If", ops)
        if kind not in OV_COMPUTE:
            continue
        ports = in_ports(layer)[:2]
        found = [quantized(source(layer.get("id"), p)) for p in ports]
        ops.append((kind, bool(found) and all(found) and "fq" in found, weighed(layer, kind), conditional))


# ----------------------------------------------------------------------------- TFLite
def _tflite_conditional(m, codes: list[str]) -> set[int]:
    """The subgraphs that run only on a condition: an IF's branches, and what they call in turn."""
    calls: dict[int, set[int]] = {}
    branches: set[int] = set()
    for i, sg in enumerate(m.subgraphs or []):
        for op in sg.operators or []:
            kind = codes[op.opcodeIndex] if op.opcodeIndex < len(codes) else ""
            o = op.builtinOptions
            found = {getattr(o, a) for a in ("thenSubgraphIndex", "elseSubgraphIndex", "condSubgraphIndex",
                                             "bodySubgraphIndex", "initSubgraphIndex") if isinstance(getattr(o, a, None), int)}
            calls.setdefault(i, set()).update(found)
            if kind == "IF":
                branches |= found
    todo, seen = list(branches), set(branches)
    while todo:
        for j in calls.get(todo.pop(), ()):
            if j not in seen:
                seen.add(j)
                todo.append(j)
    return seen


def _tflite_ops(path: Path) -> list[tuple[str, bool, int | None, bool]]:
    from .tflite_native import _load, _op_names  # the flatbuffer reader and op names the TFLite rewrites use

    schema, m = _load(path.read_bytes())
    codes = _op_names(schema, m)
    conditional = _tflite_conditional(m, codes)
    eight = {schema.TensorType.INT8, schema.TensorType.UINT8}
    ops = []
    for index, sg in enumerate(m.subgraphs or []):
        cond = index in conditional
        for op in sg.operators or []:
            kind = codes[op.opcodeIndex] if op.opcodeIndex < len(codes) else ""
            if kind in TFLITE_INT8_CUSTOM:
                ops.append((kind, True, None, cond))  # a compiled Edge TPU subgraph: its MACs are not in the file
                continue
            if kind not in TFLITE_COMPUTE:
                continue
            ins = [int(t) for t in (op.inputs if op.inputs is not None else [])]
            if kind == "TRANSPOSE_CONV":  # (output_shape, weights, input)
                data = ins[2:3] + ins[1:2]
            elif "LSTM" in kind or "RNN" in kind or kind == "SVDF":  # input, then the first weights present
                data = ins[:1] + [t for t in ins[1:5] if t >= 0][:1]
            else:
                data = ins[:2]
            data = [t for t in data if t >= 0]
            shape = lambda t: [int(d) for d in sg.tensors[t].shape] if t >= 0 and sg.tensors[t].shape is not None else None  # noqa: E731
            outs = [int(t) for t in (op.outputs if op.outputs is not None else [])]
            if "LSTM" in kind or "RNN" in kind:  # input, then every 2-D weight matrix (input and recurrent)
                weigh = [shape(ins[0])] + [shape(t) for t in ins[1:9] if t >= 0 and len(sg.tensors[t].shape) == 2]
            else:
                weigh = [shape(t) for t in data]
            macs = _macs(f"tflite:{kind}", weigh, shape(outs[0]) if outs else None)
            ops.append((kind, len(data) == 2 and all(sg.tensors[t].type in eight for t in data), macs, cond))
    return ops
