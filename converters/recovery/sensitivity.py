"""Which quantized layer is at fault: the error each layer adds, from float vs int8 intermediates.

For every format the float model and the int8 candidate run side by side on held-back samples
with every intermediate tensor exposed, tensors are paired by name, and each layer's output
error (relative L2: ``||int8 - float|| / ||float||``, averaged over samples) is compared with
the worst error of its inputs: what the layer *adds* ranks it. Names are the format's own, so
a ranked layer can be kept float as it is:

* ONNX QDQ: the pre-processed float ONNX vs the QDQ model (an activation ``T`` is read after its
  ``T_DequantizeLinear_Output``); layers are ONNX node names (``nodes_to_exclude``).
* OpenVINO IR: the float model as OpenVINO read it vs the NNCF IR (an op ``X`` is read after its
  ``X/fq_output_0`` quantizer); layers are op names (``IgnoredScope(names=...)``).
* int8 TFLite: the float TFLite form vs the int8 model, tensors dequantized with their scale
  and zero point; layers are op output tensor names (the MLIR quantizer's denylisted nodes).
"""

from __future__ import annotations

import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from edge_sdk._deps import require

#: Held-back samples the intermediates are compared on (enough to rank, cheap to run).
SAMPLES = 8


@dataclass
class LayerError:
    """One quantized layer's contribution.

    Attributes:
        name: The layer's name in its format (what ``--float-nodes`` takes).
        op: Op type.
        error: Relative error of its output in the int8 model.
        added: What ranks it: the noise of its output tensor's own int8 step (its float values
            through its own scale and zero point), where the format says that step; else the
            error its output adds over its inputs' worst error.
        index: Position in execution order (the Edge TPU maps a prefix; later layers make a CPU tail).
        gain: Gate score improvement when this layer alone is kept float (measured for the top ones).
    """

    name: str
    op: str
    error: float
    added: float
    index: int
    gain: float | None = None
    float_set: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = {"name": self.name, "op": self.op, "error": round(self.error, 5), "added": round(self.added, 5),
             "index": self.index, "keep_float": self.float_set or [self.name]}
        if self.gain is not None:
            d["gain"] = round(self.gain, 4)
        return d


def _rel(a: np.ndarray, b: np.ndarray, axis: int = 1) -> float:
    """Relative L2 error, per channel along ``axis`` for rank >= 3 (the worst channel counts).

    Per channel, because a tensor that packs values of different scales (a detector's pixel
    boxes beside its 0..1 scores) hides the small channels' collapse in its whole-tensor norm.
    Channels far below the median channel's norm are left out (near-dead ReLU channels).
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape or not a.size:
        return float("nan")
    if a.ndim >= 3 and a.size // a.shape[axis] >= 16:  # a channel of one value (a pooled vector) is noise
        a2 = np.moveaxis(a, axis, 0).reshape(a.shape[axis], -1)
        b2 = np.moveaxis(b, axis, 0).reshape(a.shape[axis], -1)
        norms = np.linalg.norm(a2, axis=1)
        # Live channels: at least a tenth of the median channel's norm. A near-dead channel erased
        # by int8 is not a loss; the many small channels beside one huge one are.
        nonzero = norms[norms > 0]  # padded (all-zero) channels say nothing about the scale
        live = norms >= max(0.1 * float(np.median(nonzero)) if nonzero.size else 0.0, 1e-30)
        if live.any():
            return float(np.max(np.linalg.norm(a2 - b2, axis=1)[live] / norms[live]))
    n = float(np.linalg.norm(a))
    return float(np.linalg.norm(a - b) / n) if n > 0 else float(np.linalg.norm(b) > 0)


def _fake_quant(v: np.ndarray, scale, zero, qmin: int, qmax: int) -> np.ndarray:
    return (np.clip(np.round(v / scale) + zero, qmin, qmax) - zero) * scale


def _compare(pairs: dict[str, str], run_float: Callable[[Any], dict[str, np.ndarray]],
             run_int8: Callable[[Any], dict[str, np.ndarray]], feeds: list, quantizers: dict[str, Callable],
             axis: int) -> tuple[dict[str, float], dict[str, float]]:
    """Run both models sample by sample and keep only figures, never the tensors: a detector at
    800x608 has a gigabyte of intermediates per sample and model (PicoDet's did; holding eight
    samples of both models ran this machine's 24 GiB out).

    Args:
        pairs: float tensor name -> the int8 model's name for it.
        quantizers: float tensor name -> its own int8 step, where the format says it.

    Returns:
        (tensor -> mean error of the int8 model's tensor, tensor -> mean noise of its own int8 step),
        over the samples where both models produced it.
    """
    errors: dict[str, list[float]] = {}
    local: dict[str, list[float]] = {}
    for feed in feeds:
        fo = run_float(feed)
        qo = run_int8(feed)
        for t, qt in pairs.items():
            a, b = fo.get(t), qo.get(qt)
            if a is None or b is None:
                continue
            errors.setdefault(t, []).append(_rel(a, b, axis))
            fq = quantizers.get(t)
            if fq is not None:
                with np.errstate(all="ignore"):
                    local.setdefault(t, []).append(_rel(a, fq(np.asarray(a, np.float64)), axis))
        del fo, qo
    n = len(feeds)
    return ({t: float(np.mean(v)) for t, v in errors.items() if len(v) == n},
            {t: float(np.mean(v)) for t, v in local.items()})


def _rank(nodes: list[tuple[str, str, list[str], str]], errors: dict[str, float],
          local: dict[str, float] | None = None) -> list[LayerError]:
    """``nodes``: (name, op, input tensors, output tensor) in order; ``errors``: tensor -> error;
    ``local``: tensor -> its own quantization noise (what ranks, where known: accumulated error
    also grows by amplification downstream of the real culprit).

    A layer's error shows on its output tensor, but the int8 step that makes it belongs to that
    tensor: every format quantizes it for its readers too. So "keep this layer float" means the
    layer *and* the layers reading its output (``float_set``): then the tensor stays float.
    """
    readers: dict[str, list[str]] = {}
    for name, _, inputs, _ in nodes:
        for t in inputs:
            readers.setdefault(t, []).append(name)
    out = []
    for i, (name, op, inputs, output) in enumerate(nodes):
        err = errors.get(output)
        if err is None or not np.isfinite(err):
            continue
        before = [errors[t] for t in inputs if t in errors and np.isfinite(errors[t])]
        added = max(0.0, err - (max(before) if before else 0.0))
        if local is not None:
            added = local.get(output, 0.0)
        out.append(LayerError(name, op, err, added, i, float_set=[name, *dict.fromkeys(readers.get(output, []))]))
    return sorted(out, key=lambda e: -e.added)


# ----------------------------------------------------------------------------- ONNX QDQ
def _onnx_outputs(model, names: list[str]):
    from onnx import TensorProto, helper

    have = {o.name for o in model.graph.output}
    for n in names:
        if n not in have:
            model.graph.output.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, None))
    return model


def _not_float(model) -> set[str]:
    """Tensors shape inference knows to be of another type than float (a comparison's bool, an
    index): exposed as float outputs they make ONNX Runtime refuse the whole model (a detector with
    its NMS inside: "Type (tensor(float)) of output arg (/Greater_output_0) does not match")."""
    import onnx
    from onnx import TensorProto

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - without inference every tensor is tried as float, as before
        return set()
    typed = list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input)
    return {v.name for v in typed if v.type.tensor_type.elem_type not in (0, TensorProto.FLOAT)}


def onnx_layers(float_onnx: Path, int8_onnx: Path, feeds: list[dict]) -> list[LayerError]:
    onnx = require("onnx", "the sensitivity report")
    ort = require("onnxruntime", "the sensitivity report")
    fm, qm = onnx.load(str(float_onnx)), onnx.load(str(int8_onnx))
    consts = {i.name for i in fm.graph.initializer} | {o for n in fm.graph.node if n.op_type == "Constant" for o in n.output}
    nodes = [(n.name, n.op_type, [t for t in n.input if t and t not in consts], n.output[0]) for n in fm.graph.node
             if n.op_type != "Constant" and n.output]
    q_tensors = {o for n in qm.graph.node for o in n.output}
    skip = _not_float(fm) | _not_float(qm)
    nodes = [n for n in nodes if n[3] not in skip]
    pairs = {}
    for _, _, _, t in nodes:
        dq = f"{t}_DequantizeLinear_Output"
        pairs[t] = dq if dq in q_tensors else (t if t in q_tensors else None)
    pairs = {k: v for k, v in pairs.items() if v and v not in skip}
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # keep every tensor it names
    fs = ort.InferenceSession(_onnx_outputs(fm, list(pairs)).SerializeToString(), so, providers=["CPUExecutionProvider"])
    qs = ort.InferenceSession(_onnx_outputs(qm, list(pairs.values())).SerializeToString(), so,
                              providers=["CPUExecutionProvider"])
    fnames, qnames = [o.name for o in fs.get_outputs()], [o.name for o in qs.get_outputs()]
    errors, local = _compare(pairs, lambda feed: dict(zip(fnames, fs.run(None, feed))),
                             lambda feed: dict(zip(qnames, qs.run(None, feed))), feeds, _qdq_quantizers(qm), 1)
    return _rank(nodes, errors, local)


def _qdq_quantizers(qm) -> dict[str, Callable]:
    """Float tensor name -> its QuantizeLinear step (per-tensor scale and zero point) in a QDQ model."""
    from onnx import numpy_helper

    inits = {i.name: numpy_helper.to_array(i) for i in qm.graph.initializer}
    out = {}
    for n in qm.graph.node:
        if n.op_type != "QuantizeLinear" or len(n.input) < 3 or n.input[1] not in inits or n.input[2] not in inits:
            continue
        scale, zero = inits[n.input[1]], inits[n.input[2]]
        if scale.size != 1:
            continue
        info = np.iinfo(zero.dtype)
        name = n.input[0].removesuffix("_QuantizeLinear_Input")
        out[name] = (lambda v, s=float(scale), z=int(zero), lo=info.min, hi=info.max: _fake_quant(v, s, z, lo, hi))
    return out


# ----------------------------------------------------------------------------- OpenVINO
def _ov_runner(ov, model, skip: set[str]) -> tuple[Callable[[dict], dict[str, np.ndarray]], list]:
    """``model`` with every f32 op output exposed: (run one feed -> op name -> value, the ops)."""
    core = ov.Core()
    ops = [op for op in model.get_ordered_ops() if op.get_type_name() not in skip and op.get_output_size() > 0
           and op.get_output_element_type(0).get_type_name() == "f32"]
    for op in ops:  # a unique tensor name per op output, so the compiled model's outputs can be told apart
        op.output(0).get_tensor().add_names({f"edge_sdk_probe::{op.get_friendly_name()}"})
    model.add_outputs([op.output(0) for op in ops])
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    ports = [(p, name) for p in compiled.outputs
             for name in [next((n.split("::", 1)[1] for n in p.get_names() if n.startswith("edge_sdk_probe::")), None)]
             if name is not None]

    def run(feed: dict) -> dict[str, np.ndarray]:
        res = request.infer(feed)
        return {name: np.array(res[port]) for port, name in ports}
    return run, ops


def openvino_layers(float_model, int8_xml: Path, feeds: list[dict]) -> list[LayerError]:
    ov = require("openvino", "the sensitivity report")
    skip = {"Parameter", "Constant", "Result", "ShapeOf", "Convert"}
    run_float, fops = _ov_runner(ov, float_model.clone(), skip)
    run_int8, qops = _ov_runner(ov, ov.Core().read_model(str(int8_xml)), skip)
    qnames = {op.get_friendly_name() for op in qops}
    pairs = {name: f"{name}/fq_output_0" if f"{name}/fq_output_0" in qnames else name
             for name in (op.get_friendly_name() for op in fops)}
    pairs = {k: v for k, v in pairs.items() if v in qnames}
    errors, local = _compare(pairs, run_float, run_int8, feeds, _ov_quantizers(ov.Core().read_model(str(int8_xml))), 1)
    nodes = [(op.get_friendly_name(), op.get_type_name(),
              [op.input_value(i).get_node().get_friendly_name() for i in range(op.get_input_size())],
              op.get_friendly_name()) for op in fops]
    return _rank(nodes, errors, local)


def _ov_quantizers(model) -> dict[str, Callable]:
    """Op name -> the FakeQuantize NNCF put on its output (``<op>/fq_output_0``)."""
    out = {}
    for op in model.get_ops():
        name = op.get_friendly_name()
        if op.get_type_name() != "FakeQuantize" or not name.endswith("/fq_output_0"):
            continue
        try:
            consts = [np.asarray(op.input_value(i).get_node().get_data(), np.float64) for i in range(1, 5)]
        except Exception:  # noqa: BLE001 - a range that is not a plain Constant: no local figure for it
            continue
        levels = int(op.get_attributes()["levels"])
        il, ih, ol, oh = consts

        def fq(v, il=il, ih=ih, ol=ol, oh=oh, levels=levels):
            x = np.clip(v, il, ih)
            q = np.round((x - il) / np.maximum(ih - il, 1e-30) * (levels - 1))
            return q / (levels - 1) * (oh - ol) + ol

        out[name.removesuffix("/fq_output_0")] = fq
    return out


# ----------------------------------------------------------------------------- TFLite
def _tflite_runner(model: bytes) -> tuple[Callable[[list], dict[str, np.ndarray]], set[str]]:
    """``model`` with every activation made an output: (run one feed (arrays in input order) ->
    tensor name -> value (int8 tensors dequantized with their scale and zero point), the names)."""
    from ai_edge_litert.interpreter import Interpreter

    from ..tflite_native import _is_const, _load, _pack

    schema, m = _load(model)
    sg = m.subgraphs[0]
    produced = {int(o) for op in sg.operators for o in op.outputs}
    acts = [i for i in sorted(produced) if not _is_const(m, sg, i)]
    m.subgraphs[0].outputs = sorted(set(int(o) for o in sg.outputs) | set(acts))
    m.signatureDefs = []
    it = Interpreter(model_content=_pack(m, len(model)))
    it.allocate_tensors()
    ins = it.get_input_details()
    details = {d["index"]: d for d in it.get_tensor_details()}

    def run(feed) -> dict[str, np.ndarray]:
        arrays = list(feed.values()) if isinstance(feed, dict) else feed
        for d, a in zip(ins, arrays):
            arr = np.asarray(a)
            if d["dtype"] != np.float32:  # integer I/O: quantize the float feed as the facade does
                scale, zero = d["quantization"]
                info = np.iinfo(d["dtype"])
                arr = np.clip(np.round(arr / scale) + zero, info.min, info.max)
            it.set_tensor(d["index"], arr.astype(d["dtype"]))
        it.invoke()
        values = {}
        for d in it.get_output_details():
            a = it.get_tensor(d["index"])
            scale, zero = details[d["index"]]["quantization"]
            if a.dtype != np.float32 and scale:
                a = (a.astype(np.float64) - zero) * scale
            values[d["name"]] = np.asarray(a, np.float64)
        return values
    return run, {d["name"] for d in it.get_output_details()}


def tflite_layers(float_model: bytes, int8_model: bytes, feeds: list) -> list[LayerError]:
    from ..graph import from_tflite

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (run_float, fnames), (run_int8, qnames) = _tflite_runner(float_model), _tflite_runner(int8_model)
        errors, local = _compare({n: n for n in fnames if n in qnames}, run_float, run_int8, feeds,
                                 _tflite_quantizers(int8_model), -1)
    g = from_tflite(float_model)
    nodes = [(n.outputs[0], n.native, [t for t in n.inputs if t and t not in g.constants], n.outputs[0])
             for n in tflite_layers_in_order(g)]
    return _rank(nodes, errors, local)


def tflite_layers_in_order(graph) -> list:
    """A float TFLite graph's layers in execution order, as :func:`tflite_layers` ranks them (their
    ``LayerError.index`` is the position here): every op with an output but the (de)quantizers."""
    return [n for n in graph.nodes if n.outputs and n.native not in ("QUANTIZE", "DEQUANTIZE")]


def _tflite_quantizers(model: bytes) -> dict[str, Callable]:
    """Tensor name -> its int8/uint8 step (per-tensor scale and zero point) in an int8 TFLite model."""
    from ai_edge_litert.interpreter import Interpreter

    out = {}
    for d in Interpreter(model_content=model).get_tensor_details():
        qp = d.get("quantization_parameters") or {}
        scales, zeros = qp.get("scales", []), qp.get("zero_points", [])
        if d["dtype"] in (np.int8, np.uint8) and len(scales) == 1:
            info = np.iinfo(d["dtype"])
            out[d["name"]] = (lambda v, s=float(scales[0]), z=int(zeros[0]), lo=info.min, hi=info.max:
                              _fake_quant(v, s, z, lo, hi))
    return out


# ----------------------------------------------------------------------------- dispatch
def layer_errors(candidate, feeds: list[dict]) -> list[LayerError]:
    """Rank the candidate's layers by the error each adds.

    Raises:
        ConversionError: the format has no sensitivity analysis, or running it failed.
    """
    from edge_sdk.errors import ConversionError

    job = candidate.facts["job"]
    feeds = feeds[:SAMPLES]
    try:
        if candidate.fmt == "onnx-qdq":
            return onnx_layers(job.cache["qdq_prepped"][0], candidate.folder / candidate.result.model_file, feeds)
        if candidate.fmt == "openvino-ir":
            from ..openvino_ir import _read

            model, _ = _read(job)
            return openvino_layers(model, candidate.folder / candidate.result.model_file, feeds)
        if candidate.fmt == "tflite-int8":
            from ..tflite_int8 import float_form

            form = float_form(job)
            names = [s.name for s in job.source.inputs]
            perms = form.input_perms
            rows = [[np.transpose(np.asarray(f[n], np.float32), perms[n]) if n in perms else np.asarray(f[n], np.float32)
                     for n in names] for f in feeds]
            return tflite_layers(form.model, (candidate.folder / candidate.result.model_file).read_bytes(), rows)
    except ConversionError:
        raise
    except Exception as exc:  # noqa: BLE001 - the runtimes raise many types
        raise ConversionError(f"Sensitivity analysis of {candidate.fmt} failed: {type(exc).__name__}: {str(exc)[:200]}") from None
    raise ConversionError(f"No sensitivity analysis for format {candidate.fmt}.")


__all__ = ["LayerError", "layer_errors", "onnx_layers", "openvino_layers", "tflite_layers"]
