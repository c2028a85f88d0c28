"""int8 ONNX in QDQ form (Jetson/TensorRT, ONNX Runtime on ARM).

Steps: upgrade the opset where quantization needs it (per-channel ``DequantizeLinear`` with an
``axis`` needs opset >= 13; ONNX Runtime writes an invalid model otherwise), ONNX Runtime's
quantization pre-processing (shape inference + graph optimisation), then ``quantize_static``
in QDQ format with per-channel int8 weights and the profile's activation type and symmetry.
TensorRT only accepts symmetric int8 (zero point 0): its profile sets ``activation_symmetric``.
The TensorRT engine itself is built on the device (engines do not travel across TensorRT
releases); the manifest records how. Where ``tensorrt`` imports here, the engine is built too.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from edge_sdk._deps import require, version_of
from edge_sdk.errors import ConversionError
from edge_sdk.manifest import TensorSpec

from .base import ConvertJob, FormatResult, cpu_seconds, reuse
from .console import quiet
from .targets import TENSORRT_OPTIONS
from .tflite_native import RANGE_METHODS, RangeStats
from .sources import name_nodes

MODEL_FILE = "model.onnx"
#: Lowest opset for per-channel QDQ (DequantizeLinear ``axis``).
MIN_QDQ_OPSET = 13
ENGINE_FILE = "model.engine"


class _Reader:
    """ONNX Runtime CalibrationDataReader over our feeds (defined lazily: ORT is optional)."""

    def __init__(self, feeds):
        self._it = iter(feeds)

    def get_next(self):
        return next(self._it, None)


def _upgrade_opset(model, target: int, log) -> tuple[object, int, int]:
    onnx = require("onnx", "int8 ONNX conversion")
    current = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if current >= target:
        return model, current, current
    log(f"upgrading opset {current} -> {target}")
    try:
        upgraded = onnx.version_converter.convert_version(model, target)
        onnx.checker.check_model(upgraded)
    except Exception as exc:  # noqa: BLE001 - the version converter raises plain RuntimeErrors
        raise ConversionError(f"Cannot upgrade the ONNX opset from {current} to {target}: {str(exc)[:200]}",
                              "Export the model at opset >= 13 yourself.") from None
    return upgraded, current, target


def _tensor_specs(model, quant_dtype: str | None = None) -> tuple[list[TensorSpec], list[TensorSpec]]:
    onnx = require("onnx", "int8 ONNX conversion")
    inits = {i.name for i in model.graph.initializer}

    def spec(vi) -> TensorSpec:
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
        if any(d < 1 for d in dims):
            raise ConversionError(f"Tensor '{vi.name}' of the int8 ONNX is not static: {dims}.")
        return TensorSpec(vi.name, dims, np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)).name)

    return ([spec(v) for v in model.graph.input if v.name not in inits], [spec(v) for v in model.graph.output])


def int8_evidence(model) -> dict[str, int]:
    """Count the QDQ nodes and int8 initializers: proof the graph is really quantized."""
    from onnx import TensorProto

    ops = [n.op_type for n in model.graph.node]
    return {"QuantizeLinear": ops.count("QuantizeLinear"), "DequantizeLinear": ops.count("DequantizeLinear"),
            "int8_initializers": sum(1 for i in model.graph.initializer if i.data_type in (TensorProto.INT8, TensorProto.UINT8))}


#: Ops with weights: left without a DequantizeLinear on their weight, they compute in float.
WEIGHTED_OPS = {"Conv", "ConvTranspose", "MatMul", "Gemm", "GRU", "LSTM", "RNN", "Attention", "Einsum"}


def float_weighted_ops(model) -> list[str]:
    """Weighted ops whose weight initializer no DequantizeLinear feeds: they run in float (e.g. a GRU,
    which ONNX Runtime's QDQ quantizer does not quantize)."""
    inits = {i.name for i in model.graph.initializer}
    dq_out = {o for n in model.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    left = []
    for n in model.graph.node:
        if n.op_type not in WEIGHTED_OPS:
            continue
        weights = [i for i in n.input[1:] if i]
        if any(i in inits for i in weights) and not any(i in dq_out for i in weights):
            left.append(f"{n.op_type} {n.name or n.output[0]}")
    return left


def _tensorrt(job: ConvertJob, result: FormatResult) -> None:
    """Record how the device builds the engine; build it here when TensorRT imports."""
    if not job.targets.qdq.tensorrt_engine:
        return
    result.backend_options[TENSORRT_OPTIONS] = {
        "build_on_device": True,
        "trtexec": f"trtexec --onnx={MODEL_FILE} --int8 --fp16 --saveEngine={ENGINE_FILE}",
        "python": ("builder = trt.Builder(logger); network = builder.create_network(0); "
                   f"trt.OnnxParser(network, logger).parse(open('{MODEL_FILE}','rb').read()); "
                   "config = builder.create_builder_config(); config.set_flag(trt.BuilderFlag.INT8); "
                   "config.set_flag(trt.BuilderFlag.FP16); "
                   "engine = builder.build_serialized_network(network, config)"),
        "note": "QDQ nodes carry the int8 scales: no TensorRT calibrator is needed. Engines are tied to the "
                "TensorRT version and GPU they were built with.",
    }
    try:
        trt = require("tensorrt", "building the TensorRT engine")
    except Exception:  # noqa: BLE001 - absent on a workstation without NVIDIA's wheels
        result.warnings.append("tensorrt is not importable here: no engine was built; it is built on the device "
                               f"from {MODEL_FILE} (see backend_options.tensorrt)")
        return
    from edge_sdk.runtimes.tensorrt import build_engine, compute_capability

    try:
        engine = build_engine(trt, (job.workdir / MODEL_FILE).read_bytes())
    except (ValueError, RuntimeError) as exc:  # parse / build failure
        raise ConversionError(f"TensorRT could not build an engine from the int8 ONNX: {exc}",
                              "An op may be unsupported by this TensorRT version; try an Intel or ARM profile.") from None
    (job.workdir / ENGINE_FILE).write_bytes(engine)
    result.extra_files.append((ENGINE_FILE, "engine"))
    # The runtime refuses an engine whose TensorRT version or GPU architecture differs
    # (runtimes/tensorrt.py reads these two keys).
    info = {"version": trt.__version__, "engine_file": ENGINE_FILE}
    cc = compute_capability()
    if cc:
        info["compute_capability"] = cc
    else:
        result.warnings.append("GPU compute capability unknown (cuda-python not importable): the device will "
                               "rebuild the engine from model.onnx")
    result.backend_options[TENSORRT_OPTIONS].update(info)
    result.tools[TENSORRT_OPTIONS] = trt.__version__


@contextlib.contextmanager
def _working_dir(folder: Path):
    """Run a tool that writes into the current directory inside ``folder`` (the job's scratch)."""
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def _prepped(job: ConvertJob) -> tuple[Path, int, int]:
    """The opset-upgraded, pre-processed float model quantization starts from (made once per job cache)."""
    if "qdq_prepped" in job.cache:
        return job.cache["qdq_prepped"]
    onnx = require("onnx", "int8 ONNX conversion")
    from onnxruntime.quantization.shape_inference import quant_pre_process

    per_channel = job.profile.quantization.weights == "per-channel"
    target = max(job.profile.artifact.opset, MIN_QDQ_OPSET if per_channel else 10)
    model, opset_from, opset_to = _upgrade_opset(onnx.load(str(job.onnx())), target, job.log)
    base = Path(job.cache.get("dir", job.scratch)).resolve()
    upgraded, prepped = base / "qdq_upgraded.onnx", base / "qdq_prepped.onnx"
    onnx.save(model, str(upgraded))
    job.log("ONNX Runtime quantization pre-processing")
    # ORT's symbolic shape inference, where it stops short, saves "sym_shape_infer_temp.onnx" (and its
    # external data) into the working directory: the user's, which a conversion must leave alone.
    with _working_dir(base):
        try:
            quant_pre_process(str(upgraded), str(prepped), skip_symbolic_shape=False)
        except Exception as exc:  # noqa: BLE001 - symbolic shape inference fails on some graphs; retry without
            job.log(f"pre-processing with symbolic shapes failed ({str(exc)[:80]}); retrying without")
            try:
                quant_pre_process(str(upgraded), str(prepped), skip_symbolic_shape=True)
            except Exception:  # noqa: BLE001
                shutil.copy2(upgraded, prepped)
    # ONNX Runtime keeps nodes float by name: an unnamed node could only be kept float with every
    # other unnamed one (selfie segmentation's decomposed hard-swish: 22 such nodes, offered by
    # recovery's ranking as one layer called '').
    model = onnx.load(str(prepped))
    named = name_nodes(model)
    if named:
        onnx.save(model, str(prepped))
        job.log(f"{named} unnamed node(s) named after their op type, so recovery and reports can name them")
    job.cache["qdq_prepped"] = (prepped, opset_from, opset_to)
    return job.cache["qdq_prepped"]


def _activation_stats(job: ConvertJob, prepped: Path) -> dict[str, dict[str, tuple[float, float]]]:
    """Per activation tensor, its range for each method (:meth:`~.tflite_native.RangeStats.ranges`),
    from one pass of the pre-processed model over the calibration feeds."""
    if "qdq_stats" in job.cache:
        return job.cache["qdq_stats"]
    # The float model's statistics depend on nothing a profile sets: profiles whose pre-processed
    # model and calibration feeds are the same (jetson-orin's and arm-cpu's ONNX) share one pass.
    digest = hashlib.sha256(Path(prepped).read_bytes())
    for feed in job.calib:
        for name in sorted(feed):
            digest.update(name.encode())
            digest.update(np.ascontiguousarray(feed[name]).tobytes())
    shared = job.cache.setdefault("shared", {}).setdefault("qdq_stats", {})
    if digest.hexdigest() in shared:
        job.log("activation statistics: the same float model and feeds as another profile's, reused")
        job.cache["qdq_stats"], cost = shared[digest.hexdigest()]
        reuse(job, "ONNX activation statistics", cost)
        return job.cache["qdq_stats"]
    t0, c0 = time.perf_counter(), cpu_seconds()
    onnx = require("onnx", "int8 ONNX conversion")
    ort = require("onnxruntime", "int8 ONNX conversion")
    from onnx import TensorProto, helper
    from onnxruntime.quantization.quant_utils import load_model_with_shape_infer
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    model = load_model_with_shape_infer(Path(prepped))
    ops = set(QLinearOpsRegistry) | set(QDQRegistry)
    infos = {vi.name: vi for vi in list(model.graph.value_info) + list(model.graph.output) + list(model.graph.input)}
    inits = {i.name for i in model.graph.initializer}
    names = sorted({t for n in model.graph.node if n.op_type in ops for t in [*n.input, *n.output]
                    if t in infos and t not in inits and infos[t].type.tensor_type.elem_type in (TensorProto.FLOAT, TensorProto.FLOAT16)})
    have = {o.name for o in model.graph.output}
    for t in names:
        if t not in have:
            model.graph.output.append(helper.make_tensor_value_info(t, infos[t].type.tensor_type.elem_type, None))
    job.log(f"activation statistics ({len(names)} tensors, {len(job.calib)} samples)")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = [o.name for o in sess.get_outputs()]
    acc = {t: RangeStats() for t in names}
    for feed in job.calib:
        values = dict(zip(outs, sess.run(None, feed)))
        values.update({k: v for k, v in feed.items() if k in acc})
        for t in names:
            v = values.get(t)
            if v is not None and np.size(v):
                acc[t].add(np.asarray(v, np.float32))  # float16 widened exactly; float32 as computed
    job.cache["qdq_stats"] = {t: a.ranges() for t, a in acc.items() if a.mins}
    shared[digest.hexdigest()] = (job.cache["qdq_stats"], {"seconds": time.perf_counter() - t0,
                                                            "cpu_s": cpu_seconds() - c0})
    return job.cache["qdq_stats"]


def _ranges(job: ConvertJob, prepped: Path, method: str):
    """Activation ranges per method, computed once per job cache. ``minmax`` and ``percentile``
    come from one statistics pass; ``entropy`` from ONNX Runtime's (slower) histogram calibrator."""
    key = f"qdq_ranges:{method}"
    if key in job.cache:
        return job.cache[key]
    q = require("onnxruntime.quantization", "int8 ONNX conversion")
    from onnxruntime.quantization.calibrate import TensorData, TensorsData, create_calibrator
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    if method in RANGE_METHODS:
        stats = _activation_stats(job, prepped)
        job.cache[key] = TensorsData(q.CalibrationMethod.MinMax, {
            t: TensorData(lowest=np.array(r[method][0], np.float32), highest=np.array(r[method][1], np.float32))
            for t, r in stats.items()})
        return job.cache[key]
    ops = list(set(QLinearOpsRegistry) | set(QDQRegistry))
    job.log(f"calibrating activation ranges ({method}, {len(job.calib)} samples)")
    with tempfile.TemporaryDirectory(prefix="edge-sdk-ort-calib-") as tmp, quiet(Path(job.scratch) / "ort_calibration.log"):
        calibrator = create_calibrator(prepped, ops, augmented_model_path=str(Path(tmp) / "augmented.onnx"),
                                       calibrate_method=q.CalibrationMethod.Entropy,
                                       extra_options={"symmetric": job.profile.quantization.activation_symmetric})
        calibrator.collect_data(_Reader(job.calib))
        job.cache[key] = calibrator.compute_data()  # the histogram calibrator prints progress: into the log
        del calibrator
    return job.cache[key]


def _memo_quantizer(base: type, memo: dict) -> type:
    """ONNX Runtime's QDQ quantizer, remembering each initializer's scale and zero point across
    the candidates of one format (``memo``, the job cache's): they depend on the weights and the
    quantizer's settings, never on the activation ranges or the layers kept float, and ORT
    computes them channel by channel in Python: PP-OCRv4 rec's quantize_model 5.9 -> 4.1 s from
    the second candidate on, the model byte for byte the same."""

    class Memo(base):  # type: ignore[misc, valid-type]
        def _calc_initializer_quant_params(self):  # noqa: ANN202 - ORT's own signature
            if self.tensor_quant_overrides.overrides:  # user overrides: computed as ORT does
                return super()._calc_initializer_quant_params()
            settings = (self.weight_qType, self.activation_qType, self.reduce_range, self.per_channel,
                        self.is_activation_symmetric, repr(self.extra_options.get("WeightSymmetric")),
                        self.min_real_range)

            def key(name, info):
                return (settings, name, info.tensor_type, info.axis, info.data_type)

            every = self.tensors_to_quantize
            known = {n: memo[key(n, i)] for n, i in every.items() if key(n, i) in memo}
            self.tensors_to_quantize = {n: i for n, i in every.items() if n not in known}
            try:
                fresh = super()._calc_initializer_quant_params()
            finally:
                self.tensors_to_quantize = every
            for name, params in fresh.items():
                memo[key(name, every[name])] = params
            return {**known, **fresh}

    return Memo


#: Where ONNX Runtime's quantizer names a quantized initializer (``W`` -> ``W_quantized``).
QUANTIZED_SUFFIX = "_quantized"


def _subgraph_inputs(graph) -> set[str]:
    """Every tensor name a node of ``graph`` (or of a subgraph of one of its nodes) reads."""
    names: set[str] = set()
    for node in graph.node:
        names.update(i for i in node.input if i)
        for attr in node.attribute:
            for g in [attr.g] if attr.HasField("g") else list(attr.graphs):
                names |= _subgraph_inputs(g)
    return names


def keep_float(qmodel, fmodel, nodes: set[str], op_types: set[str]):
    """``qmodel`` (ONNX Runtime's QDQ model, every layer quantized) with the layers named in
    ``nodes`` and the op types in ``op_types`` computing in float: each reads its activations
    before their QuantizeLinear and its weights and bias as the float model's initializers; the
    Q/DQ nodes and int8 initializers nothing reads any more are removed. A mixed candidate costs
    this edit instead of a second run of ORT's quantizer (5-7 s on PP-OCRv4 rec here, the
    largest part of a candidate after its gate).

    Unlike ``nodes_to_exclude``, which leaves an excluded layer reading its producer's
    dequantized (int8-rounded) output, a float layer here reads its inputs unrounded: the tensor
    stays float on that edge, int8 on the others.

    With asymmetric (uint8) activations ORT removes a Relu or Clip after a quantized layer and
    lets the QuantizeLinear's saturation clamp instead: where a float layer reads such a tensor,
    the float model's activation node is put back in front of it.

    Args:
        qmodel: The fully quantized ModelProto; edited in place.
        fmodel: The float (pre-processed) ModelProto ORT quantized; only read.

    Returns:
        ``(model, edited layer names)``, or None when an input's quantization is not one ONNX
        Runtime's QDQ quantizer writes (the caller quantizes with ``nodes_to_exclude`` instead).
    """
    from onnx import NodeProto

    graph = qmodel.graph
    float_inits = {i.name: i for i in fmodel.graph.initializer}
    float_producer = {o: n for n in fmodel.graph.node for o in n.output}
    producer = {o: n for n in graph.node for o in n.output}
    inits = {i.name: i for i in graph.initializer}
    marker = "\x00float:"
    edited: list[str] = []
    restored: dict[str, str] = {}  # tensor -> the output of its activation put back
    needed: set[str] = set()  # float initializers the restored activations read

    def unquantized(tensor: str) -> str | None:
        """``tensor`` as the float model computes it: a removed Relu/Clip put back, or None."""
        fnode, qnode = float_producer.get(tensor), producer.get(tensor)
        if fnode is None or qnode is None or fnode.op_type == qnode.op_type:
            return tensor
        if fnode.op_type not in ("Relu", "Clip") or any(i and i not in float_inits for i in fnode.input[1:]):
            return None
        if tensor not in restored:
            act = NodeProto()
            act.CopyFrom(fnode)
            act.input[0] = tensor
            act.output[0] = f"{tensor}_float_{fnode.op_type.lower()}"
            act.name = f"{fnode.name or tensor}_float"
            graph.node.insert(list(graph.node).index(qnode) + 1, act)
            needed.update(i for i in fnode.input[1:] if i)
            restored[tensor] = act.output[0]
        return restored[tensor]

    for node in list(graph.node):  # a restored activation is inserted as it goes
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        if node.name not in nodes and node.op_type not in op_types:
            continue
        for k, name in enumerate(node.input):
            dq = producer.get(name)
            if dq is None or dq.op_type != "DequantizeLinear":
                continue
            src = dq.input[0]
            q = producer.get(src)
            if q is not None and q.op_type == "QuantizeLinear":
                before = unquantized(q.input[0])  # the activation before its quantization
                if before is None:
                    return None
                node.input[k] = before
            elif src in inits and src.endswith(QUANTIZED_SUFFIX) and src[:-len(QUANTIZED_SUFFIX)] in float_inits:
                orig = float_inits[src[:-len(QUANTIZED_SUFFIX)]]
                if list(orig.dims) != list(inits[src].dims):
                    return None
                node.input[k] = marker + orig.name  # named once the unread Q/DQ nodes are gone
            else:
                return None
        edited.append(node.name)
        _float_graph_outputs(graph, node, producer)
    # Q/DQ nodes nothing reads any more (outputs, subgraphs included), until none is left.
    while True:
        read = _subgraph_inputs(graph) | {o.name for o in graph.output}
        dead = [n for n in graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")
                and not any(o in read for o in n.output)]
        if not dead:
            break
        for n in dead:
            graph.node.remove(n)
    produced = {o for n in graph.node for o in n.output}
    read = _subgraph_inputs(graph)
    keep = [i for i in graph.initializer if i.name in read]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    have = {i.name for i in graph.initializer}
    for name in sorted(needed - have):  # a restored Clip's bounds
        graph.initializer.append(float_inits[name])
        have.add(name)
    for node in graph.node:
        for k, name in enumerate(node.input):
            if not name.startswith(marker):
                continue
            orig = name[len(marker):]
            final = orig if orig not in produced else f"{orig}_float"
            if final not in have:
                t = type(float_inits[orig])()
                t.CopyFrom(float_inits[orig])
                t.name = final
                graph.initializer.append(t)
                have.add(final)
            node.input[k] = final
    live = produced | have | {i.name for i in graph.input}
    keep_vi = [v for v in graph.value_info if v.name in live]
    del graph.value_info[:]
    graph.value_info.extend(keep_vi)
    return qmodel, edited


def _float_graph_outputs(graph, node, producer: dict) -> None:
    """A float layer that writes a graph output writes it float: ORT had the layer write
    ``T_QuantizeLinear_Input`` and a Q/DQ pair write the output ``T`` (a YOLO-style packed Concat
    quantized as one tensor collapses its scores). The layer writes ``T`` again; layers that read
    the dequantized ``T`` keep reading it quantized, through the pair's renamed output."""
    outputs = {o.name for o in graph.output}
    readers: dict[str, list] = {}
    for n in graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    for j, out in enumerate(node.output):
        qs = [n for n in readers.get(out, []) if n.op_type == "QuantizeLinear"]
        if len(qs) != 1:
            continue
        dqs = readers.get(qs[0].output[0], [])
        if len(dqs) != 1 or dqs[0].op_type != "DequantizeLinear" or dqs[0].output[0] not in outputs:
            continue
        final, dq = dqs[0].output[0], dqs[0]
        quantized = f"{final}_DequantizeLinear_Output"
        for n in readers.get(final, []):  # in-graph readers keep the dequantized tensor
            n.input[:] = [quantized if i == final else i for i in n.input]
        for n in readers.get(out, []):  # readers of the pre-quantization name read the output itself
            n.input[:] = [final if i == out else i for i in n.input]
        node.output[j] = final
        dq.output[0] = quantized
        producer[final], producer[quantized] = node, dq


def _quantize(job: ConvertJob, prepped: Path, method: str, excluded: list[str], op_types: list[str],
              per_channel: bool, out: Path) -> None:
    """ONNX Runtime's QDQ quantizer over the pre-processed model, saved (as ORT saves it) to ``out``."""
    q = require("onnxruntime.quantization", "int8 ONNX conversion")
    from onnxruntime.quantization.qdq_quantizer import QDQQuantizer
    from onnxruntime.quantization.quant_utils import load_model_with_shape_infer

    spec = job.profile.quantization
    types = {"int8": q.QuantType.QInt8, "uint8": q.QuantType.QUInt8}
    ranges = _ranges(job, prepped, method)
    model = load_model_with_shape_infer(Path(prepped))
    quantizer = _memo_quantizer(QDQQuantizer, job.cache.setdefault("qdq_initializer_params", {}))(
        model, per_channel, bool(job.recipe.option("reduce_range", False)), types[spec.weight_dtype],
        types[spec.activation_dtype], ranges, [], excluded, op_types,
        {"ActivationSymmetric": spec.activation_symmetric, "WeightSymmetric": True})
    # ORT's quantizer logs through the root logger (a warning per rank-1 LayerNorm weight it cannot
    # quantize per channel: PP-OCRv4 rec printed dozens per candidate): into the log, not the terminal.
    with quiet(Path(job.scratch) / "ort_quantize.log"):
        quantizer.quantize_model()
    quantizer.model.save_model_to_file(str(out), False)


def _edit_whole(job: ConvertJob, prepped: Path, method: str, op_types: list[str], per_channel: bool):
    """The recipe's float layers and op types kept float in the fully quantized model of its
    calibration (quantized once per calibration and options, then edited: :func:`keep_float`),
    or None where the edit does not apply."""
    onnx = require("onnx", "int8 ONNX conversion")
    key = job.recipe.whole_key("onnx-qdq", job.profile)
    if not Path(job.cache.get(key, "")).is_file():
        full = Path(job.scratch) / "qdq_every_layer.onnx"
        _quantize(job, prepped, method, [], op_types, per_channel, full)
        job.cache[key] = str(full)
    if "qdq_float_model" not in job.cache:
        job.cache["qdq_float_model"] = onnx.load(str(prepped))
    model = onnx.load(job.cache[key])
    return keep_float(model, job.cache["qdq_float_model"], set(job.recipe.float_nodes), set(job.recipe.float_ops))


def convert(job: ConvertJob) -> FormatResult:
    """Quantize ``job.onnx()`` (the static float ONNX) to int8 QDQ ONNX in ``job.workdir/model.onnx``.

    ``job.recipe`` picks the calibration method (ranges computed once per method and reused by
    every candidate) and the nodes / op types kept in float (``nodes_to_exclude``).

    Raises:
        ConversionError: opset upgrade, pre-processing or quantization failed, or the result is
            not int8 / not static.
    """
    onnx = require("onnx", "int8 ONNX conversion")
    ort = require("onnxruntime", "int8 ONNX conversion")
    require("onnxruntime.quantization", "int8 ONNX conversion")
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    from .emitted import check_onnx
    from .tool_errors import tool_error
    from .sources import refuse_quantized

    refuse_quantized(job.source, "int8 QDQ ONNX")
    spec = job.profile.quantization
    recipe = job.recipe
    per_channel = spec.weights == "per-channel"
    method = recipe.method(job.profile)
    if method not in (*RANGE_METHODS, "entropy"):
        raise ConversionError(f"Calibration method '{method}' is not one ONNX Runtime offers ({', '.join(RANGE_METHODS)}, entropy).")
    prepped, opset_from, opset_to = _prepped(job)
    out = job.workdir / MODEL_FILE
    excluded = sorted(set(recipe.float_nodes))
    every = sorted(set(QLinearOpsRegistry) | set(QDQRegistry))
    job.log(f"quantize QDQ ({len(job.calib)} samples, {method}, per_channel={per_channel}, "
            f"activations {spec.activation_dtype}{' symmetric' if spec.activation_symmetric else ''}"
            + (f", {len(excluded)} node(s) float" if excluded else "") + ")")
    derived = None
    try:
        if excluded or recipe.float_ops:
            derived = _edit_whole(job, prepped, method, every, per_channel)
        if derived is not None:
            onnx.save(derived[0], str(out))
        else:
            _quantize(job, prepped, method, excluded, [t for t in every if t not in recipe.float_ops], per_channel, out)
            if not excluded and not recipe.float_ops:  # quantized whole: mixed candidates edit this one
                job.cache[job.recipe.whole_key("onnx-qdq", job.profile)] = str(out)
    except ConversionError:
        raise
    except Exception as exc:  # noqa: BLE001 - ORT quantization raises many types
        raise tool_error("ort-quantizer", exc, "ONNX Runtime quantization failed",
                         "Check that the model runs in ONNX Runtime at the given input shapes.") from None
    check_onnx(out, "onnx-qdq", "float layers edit" if derived is not None else "QDQ quantizer", prepped, job.cache)
    qmodel = onnx.load(str(out))
    evidence = int8_evidence(qmodel)
    if not evidence["QuantizeLinear"] or not evidence["int8_initializers"]:
        raise ConversionError(f"Quantization produced no int8 tensors ({evidence}).",
                              "The model may contain no quantizable ops (Conv, MatMul, Gemm...).")
    inputs, outputs = _tensor_specs(onnx.shape_inference.infer_shapes(qmodel))
    result = FormatResult(
        model_file=MODEL_FILE, inputs=inputs, outputs=outputs, precision="int8",
        tools={"onnx": onnx.__version__, "onnxruntime": ort.__version__, "tf2onnx": version_of("tf2onnx") or ""},
        route=f"{job.source.format} -> static ONNX -> opset {opset_from}->{opset_to} -> quant_pre_process -> "
              f"QDQ quantizer ({method})" + (f" -> {len(derived[1])} layer(s) float (Q/DQ at their inputs removed)"
                                             if derived is not None else ""),
        backend_options={"onnx_qdq": {"opset": opset_to, "opset_source": opset_from, "per_channel": per_channel,
                                      "activation_dtype": spec.activation_dtype,
                                      "activation_symmetric": spec.activation_symmetric,
                                      "calibration_method": method, "float_nodes": excluded,
                                      "int8_evidence": evidence}},
    )
    if derived is not None:  # how the recipe's float layers were kept float, and which the graph had
        result.backend_options["onnx_qdq"]["float_layers"] = {
            "how": "quantized whole, then each float layer reads its inputs before their QuantizeLinear and "
                   "its weights as the float model's",
            "layers": derived[1]}
    if not result.tools["tf2onnx"] or job.source.format == "onnx":
        result.tools.pop("tf2onnx")
    left = float_weighted_ops(qmodel)
    if left:
        result.warnings.append(f"Ops left in float (their weights are not quantized): {', '.join(left[:8])}"
                               + (f" (+{len(left) - 8} more)" if len(left) > 8 else ""))
        result.backend_options["onnx_qdq"]["float_ops"] = left
    _tensorrt(job, result)
    return result
