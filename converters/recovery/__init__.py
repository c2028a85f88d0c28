"""Accuracy recovery: a loop *around* the format converters, judged by the gate.

When a format's baseline candidate fails its gate (``--recover``, default ``mixed``):

1. **calibration**: the alternatives its toolchain offers (ONNX Runtime percentile;
   NNCF's transformer mode (SmoothQuant, where there is attention), quantile estimator and full
   bias correction; the TFLite route's percentile ranges; on every format the median over samples
   of each sample's min and max), in
   order, stopping at the first that passes. Calibration statistics are computed once per method.
2. **mixed precision** (``mixed`` only): the sensitivity report ranks the layers of the best
   candidate so far by the error each adds (:mod:`.sensitivity`); the top layers are tried
   float one at a time (their *gain* recorded), then a transformer's attention (softmax and
   activation x activation matmuls, :func:`attention_in`) float together, then the fewest layers
   of the head (:func:`head_layers`) and the fewest top layers together that pass (each a
   bisection, the largest count first).
   The target is respected: on the Edge TPU a float layer ends what the compiler maps, so only
   layers in the graph's tail are candidates and the mapped share is reported; on TensorRT a
   float layer is a precision constraint (recorded for the engine build). Last, the op types
   that gather the most noise (not on the Edge TPU).

It keeps the time budget (``--recover-budget`` seconds of wall time; by default twice the
baseline's own work, counted in CPU seconds of this process and its children, at least 20, so
that what else the machine is running moves the search far less than wall time would): a step
starts only when its estimated time fits in what is left. When nothing
passes, the best candidate's figures and the report are what the user gets, and the candidate
is kept for inspection. The chosen recipe, every step with its time, the
figures before and after, and size and local p50 before and after go into the manifest.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from edge_sdk.errors import ConversionBugError, ConversionError, InputValidationError

from ..base import Recipe, cpu_seconds, waiting_seconds
from ..targets import tflite_config
from .candidates import Candidate, copy_into, local_p50_ms, make_candidate, reported_float_layers
from .sensitivity import LayerError, layer_errors, tflite_layers_in_order

if TYPE_CHECKING:
    from ..build import BuildContext

RecoverMode = Literal["off", "calibration", "mixed", "explain"]
#: Budget when the user sets none: this many times the baseline candidate's own time...
BUDGET_FACTOR = 2.0
#: ...but never less than this (small models are fast; a few candidates still fit)...
MIN_BUDGET_S = 45.0
#: ...of which the calibration alternatives may use only up to this floor (or twice the baseline):
#: the rest is the mixed-precision search's. With the whole 45 s open to them, a percentile pass
#: (22 CPU s on BlazeFace full range) ran where it had been skipped, and the one layer kept float
#: that passes was never reached.
MIN_ALTERNATIVES_S = 20.0
#: Layers whose gain alone is measured (the report's "gain" column).
GAIN_TOP = 3
#: Cumulative float-layer counts tried, fewest first.
MIXED_STEPS = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48)
#: Edge TPU: float layers only in the last part of the graph (the CPU tail).
EDGETPU_MIN_SHARE = 0.5


@dataclass(frozen=True)
class RecoveryConfig:
    """What the user asked of recovery (the CLI's --recover, --recover-budget, --float-nodes, --calib-method)."""

    mode: RecoverMode = "mixed"
    budget_s: float | None = None
    float_patterns: tuple[str, ...] = ()
    calib_method: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("off", "calibration", "mixed", "explain"):
            raise InputValidationError(f"--recover must be off, calibration or mixed, got '{self.mode}'.")
        if self.budget_s is not None and not (self.budget_s >= 0):
            raise InputValidationError(f"--recover-budget must be a number of seconds >= 0, got {self.budget_s}.")
        if self.calib_method not in (None, "minmax", "percentile", "entropy"):
            raise InputValidationError(f"--calib-method must be minmax, percentile or entropy, got '{self.calib_method}'.")


#: Calibration alternatives per format, tried in order after the baseline, each with its cost
#: measured here relative to the baseline candidate (an alternative the budget cannot afford is skipped).
ALTERNATIVES: dict[str, list[tuple[Recipe, float]]] = {
    # entropy (ONNX Runtime's histogram calibrator) is minutes on real models: --calib-method entropy asks for it
    "onnx-qdq": [(Recipe(calibration="percentile", name="percentile"), 1.0),
                 (Recipe(calibration="median", name="median min/max"), 1.0)],
    # NNCF's quantile estimator is ~5x its min/max pass on PP-OCRv4 (35 s vs 7 s)
    "openvino-ir": [(Recipe(options=(("model_type", "transformer"),), name="transformer (SmoothQuant)"), 1.5),
                    (Recipe(calibration="median", name="median min/max"), 1.2),
                    (Recipe(calibration="percentile", name="percentile"), 5.0),
                    (Recipe(calibration="percentile", options=(("bias_correction", "full"),),
                            name="percentile+full-bias-correction"), 6.0)],
    "tflite-int8": [(Recipe(calibration="percentile", name="percentile"), 0.3),
                    (Recipe(calibration="median", name="median min/max"), 0.3)],
}
#: Op types never kept float wholesale (they are the int8 model's compute).
COMPUTE_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "Convolution", "GroupConvolution",
                         "ConvolutionBackpropData", "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED",
                         "TRANSPOSE_CONV", "BATCH_MATMUL"})
#: Formats whose mixed candidates edit the model quantized whole (``onnx_qdq.keep_float``) rather
#: than quantize again: a mixed candidate costs about its gate, float layers and op types alike.
EDITED_FORMATS = frozenset({"onnx-qdq"})
#: Formats whose float *layers* are an edit of the model quantized whole while float op types
#: quantize again: OpenVINO reverts layers as NNCF's accuracy control does
#: (``openvino_ir.keep_float``); an op type goes through NNCF's IgnoredScope, which also drops the
#: quantizers only the ignored ops' readers needed - cutting the FakeQuantize at a float op's
#: inputs instead failed the openWakeWord melspectrogram (Power float: range error 0.011 against
#: 0.001 with Power ignored by NNCF).
LAYER_EDITED_FORMATS = EDITED_FORMATS | {"openvino-ir"}
#: Ops that are never layers of their own (graph structure, constants, the quantizers themselves).
STRUCTURAL_OPS = frozenset({"Parameter", "Constant", "Result", "Convert", "FakeQuantize", "QuantizeLinear",
                            "DequantizeLinear", "ShapeOf"})
#: Op types that move or select values with their input's scale (ONNX, OpenVINO, TFLite names):
#: never an op-type candidate.
MOVEMENT_OPS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Slice", "Split", "Gather",
                          "Expand", "Tile", "Identity", "Pad", "DepthToSpace", "SpaceToDepth", "MaxPool",
                          "StridedSlice", "VariadicSplit", "ShuffleChannels", "Broadcast",
                          "RESHAPE", "TRANSPOSE", "SQUEEZE", "EXPAND_DIMS", "STRIDED_SLICE", "SLICE", "SPLIT",
                          "SPLIT_V", "GATHER", "PAD", "PADV2", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "TILE", "PACK",
                          "UNPACK", "MAX_POOL_2D"})
#: The last layers (in execution order) tried float together, fewest first.
TAIL_STEPS = (2, 4, 8)
#: TFLite activations that read one tensor: float when the op they read is (:func:`activations_float`).
UNARY_ACTIVATIONS = frozenset({"RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LEAKY_RELU", "HARD_SWISH",
                                 "LOGISTIC", "TANH", "ELU", "GELU"})
#: The first compute layers, with the ops before them, tried float together, fewest first.
STEM_STEPS = (1, 2)
#: Op types tried float together (after single layers): the types that gather the most noise.
TYPE_STEPS = (1, 2, 3)


def user_recipe(cfg: RecoveryConfig, names: list[tuple[str, str]]) -> Recipe:
    """The baseline recipe: the user's --calib-method and --float-nodes (patterns over names or op types).

    Args:
        names: (layer name, op type) of the format's graph.
    """
    nodes, ops = [], []
    for pat in cfg.float_patterns:
        matched = [n for n, _ in names if fnmatch.fnmatchcase(n, pat)]
        typed = sorted({op for _, op in names if fnmatch.fnmatchcase(op, pat)})
        nodes += matched
        ops += typed
    why = tuple((n, "--float-nodes") for n in dict.fromkeys(nodes))
    return Recipe(calibration=cfg.calib_method, float_nodes=tuple(dict.fromkeys(nodes)), float_ops=tuple(ops),
                  name="baseline" if not (nodes or ops or cfg.calib_method) else "user", why=why)


@dataclass
class Recovery:
    """What the loop did for one format (recorded in the manifest and the report)."""

    fmt: str
    chosen: Candidate
    baseline: Candidate
    steps: list[dict[str, Any]] = field(default_factory=list)
    ranking: list[LayerError] = field(default_factory=list)
    seconds: float = 0.0
    budget_s: float = 0.0
    budget_clock: str = "wall"
    stopped: str = ""
    advice: str = ""
    compute: dict[str, Any] | None = None

    def record(self, feed) -> dict[str, Any]:
        """The manifest's ``backend_options.recovery.<format>``."""
        from .. import accuracy as acc

        c, b = self.chosen, self.baseline
        rec = {"recipe": c.recipe.to_dict(c.facts["job"].profile), "passed": c.passed, "steps": self.steps,
               "seconds": round(self.seconds, 1), "budget_s": round(self.budget_s, 1),
               "budget_clock": self.budget_clock, "stopped": self.stopped, "advice": self.advice,
               "before": acc.report_figures(b.report), "after": acc.report_figures(c.report),
               "size_before": b.size(), "size_after": c.size()}
        if c is not b:
            rec["p50_ms_before"], rec["p50_ms_after"] = local_p50_ms(b, feed), local_p50_ms(c, feed)
        if self.ranking:
            rec["top_layers"] = [e.to_dict() for e in self.ranking[:10]]
        if self.compute:
            rec["compute_ops"] = self.compute
        return rec


def format_graph(fmt: str, job) -> Any:
    """The format's float graph in the names its recipes take: a :class:`~..graph.GraphView`
    (ONNX node names, TFLite output tensors) or the OpenVINO model (op friendly names); None for
    a format without one."""
    from ..graph import from_onnx_file, from_tflite

    if fmt == "onnx-qdq":
        from ..onnx_qdq import _prepped

        return from_onnx_file(_prepped(job)[0])
    if fmt == "tflite-int8":
        from ..tflite_int8 import float_form

        return from_tflite(float_form(job).model)
    if fmt == "openvino-ir":
        from ..openvino_ir import _read

        return _read(job)[0]
    return None


def _graph_names(graph: Any) -> list[tuple[str, str]]:
    """(layer name, op type) of a :func:`format_graph`, for --float-nodes patterns."""
    from ..graph import GraphView

    if graph is None:
        return []
    if isinstance(graph, GraphView):
        return [(n.name, n.native) for n in graph.nodes if n.outputs]
    return [(op.get_friendly_name(), op.get_type_name()) for op in graph.get_ordered_ops()]


def attention_in(graph: Any) -> list[str]:
    """A transformer's attention in a :func:`format_graph`, by name: softmax ops (a classifier's
    output softmax among them) and matmuls of two activations (Q x K^T, weights x V). Weight
    matmuls (a constant input; in OpenVINO through Convert/Reshape/Transpose of a Constant) are
    the int8 model's compute and stay int8.

    Int8 noise on probabilities and on activation x activation products is where post-training
    quantization of attention breaks. Measured on PP-OCRv4 rec's int8 TFLite route: 75
    top-ranked layers float still read 52% of lines; every SOFTMAX and BATCH_MATMUL float
    (``--float-nodes SOFTMAX,BATCH_MATMUL``, min/max ranges) read 85% (float: 90%).
    """
    from ..graph import GraphView

    if graph is None:
        return []
    if isinstance(graph, GraphView):
        return [n.name for n in graph.nodes if n.op == "Softmax" or (
            n.native in ("MatMul", "BATCH_MATMUL") and not any(i in graph.constants for i in n.inputs))]

    def const(port) -> bool:
        node = port.get_source_output().get_node()
        while node.get_type_name() in ("Convert", "Reshape", "Transpose") and node.inputs():
            node = node.input(0).get_source_output().get_node()
        return node.get_type_name() == "Constant"

    return [op.get_friendly_name() for op in graph.get_ordered_ops()
            if op.get_type_name() in ("Softmax", "SoftMax")
            or (op.get_type_name() == "MatMul" and not any(const(i) for i in op.inputs()))]


#: Ops a recurrent state passes through unchanged between the graph's state input or output and
#: the op that updates it (ONNX, OpenVINO and TFLite names).
STATE_PASSING_OPS = MOVEMENT_OPS | {"Concat", "CONCATENATION", "Cast", "Convert", "Identity", "PACK", "UNPACK"}


class _Walk:
    """What the state path asks of a :func:`format_graph`, a GraphView (ONNX, TFLite) and an
    OpenVINO model alike: the ops reading a graph input, the op writing a graph output, each op's
    readers and sources, its name and op types, and whether it is a layer at all."""

    def __init__(self, graph: Any):
        from ..graph import GraphView

        self.graph, self.view = graph, isinstance(graph, GraphView)
        if self.view:
            produced = {t for n in graph.nodes for t in n.outputs}
            self.inputs = {t for n in graph.nodes for t in n.inputs} - produced - graph.constants - {""}
        else:
            self.params = {}
            for p in graph.get_parameters():
                for n in [p.get_friendly_name(), *p.output(0).get_names()]:
                    self.params.setdefault(n, p)
            self.results = {n: o.get_node() for o in graph.outputs for n in o.get_names()}

    def ordered(self) -> list:
        return list(self.graph.nodes) if self.view else list(self.graph.get_ordered_ops())

    def inputs_read(self, node) -> list[set[str]]:
        """The names of each graph input ``node`` reads directly."""
        if self.view:
            return [{t} for t in node.inputs if t in self.inputs]
        return [{p.get_friendly_name(), *p.output(0).get_names()} for p in self.sources(node)
                if p.get_type_name() == "Parameter"]

    def input_readers(self, name: str) -> list | None:
        if self.view:
            return self.graph.consumers(name) if name in self.inputs else None
        return self.readers(self.params[name]) if name in self.params else None

    def output_writer(self, name: str):
        if self.view:
            return self.graph.producer(name)
        result = self.results.get(name)
        return self.sources(result)[0] if result is not None else None

    def readers(self, node) -> list:
        if self.view:
            return [r for t in node.outputs for r in self.graph.consumers(t)]
        return [t.get_node() for port in node.outputs() for t in port.get_target_inputs()]

    def sources(self, node) -> list:
        if self.view:
            return [self.graph.producer(t) for t in node.inputs
                    if t not in self.graph.constants and self.graph.producer(t) is not None]
        return [port.get_source_output().get_node() for port in node.inputs()]

    def name(self, node) -> str:
        return node.name if self.view else node.get_friendly_name()

    def native(self, node) -> str:
        return (node.native or node.op) if self.view else node.get_type_name()

    def types(self, node) -> set[str]:
        return {node.op, node.native} if self.view else {node.get_type_name()}

    def layer(self, node) -> bool:
        return self.view or node.get_type_name() not in ("Parameter", "Constant", "Result", "ShapeOf")


def state_path(graph: Any, streams: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """The layers a recurrent state is carried through, in a :func:`format_graph`: from each state
    input through the ops that only move it to the first op that computes with it (an LSTM, a
    cell's ``f * c``), and back from each state output through the ops that only gather it (a
    Concat of h and c) to the op that computed it. Kept float, the state is not rounded to int8 at
    every step (TFLite's int8 LSTM keeps its cell state in 16 bits for the same reason). A
    convolution or matmul reading the state (a GRU cell's ``h x U``) is not on the path: it
    quantizes its input as every layer does, and the carried value goes on float beside it.

    Returns:
        (layer names, the state tensors not found in this graph).
    """
    if graph is None:
        return [], [t for pair in streams for t in pair]
    g = _Walk(graph)
    found: list[str] = []
    missing: list[str] = []

    def walk(nodes: list, onward) -> None:
        while nodes:
            node = nodes.pop()
            if not g.layer(node) or g.name(node) in found or g.types(node) & COMPUTE_OPS:
                continue
            found.append(g.name(node))
            if g.types(node) & STATE_PASSING_OPS:
                nodes.extend(onward(node))

    for out, inp in streams:
        readers = g.input_readers(inp)
        if readers is None:
            missing.append(inp)
        else:
            walk(list(readers), g.readers)
        writer = g.output_writer(out)
        if writer is None:
            missing.append(out)
        else:
            walk([writer], g.sources)
    return found, missing


def stem_layers(graph: Any, skip_inputs: set[str] = frozenset(), most: int = max(STEM_STEPS)) -> list[LayerError]:
    """The first ``most`` compute layers (convolutions, matmuls) the model's data inputs reach, in a
    :func:`format_graph`, in execution order: each as a :class:`LayerError` whose float set holds
    it and every op from the previous one on that the inputs reach (``layers[:k]`` float: the stem
    of ``k`` compute layers). Inputs in ``skip_inputs`` (a stream's state) start no stem."""
    g = _Walk(graph)
    out: list[LayerError] = []
    pending: list[str] = []
    reached: set[str] = set()
    for i, node in enumerate(g.ordered()):
        if not (any(not names & skip_inputs for names in g.inputs_read(node))
                or any(g.name(src) in reached for src in g.sources(node))):
            continue
        reached.add(g.name(node))  # a Convert or ShapeOf passes the reach on without being a layer of its own
        if not g.layer(node) or g.types(node) & STRUCTURAL_OPS:
            continue
        pending.append(g.name(node))
        if g.types(node) & COMPUTE_OPS:
            out.append(LayerError(g.name(node), g.native(node), 0.0, 0.0, i, float_set=pending))
            pending = []
            if len(out) >= most:
                break
    return out


def head_layers(graph: Any) -> list[tuple[str, str, int, bool]]:
    """The layers nearest a model's outputs, in a :func:`format_graph`: ``(name, op type, position,
    compute)``. Compute ops (convolutions, matmuls) are ordered by how many compute ops lie between
    them and an output (0: the op feeds an output through reshapes, concats and activations
    alone), then last-executed first; a multi-scale detector's score and box convolutions of every
    scale come first, which "the last N ops executed" would split. For ONNX and TFLite the ops
    between those and the outputs come too (``compute`` False): kept float, the outputs are not
    quantized, as NNCF leaves them. A packed output quantized as one tensor spends its
    int8 steps on its widest part: BlazePose's concatenated score logits span -620..2, a step of
    2.4 logits at the 0.5 threshold.
    """
    from ..graph import GraphView

    compute: dict[str, tuple[int, str]] = {}
    chain: dict[str, str] = {}
    best: dict[str, int] = {}
    if isinstance(graph, GraphView):
        index = {n.name: i for i, n in enumerate(graph.nodes)}
        frontier = [(graph.producer(t), 0) for t in graph.outputs]

        def inputs(node):
            return [graph.producer(t) for t in node.inputs if t not in graph.constants]

        def describe(node):
            return node.name, node.native
    else:
        index = {op.get_friendly_name(): i for i, op in enumerate(graph.get_ordered_ops())}
        frontier = [(port.get_source_output().get_node(), 0) for r in graph.get_results() for port in r.inputs()]

        def inputs(node):
            return [port.get_source_output().get_node() for port in node.inputs()]

        def describe(node):
            return node.get_friendly_name(), node.get_type_name()
    while frontier:
        node, depth = frontier.pop()
        if node is None:
            continue
        name, kind = describe(node)
        if kind in ("Constant", "Parameter"):
            continue
        if kind in COMPUTE_OPS:
            if name not in compute or depth < compute[name][0]:
                compute[name] = (depth, kind)
            nxt = depth + 1
        else:
            if depth == 0 and isinstance(graph, GraphView):
                chain[name] = kind
            nxt = depth
        if best.get(name, 1 << 30) <= nxt:
            continue
        best[name] = nxt
        frontier.extend((src, nxt) for src in inputs(node))
    order = sorted(compute, key=lambda n: (compute[n][0], -index.get(n, 0)))
    return ([(n, chain[n], index.get(n, 0), False) for n in sorted(chain, key=lambda n: -index.get(n, 0))]
            + [(n, compute[n][1], index.get(n, 0), True) for n in order])


def activations_float(graph: Any, recipe: Recipe) -> Recipe:
    """``recipe`` with each activation that alone reads a float op's output float too (TFLite).

    An int8 TFLite graph fuses a ReLU into the convolution before it; with the convolution float
    and its ReLU int8, the quantizer rounds the convolution's output at its whole pre-activation
    range and again at the ReLU's: two roundings where a fused pair has one, and the first on a
    range twice as wide. MediaPipe's selfie segmenter, with every op float but its second ReLU:
    one QUANTIZE at scale 0.61 then the ReLU's at 0.27, and a close-up's mean person probability
    fell from 0.95 to 0.01; rounded once at the ReLU's scale (a Q/DQ pair at its output in the
    float ONNX form, run in ONNX Runtime: what a fused convolution + ReLU quantizes) it kept 0.92.
    Hard-swish, sigmoid and tanh have no fused form, but the same holds: float after a float op,
    the island ends after them, where the one rounding their reader needs happens anyway.

    Args:
        graph: The format's :class:`~..graph.GraphView` (TFLite: ops named by their output tensors).
        recipe: The candidate's recipe.
    """
    from ..graph import GraphView

    if not isinstance(graph, GraphView) or not recipe.float_nodes:
        return recipe
    nodes = {n.name: n for n in graph.nodes}
    floats = dict.fromkeys(recipe.float_nodes)
    why = dict(recipe.why)
    for name in list(floats):
        node = nodes.get(name)
        for t in node.outputs if node is not None else []:
            readers = graph.consumers(t)
            if len(readers) == 1 and readers[0].native in UNARY_ACTIVATIONS and readers[0].name not in floats:
                floats[readers[0].name] = None
                why.setdefault(readers[0].name, f"activation of the float {name}: int8 alone, it would round "
                                                f"{name}'s output twice")
    if len(floats) == len(recipe.float_nodes):
        return recipe
    return dataclasses.replace(recipe, float_nodes=tuple(floats), why=tuple(why.items()))


def _transformer(loop: "Loop") -> bool:
    """Whether the format's graph has attention matmuls (NNCF's transformer mode applies SmoothQuant
    to the matmuls that feed them; a convolutional network gains nothing and spends a candidate)."""
    try:
        graph = loop.graph()
        names = set(attention_in(graph))
        return any(op in ("MatMul", "BATCH_MATMUL") for n, op in _graph_names(graph) if n in names)
    except Exception:  # noqa: BLE001 - when the graph cannot be read, try the step as before
        return True


#: A chosen recipe that keeps more than this share of the compute ops float is said out loud.
FLOAT_COMPUTE_WARN = 0.25


def _compute_ops(graph: Any) -> list[tuple[str, str]]:
    """The format's compute layers (convolutions, matmuls): ``(name, op type)`` in graph order."""
    return [(n, op) for n, op in _graph_names(graph) if op in COMPUTE_OPS]


def float_compute(graph: Any, recipe: Recipe, reverted: set[str] | frozenset[str] = frozenset()) -> dict[str, Any] | None:
    """How much of the int8 model's compute (convolutions, matmuls) a recipe keeps float.

    Args:
        reverted: the layers the converter actually made float, where it says (an OpenVINO revert
            also makes float the ops that share a removed quantizer: the openWakeWord
            melspectrogram's mel matmul went float with its two STFT convolutions).

    Returns:
        ``{"total", "float", "int8_share"}`` over the format's compute ops, or None when the recipe
        keeps nothing float or the graph cannot be read.
    """
    if not recipe.float_nodes and not recipe.float_ops:
        return None
    compute = _compute_ops(graph)
    if not compute:
        return None
    floats = set(recipe.float_nodes) | set(reverted)
    kept = sum(1 for n, op in compute if n in floats or op in recipe.float_ops)
    return {"total": len(compute), "float": kept, "int8_share": round(1 - kept / len(compute), 3)}


def _say_float_compute(loop: "Loop", rec: "Recovery") -> None:
    try:
        reverted = reported_float_layers(rec.chosen.result.backend_options) or set()
        rec.compute = float_compute(loop.graph(), rec.chosen.recipe, reverted)
    except Exception:  # noqa: BLE001 - a figure for the record; never fails a conversion
        rec.compute = None
    c = rec.compute
    if c and c["float"] > FLOAT_COMPUTE_WARN * c["total"]:
        rec.chosen.result.warnings.append(
            f"the recipe keeps {c['float']} of {c['total']} compute ops (convolutions, matmuls) float: only "
            f"{c['int8_share']:.0%} of them run int8, so size and speed are closer to the float model's "
            "(see size and p50 before/after in backend_options.recovery)")


class Loop:
    """Makes candidates for one format under a budget, keeps the best, writes the log.

    The budget's clock: wall time when the user gave ``--recover-budget`` (what they asked for),
    else CPU time (the default budget is relative to the baseline's own work: counted in CPU
    seconds, a busy machine moves the baseline and the steps far less than in wall seconds: x1.3
    against x2.7 for one baseline beside two other conversions)."""

    def __init__(self, ctx: "BuildContext", fmt: str, cfg: RecoveryConfig):
        self.ctx, self.fmt, self.cfg = ctx, fmt, cfg
        self.cpu = cfg.budget_s is None
        self.clock = cpu_seconds if self.cpu else time.perf_counter
        self.key, self.unit = ("cpu_s", "CPU s") if self.cpu else ("seconds", "s")
        self.cache = {"shared": ctx.prep.shared, "dir": ctx.scratch / fmt}
        (ctx.scratch / fmt).mkdir(parents=True, exist_ok=True)
        self.count = 0
        self.steps: list[dict[str, Any]] = []
        self.deadline = float("inf")

    def job(self):
        """A job sharing this loop's cache, for reading the format's graph."""
        from ..base import ConvertJob

        cs = self.ctx.prep.calib
        work = self.ctx.scratch / self.fmt / "names"
        work.mkdir(parents=True, exist_ok=True)
        return ConvertJob(source=self.ctx.source, profile=self.ctx.profile, input_shapes=self.ctx.prep.shapes.shapes,
                          calib=cs.calib, holdout=cs.holdout, calibrated=cs.calibrated, preprocess=cs.preprocess,
                          workdir=work, scratch=work, log=lambda m: self.ctx.say(f"{self.fmt}: {m}"),
                          options=dict(self.ctx.options), onnx_provider=self.ctx.prep.onnx,
                          tflite_provider=self.ctx.prep.tflite, cache=self.cache)

    def make(self, recipe: Recipe) -> Candidate | None:
        if self.fmt == "tflite-int8" and recipe.float_nodes:
            try:
                recipe = activations_float(self.graph(), recipe)
            except Exception:  # noqa: BLE001 - the candidate is made as asked when the graph cannot be read
                pass
        if self.count and self._all_compute_float(recipe):  # not an int8 model: no candidate
            self.steps.append({"recipe": recipe.name, "seconds": 0.0, "cpu_s": 0.0, "passed": False,
                               "skipped": "keeps every convolution and matmul float: not an int8 model"})
            self.ctx.say(f"{self.fmt}: recovery step '{recipe.name}' skipped: it keeps every convolution and matmul float")
            return None
        folder = self.ctx.scratch / self.fmt / f"candidate-{self.count}"
        self.count += 1
        t0, c0, w0 = time.perf_counter(), cpu_seconds(), waiting_seconds()
        try:
            cand = make_candidate(self.ctx, self.fmt, recipe, folder, self.cache)
        except ConversionError as exc:
            if self.count == 1 or isinstance(exc, ConversionBugError):  # a graph we emitted is invalid: say so
                raise
            self.steps.append({"recipe": recipe.name, "seconds": round(time.perf_counter() - t0, 2),
                               "cpu_s": round(cpu_seconds() - c0, 2), "passed": False, "error": exc.message})
            self.ctx.say(f"{self.fmt}: recovery step '{recipe.name}' could not convert: {exc.message}")
            return None
        self.steps.append({**cand.step(), "cpu_s": round(cpu_seconds() - c0, 2),
                           "wait_s": round(waiting_seconds() - w0, 2)})
        if self.count > 1:
            self.ctx.say(f"{self.fmt}: recovery '{recipe.name}' ({cand.seconds:.1f} s): "
                         + ("passed" if cand.passed else f"score {cand.score:+.3f}") + f"; {cand.step()['figures']}")
        return cand

    def _all_compute_float(self, recipe: Recipe) -> bool:
        """Whether ``recipe`` keeps every compute op of the format's graph float (Silero VAD's
        jetson-orin search, before this check, published such a "mixed(16)": 0 of 6 convolutions int8)."""
        try:
            c = float_compute(self.graph(), recipe)
        except Exception:  # noqa: BLE001 - when the graph cannot be read, the candidate is made as before
            return False
        return bool(c) and c["float"] >= c["total"]

    def time_left(self) -> float:
        """What is left of the budget, in the budget's clock."""
        return self.deadline - self.clock()

    def cost(self, step: dict[str, Any]) -> float:
        """What a step took, in the budget's clock."""
        return step.get(self.key, step["seconds"])

    def estimate(self, requantize: bool = False) -> float:
        """What the next candidate will take: the longest recovery candidate of the current stage
        (they reuse the calibration statistics the baseline computed; after the sensitivity ranking,
        the longest mixed candidate: an ONNX one edits the quantized model instead of quantizing
        again, 9-12 CPU s on PP-OCRv4 rec jetson-orin against 13-17 for a calibration candidate,
        nearly all of it the gate), else the longest so far, else the baseline's.

        Args:
            requantize: the next candidate keeps op types float, which quantizes again in a
                format that edits only layers (OpenVINO): it takes what its quantizing candidates took.
        """
        made = [s for s in self.steps[1:] if "skipped" not in s and "ranking" not in s and "error" not in s]
        if requantize and self.fmt in LAYER_EDITED_FORMATS - EDITED_FORMATS:
            return max(self.cost(s) for s in [self.steps[0], *made] if not s.get("edited"))
        ranked = next((i for i, s in enumerate(self.steps) if "ranking" in s), None)
        stage = [s for s in self.steps[ranked + 1:] if "skipped" not in s] if ranked is not None else []
        if stage:
            return max(self.cost(s) for s in stage)
        if ranked is not None and self.fmt in LAYER_EDITED_FORMATS:
            # No mixed candidate yet, and this format's are an edit of a calibration candidate's
            # model plus their gate: estimated as the longest gate so far, with half again for the
            # edit and the manifest.
            gates = [s[f"gate_{self.key}"] for s in [self.steps[0], *made] if f"gate_{self.key}" in s]
            if gates:
                return 1.5 * max(gates)
        costs = [self.cost(s) for s in made]
        return max(costs) if costs else self.cost(self.steps[0])

    def fits(self, candidates: int = 1, requantize: bool = False) -> bool:
        """Whether the next ``candidates`` steps, at their estimate, end before the deadline: the
        budget is kept, not overrun by the step that starts just before it ends."""
        return self.time_left() >= candidates * self.estimate(requantize)

    def graph(self) -> Any:
        """:func:`format_graph` of this format, read once per loop."""
        if "graph_error" in self.cache:  # remembered: reading it again would repeat the failing conversion
            raise self.cache["graph_error"]
        if "graph" not in self.cache:
            try:
                self.cache["graph"] = format_graph(self.fmt, self.job())
            except Exception as exc:  # noqa: BLE001 - re-raised, and again on every later call
                self.cache["graph_error"] = exc
                raise
        return self.cache["graph"]


#: Why a streamed model's state path is float (the manifest's ``recipe.why``).
STATE_REASON = ("state: carried from step to step, an int8 state is rounded again at every step and its error "
                "grows with the stream (Silero VAD, jetson-orin: with the state int8, candidates agreed with float on 47-93% of a 1200-step stream's decisions)")


def _state_float(ctx: "BuildContext", loop: "Loop", recipe: Recipe) -> Recipe:
    """``recipe`` with the streams' state path float (:func:`state_path`), said in the log; as it
    was on the Edge TPU (a float layer there leaves the TPU: only the CPU tail may be float, and
    the long stream judges the int8 state) or where the path is not found."""
    fmt = loop.fmt
    if fmt == "tflite-int8" and tflite_config(ctx.profile).float_only_in_cpu_tail:
        ctx.say(f"{fmt}: the state path stays int8 (on this target a float layer leaves the accelerator)")
        return recipe
    try:
        streams = ctx.prep.calib.streams
        graph = loop.graph()
        if fmt == "tflite-int8":  # onnx2tf renames outputs (stateN -> Identity_1): matched as the artifact's are
            from ..tflite_int8 import float_form, source_names

            form = float_form(loop.job())
            renamed = source_names(form, [o.name for o in ctx.source.outputs], graph.outputs)
            streams = [(renamed.get(o, o), form.tensor_names.get(inp, inp)) for o, inp in streams]
        names, missing = state_path(graph, streams)
    except Exception as exc:  # noqa: BLE001 - the state path is a default, never a conversion failure
        ctx.say(f"{fmt}: the state path was not located ({exc}); it is quantized like the rest")
        return recipe
    if missing:
        ctx.say(f"{fmt}: state tensor(s) {', '.join(missing)} not found in this format's graph; "
                "what reads or writes them is quantized like the rest")
    names = [n for n in names if n not in recipe.float_nodes]
    if not names:
        return recipe
    ctx.say(f"{fmt}: the state path stays float ({len(names)} layer(s): {', '.join(names[:4])}"
            + (f" +{len(names) - 4} more" if len(names) > 4 else "") + ")")
    why = dict(recipe.why)
    why.update({n: STATE_REASON for n in names})
    return Recipe(calibration=recipe.calibration, float_nodes=tuple(dict.fromkeys([*recipe.float_nodes, *names])),
                  float_ops=recipe.float_ops, options=recipe.options, name=recipe.name, why=tuple(why.items()))


def convert_format(ctx: "BuildContext", fmt: str, cfg: RecoveryConfig) -> Recovery:
    """The baseline candidate and, if it fails its gate, the recovery loop. Returns what to publish.

    Raises:
        ConversionError: the baseline itself cannot be converted.
    """
    t0 = time.perf_counter()
    loop = Loop(ctx, fmt, cfg)
    recipe = Recipe(calibration=cfg.calib_method, name="baseline")
    if cfg.float_patterns:  # --float-nodes: patterns over this format's own layer names and op types
        recipe = user_recipe(cfg, _graph_names(loop.graph()))
        if not recipe.float_nodes and not recipe.float_ops:
            ctx.say(f"{fmt}: --float-nodes {', '.join(cfg.float_patterns)} matched no layer or op type of this format")
    if ctx.prep.calib.streams:
        recipe = _state_float(ctx, loop, recipe)
    base = loop.make(recipe)
    assert base is not None  # the first candidate raises instead
    rec = Recovery(fmt, base, base)
    base_cost = loop.cost(loop.steps[0])
    reused = loop.cache.get("reused")
    if reused:  # work another profile did for this baseline (its statistics): the budget counts it
        loop.steps[0]["reused"] = {"what": reused["what"], "seconds": round(reused["seconds"], 2),
                                   "cpu_s": round(reused["cpu_s"], 2)}
        base_cost += reused[loop.key]
    budget = cfg.budget_s if cfg.budget_s is not None else max(min_budget(loop), BUDGET_FACTOR * base_cost)
    loop.deadline = loop.clock() + budget
    rec.budget_s, rec.budget_clock = budget, "cpu" if loop.cpu else "wall"
    if cfg.mode == "explain":  # rank the layers and measure the top ones' gain; publish nothing different
        _explain(ctx, loop, base, rec)
        rec.steps, rec.seconds = loop.steps, time.perf_counter() - t0
        return rec
    if base.passed or cfg.mode == "off" or not ctx.prep.calib.calibrated:
        rec.steps, rec.seconds = loop.steps, time.perf_counter() - t0
        _say_float_compute(loop, rec)
        if not base.passed and cfg.mode == "off" and ctx.prep.calib.calibrated:
            rec.advice = ("recovery was off (--recover off); by default it tries the calibration alternatives and "
                          "keeps the most sensitive layers float")
        return rec
    ctx.say(f"{fmt}: gate failed; recovering ({cfg.mode}, budget {budget:.0f} {loop.unit})")
    best = base
    calibrations = [base]
    # In mixed mode the calibration alternatives stop where the old 20 s floor ended (or twice the
    # baseline): the rest of the budget stays with the mixed-precision search.
    alternatives_share = budget if cfg.budget_s is not None or cfg.mode != "mixed" else \
        max(min_budget(loop, MIN_ALTERNATIVES_S), BUDGET_FACTOR * base_cost)
    reserved = budget - min(alternatives_share, budget)
    for alt, cost in ALTERNATIVES.get(fmt, []):
        if alt.calibration == base.recipe.method(ctx.profile) and not alt.options:
            continue
        if alt.option("model_type") == "transformer" and not _transformer(loop):
            loop.steps.append({"recipe": alt.name, "seconds": 0.0, "cpu_s": 0.0, "passed": False,
                               "skipped": "no activation x activation matmul: SmoothQuant has nothing to smooth"})
            continue
        if loop.time_left() - reserved < cost * base_cost:
            loop.steps.append({"recipe": alt.name, "seconds": 0.0, "cpu_s": 0.0, "passed": False,
                               "skipped": f"estimated {cost * base_cost:.0f} {loop.unit} > "
                                          f"{max(loop.time_left() - reserved, 0):.0f} {loop.unit} left"
                                          + (" for calibration alternatives" if reserved else "")})
            continue
        cand = loop.make(Recipe(calibration=alt.calibration, options=alt.options, float_nodes=base.recipe.float_nodes,
                                float_ops=base.recipe.float_ops, name=alt.name, why=base.recipe.why))
        if cand is not None:
            calibrations.append(cand)
        if cand is not None and cand.rank > best.rank:
            best = cand
        if cand is not None and cand.passed:
            break
    if not best.passed and cfg.mode == "mixed" and not rec.stopped:
        best = _mixed(ctx, loop, best, rec, calibrations)
    rec.chosen = best
    rec.steps, rec.seconds = loop.steps, time.perf_counter() - t0
    _say_float_compute(loop, rec)
    if not best.passed:
        rec.advice = advice(ctx, loop, rec)
        ctx.say(f"{fmt}: {rec.advice}")
    ctx.say(f"{fmt}: recovery {'found a passing candidate' if best.passed else 'found nothing that passes'} "
            f"({best.recipe.name}) in {rec.seconds:.0f} s")
    return rec


def min_budget(loop: Loop, floor: float = MIN_BUDGET_S) -> float:
    """The budget's floor in the loop's clock: ``floor`` seconds of wall time, in CPU seconds at the
    baseline's own parallelism (on a 16-core workstation a small model's baseline runs on many
    threads: 20 CPU seconds there would be a second or two), never below ``floor``.

    The parallelism is CPU time over the wall time the baseline was not kept waiting for a CPU
    (``wait_s``, the main thread's run-queue time): on a machine busy with other work the plain
    ratio fell (BlazeFace back's OpenVINO baseline: 1.05 beside the unit tests on 2 cores; below 1
    beside two more conversions, where the floor was 45), the floor with it, and what recovery found
    depended on the load. What the load still moves is the CPU time a step costs (two busy
    hyperthreads of a core run slower); a budget counted in candidates would not."""
    if not loop.cpu:
        return floor
    base = loop.steps[0]
    # never more than 4x the plain ratio, whatever the kernel's figure says
    busy = max(base["seconds"] - base.get("wait_s", 0.0), 0.25 * base["seconds"], 1e-6)
    return floor * max(1.0, base.get("cpu_s", 0.0) / busy)


def advice(ctx: "BuildContext", loop: Loop, rec: Recovery) -> str:
    """What the user can do next when recovery found nothing that passes, said from what the
    search did: ran out of budget, was told to stop at calibration, was held to the Edge TPU's
    CPU tail, or kept many layers float and still failed (the loss is spread through the network:
    per-tensor post-training int8 cannot hold it; PicoDet-LCNet's layout detector is one)."""
    cfg = loop.cfg
    made = [s for s in loop.steps[1:] if "skipped" not in s and "ranking" not in s and "error" not in s]
    most = max((len(s.get("float_nodes") or []) for s in made), default=0)
    if rec.stopped.startswith("time budget"):
        return (f"recovery stopped at its budget ({rec.budget_s:.0f} {loop.unit}) after {len(made)} candidate(s), "
                f"the largest keeping {most} layer(s) float; --recover-budget SECONDS lets it search further")
    if cfg.mode == "calibration":
        return "only calibration alternatives were tried (--recover calibration); --recover mixed also keeps the most sensitive layers float"
    if rec.stopped:
        return f"recovery could not search layer by layer ({rec.stopped}); --float-nodes PATTERN keeps layers float by name or op type"
    if loop.fmt == "tflite-int8" and tflite_config(ctx.profile).float_only_in_cpu_tail:
        return (f"on the Edge TPU only the graph's tail may stay float (a float layer ends what the TPU runs); with up to "
                f"{most} tail layer(s) float it still fails: the loss is earlier in the graph, which this target must run int8")
    if not most:  # the ranking found no layer whose own int8 noise explains the loss
        return ("no calibration alternative passes and no layer's own int8 noise explains the loss (nothing to keep "
                "float); quantization-aware training, or running this model in float on this device, is the way")
    try:
        total = len(_compute_ops(loop.graph()))
    except Exception:  # noqa: BLE001 - a figure for the advice only
        total = 0
    of = f" (the model has {total} convolutions/matmuls)" if total else ""
    if any("not an int8 model" in s.get("skipped", "") for s in loop.steps):
        of += ", and larger sets would have kept every convolution and matmul float"
    return (f"no calibration alternative and no set of up to {most} layer(s) kept float{of} passes: the int8 loss is "
            "spread through the network rather than in a few layers, which post-training int8 (one scale per "
            "activation tensor) cannot hold; quantization-aware training, or running this model in float on this "
            "device, is the way (--float-nodes PATTERN keeps more layers float, at their cost)")


def _explain(ctx: "BuildContext", loop: Loop, base: Candidate, rec: Recovery) -> None:
    try:
        rec.ranking = [e for e in layer_errors(base, ctx.prep.calib.holdout) if e.added > 0]
    except ConversionError as exc:
        rec.stopped = f"no sensitivity ranking: {exc.message}"
        return
    for layer in rec.ranking[:GAIN_TOP]:
        if not loop.fits():
            rec.stopped = "time budget"
            break
        cand = loop.make(Recipe(calibration=base.recipe.calibration, float_nodes=tuple(layer.float_set or [layer.name]),
                                name=f"alone float: {layer.name}"))
        if cand is not None:
            layer.gain = cand.score - base.score


def _fewest(loop: Loop, counts: list[int], make) -> tuple[Candidate | None, list[Candidate], bool]:
    """The smallest count in ``counts`` whose candidate passes, by bisection (as Polygraphy bisects),
    the largest count first: when even that fails the search ends after one candidate.

    Returns:
        (the passing candidate with the fewest float layers found, or None; the failing
        candidates; whether the search finished: False when the budget cut it short).
    """
    passing: Candidate | None = None
    failed: list[Candidate] = []
    lo, hi = -1, len(counts)  # counts[lo] fails (or none), counts[hi] passes (or none)
    probe = len(counts) - 1
    while lo < probe < hi and loop.fits():
        cand = make(counts[probe])
        if cand is None and passing is None:  # could not convert (every layer float...): one count down
            probe -= 1
            continue
        if cand is not None and cand.passed:
            passing, hi = cand, probe
        else:
            lo = probe
            if cand is not None:
                failed.append(cand)
            if passing is None:  # the most layers float fail: fewer will not pass either
                break
        probe = (lo + hi) // 2
    return passing, failed, not (lo < probe < hi)


def _tensorrt(ctx: "BuildContext", fmt: str) -> bool:
    from ..targets import qdq_config

    return fmt == "onnx-qdq" and qdq_config(ctx.profile).tensorrt_engine


def _compute_only(ctx: "BuildContext", loop: Loop, best: Candidate) -> Candidate | None:
    """int8 at the convolutions and matmuls only, every other op type float, on top of ``best``:
    TensorRT's own placement (NVIDIA places Q/DQ at the inputs of the compute layers; the
    elementwise ops, norms and activations between them run at the precision of the layers they
    fuse with), where ONNX Runtime's QDQ quantizer also quantizes every Add, Mul and activation.
    PP-OCRv4 rec on jetson-orin: token error 0.061 with everything int8 (percentile ranges),
    0.027 with the compute alone; no subset of single layers or of one to three op types passed.
    An edit of the calibration candidate, so only where candidates are edits (ONNX QDQ)."""
    if loop.fmt not in EDITED_FORMATS or not loop.fits():
        return None
    try:
        types = sorted({op for _, op in _graph_names(loop.graph())} - COMPUTE_OPS - STRUCTURAL_OPS - set(best.recipe.float_ops))
    except Exception:  # noqa: BLE001 - a search step, never a conversion failure
        return None
    if not types:
        return None
    reason = ("TensorRT's placement: int8 at the inputs of convolutions and matmuls, this op at the precision of "
              "the layers it fuses with" if _tensorrt(ctx, loop.fmt) else
              "int8 kept at the convolutions and matmuls (the compute), the ops between them float")
    return _with_float_types(loop, best, types, "int8 at compute ops only", {t: reason for t in types})


def _with_float_types(loop: Loop, best: Candidate, types, name: str, why: dict[str, str]) -> Candidate | None:
    """A candidate on top of ``best`` (its calibration, options and float layers) with ``types``
    float as well, each with its reason."""
    return loop.make(Recipe(calibration=best.recipe.calibration, options=best.recipe.options,
                            float_nodes=best.recipe.float_nodes,
                            float_ops=tuple(dict.fromkeys([*best.recipe.float_ops, *types])),
                            name=name, why=tuple({**dict(best.recipe.why), **why}.items())))


def _cpu_tails(loop: Loop, ranking: list[LayerError]) -> tuple[list[LayerError], list, list[int], str, str]:
    """The Edge TPU's mixed search: CPU tails cut at the ranked layers, as ``(layers, extra, counts,
    label, reason)`` for :func:`_fewest` (``layers`` last-executed first, so ``layers[:k]`` is the
    tail of ``k`` layers; ``counts`` the tail sizes that start at a ranked layer)."""
    try:
        nodes = [(n.outputs[0], n.native) for n in tflite_layers_in_order(loop.graph())]
    except Exception:  # noqa: BLE001 - a search step, never a conversion failure
        return [], [], [], "", ""
    layers = [LayerError(name, op, 0.0, 0.0, i) for i, (name, op) in reversed(list(enumerate(nodes)))]
    counts = sorted({len(nodes) - e.index for e in ranking[:MIXED_STEPS[-1]] if 0 <= e.index < len(nodes)})
    return layers, [], counts, "CPU tail({})", "CPU tail: from a sensitive layer on, run float by the CPU"


def _mixed(ctx: "BuildContext", loop: Loop, best: Candidate, rec: Recovery,
           calibrations: list[Candidate] | None = None) -> Candidate:
    """The mixed-precision search on top of ``best``; ``calibrations``: the baseline and the
    calibration alternatives tried (the head is tried on each when it fails on ``best``'s)."""
    fmt = loop.fmt
    placement: Candidate | None = None
    if _tensorrt(ctx, fmt):  # the target's own placement first: no ranking needed, one candidate
        cand = placement = _compute_only(ctx, loop, best)
        if cand is not None and cand.passed:
            return cand
        if cand is not None and cand.rank > best.rank:
            best = cand
    if not loop.fits():  # the ranking runs both models with every tensor exposed: about a candidate's time
        rec.stopped = "time budget"
        return best
    t0, c0 = time.perf_counter(), cpu_seconds()
    try:
        ranking = layer_errors(best, ctx.prep.calib.holdout)
    except ConversionError as exc:
        ctx.say(f"{fmt}: no sensitivity ranking ({exc.message})")
        rec.stopped = "no sensitivity ranking"
        return best
    finally:
        loop.steps.append({"recipe": "sensitivity ranking", "seconds": round(time.perf_counter() - t0, 2),
                           "cpu_s": round(cpu_seconds() - c0, 2), "passed": False, "ranking": True})
    cpu_tail_only = fmt == "tflite-int8" and tflite_config(ctx.profile).float_only_in_cpu_tail
    if cpu_tail_only and ranking:  # only the CPU tail
        last = max(e.index for e in ranking)
        ranking = [e for e in ranking if e.index >= EDGETPU_MIN_SHARE * last]
    ranking = [e for e in ranking if e.name not in best.recipe.float_nodes and e.added > 0]
    rec.ranking = ranking
    if not ranking:
        return best
    top = ", ".join(f"{e.name} ({e.op}, +{e.added:.3f})" for e in ranking[:3])
    ctx.say(f"{fmt}: most sensitive layers: {top}")

    def with_float(layers: list[LayerError], label: str, reason: str | None = None,
                   base: Candidate | None = None) -> Candidate | None:
        base = base or best
        why = dict(base.recipe.why)
        names: list[str] = []
        for e in layers:
            for n in e.float_set or [e.name]:
                names.append(n)
                why.setdefault(n, reason or f"sensitivity: {e.name} adds error {e.added:.3f}"
                               + ("" if n == e.name else f" to the tensor {n} reads"))
        return loop.make(Recipe(calibration=base.recipe.calibration, options=base.recipe.options,
                                float_nodes=tuple(dict.fromkeys([*base.recipe.float_nodes, *names])),
                                float_ops=base.recipe.float_ops, name=label, why=tuple(why.items())))

    winner: Candidate | None = None
    for i, layer in enumerate(ranking[:GAIN_TOP]):
        # A single layer leaves room for one head candidate: on a small model's 20 s budget the
        # singles alone would spend it, and a detector's errors sit in its head (BlazeFace full
        # range: no single layer passed, the last 8 together did).
        if not loop.fits(2):
            break
        # The most sensitive layer float and no better: the loss is not in single layers (PP-OCRv4
        # rec: its top three singles each did worse than none, inside the gate's sampling noise);
        # the next singles would spend the budget the grouped steps below need.
        if i and (ranking[0].gain is None or ranking[0].gain <= 0):
            break
        cand = with_float([layer], f"mixed(1: {layer.name})")
        if cand is None:
            continue
        layer.gain = cand.score - best.score
        if cand.passed and winner is None:
            winner = cand
    if winner is not None:
        return winner
    # A transformer's attention (softmax, activation x activation matmuls) float together: one
    # candidate, where the ranking spreads the noise over many norms and residuals (not on the
    # Edge TPU, where only the graph's tail may be float).
    if not cpu_tail_only and loop.fits():
        try:
            attention = [n for n in attention_in(loop.graph()) if n not in best.recipe.float_nodes]
        except Exception as exc:  # noqa: BLE001 - a search step, never a conversion failure
            ctx.say(f"{fmt}: attention not located ({exc})")
            attention = []
        if attention:
            why = dict(best.recipe.why)
            why.update({n: "attention: softmax / activation x activation matmul" for n in attention})
            cand = loop.make(Recipe(calibration=best.recipe.calibration, options=best.recipe.options,
                                    float_nodes=tuple(dict.fromkeys([*best.recipe.float_nodes, *attention])),
                                    float_ops=best.recipe.float_ops, name=f"float attention({len(attention)})",
                                    why=tuple(why.items())))
            if cand is not None and cand.passed:
                return cand
            if cand is not None and cand.rank > best.rank:
                best = cand
    # The head: the last layers before the outputs decide argmaxes and thresholds (a classifier's
    # logits over thousands of classes, a detector's score concat) even where their noise is small.
    # The head comes from the graph: NNCF's IR ranks only the ops it quantizes at their outputs (a
    # detector's last convs feed a float Concat and are not among them), and on every format the
    # ranking's last entries by position can all sit on one output's path.
    tail, chain, head_reason = sorted(ranking, key=lambda e: -e.index), [], None
    try:
        from ..graph import GraphView

        graph = loop.graph()
        head = head_layers(graph)
        if cpu_tail_only:
            # A skip connection puts an early layer among those nearest the outputs (selfie
            # segmentation's first convolution): float on the Edge TPU, it takes the whole graph
            # off the TPU. Only layers in the graph's later part, as for the ranking.
            start = EDGETPU_MIN_SHARE * len(graph.nodes)
            head = [h for h in head if h[2] >= start]
        if any(c for *_, c in head):
            # Each with the layers reading its output (the ranking's float sets), as everywhere:
            # BlazeFace's back-camera model has a separate RELU after its last float convolution,
            # and left int8 it re-quantized what the classifier convolutions read (TFLite: positives
            # F1 0.26 with the head float, 0.21 with 76 layers).
            # (Not on the Edge TPU: there every float op joins the CPU tail, and the CPU-tail search
            # that follows takes whole tails; BlazeFace full range's head with its readers passed at
            # 80% of the ops mapped, where the tail search had found 89%.)
            sets = {} if cpu_tail_only else {e.name: e.float_set for e in ranking}
            if isinstance(graph, GraphView) and not cpu_tail_only:  # from the graph: the ranking leaves out layers that add no noise
                nodes = {node.name: node for node in graph.nodes}
                sets = {n: [n, *dict.fromkeys(r.name for t in nodes[n].outputs for r in graph.consumers(t))]
                        for n, _, _, c in head if c and n in nodes}
            tail = [LayerError(n, op, 0.0, 0.0, i, float_set=sets.get(n) or [n]) for n, op, i, c in head if c]
            chain = [LayerError(n, op, 0.0, 0.0, i) for n, op, i, c in head if not c]
            head_reason = "head: among the layers nearest the outputs"
    except Exception as exc:  # noqa: BLE001 - a search step, never a conversion failure
        ctx.say(f"{fmt}: head not located ({exc})")
    order = sorted(ranking[:GAIN_TOP], key=lambda e: -(e.gain or 0)) + ranking[GAIN_TOP:]
    searches = [(tail, chain, TAIL_STEPS, "float head({})", head_reason), (order, [], MIXED_STEPS, "mixed({})", None)]
    stem: list[LayerError] = []
    if not cpu_tail_only:
        # The stem: the ops between the input and its first convolutions, float with them (an
        # in-graph audio front end's power spectrum spans orders of magnitude that one int8 scale
        # cannot hold: Silero VAD passed with its STFT magnitude and first convolution float, and
        # no ranked set up to every convolution float did). On the calibration the layer search
        # started from, not on the failed head (keeping both left 1 of 6 convolutions int8).
        try:
            stem = stem_layers(loop.graph(), {i for _, i in ctx.prep.calib.streams})
        except Exception as exc:  # noqa: BLE001 - a search step, never a conversion failure
            ctx.say(f"{fmt}: stem not located ({exc})")
            stem = []
        # Only where the ranking puts a stem layer among its most sensitive: elsewhere its candidates
        # would spend the budget the top layers need (NudeNet's YOLOv8 on jetson-orin passes at
        # mixed(16), 32 s into its search).
        in_stem = {n for e in stem for n in e.float_set or [e.name]}
        if stem and any(e.name in in_stem for e in ranking[:GAIN_TOP]):
            searches.insert(1, (stem, [], STEM_STEPS, "float stem({})", "stem: between the input and its first convolutions"))
    start = best
    pre_stem: Candidate | None = None  # the best before a failed stem outranked it
    if cpu_tail_only:
        # On the Edge TPU a set of sensitive layers is a candidate only as the CPU tail that starts
        # at the earliest of them: every layer after a float one leaves the TPU anyway. So the cuts
        # are the ranked layers' positions, each taking every later layer float (BlazeFace full
        # range: its top-ranked sets, not closed downstream, were each refused by the pre-check).
        searches[1] = _cpu_tails(loop, ranking)
    # Then the fewest top layers that pass. A model whose noise no number of single layers removes
    # (spread over a transformer's norms and residuals) spends one candidate per search, not ten,
    # and reaches the op types below within its budget.
    for layers, extra, counts, label, reason in searches:
        counts = [k for k in counts if k <= len(layers)]
        base = start if layers is stem else None  # the stem goes from the calibration the search started on
        passing, tried, finished = _fewest(
            loop, counts, lambda k, layers=layers, extra=extra, label=label, reason=reason, base=base:
                with_float(layers[:k] + extra, label.format(k), reason, base=base))
        # A search that fails on the best candidate so far is tried again on other bases, each
        # labelled with its recipe (what it adds to that base's):
        # - the head on each other calibration tried: which of several candidates that all failed
        #   by far ranked first is noise (BlazeFace back camera, TFLite: percentile -1.02, median
        #   -1.04); what matters is the ranges the float head reads;
        # - the top layers on TensorRT's placement, which costs nothing there (those ops run at the
        #   precision of the layers they fuse with): selfie segmentation's head on percentile ranges
        #   ranked above it, and mixed(48) on that head failed where mixed(32) on the placement passes.
        others: list[Candidate] = []
        if layers is tail and head_reason and not cpu_tail_only:
            others = [c for c in calibrations or [] if c.recipe.method(ctx.profile) != best.recipe.method(ctx.profile)
                      or c.recipe.options != best.recipe.options]
        elif base is not None:  # the stem, on each other calibration too: its ranges are what the stem's float ops read
            others = [c for c in calibrations or [] if c.recipe.method(ctx.profile) != base.recipe.method(ctx.profile)
                      or c.recipe.options != base.recipe.options]
        elif layers is order and placement is not None and placement is not best \
                and placement.recipe.float_ops != best.recipe.float_ops:
            others = [placement]
        if layers is order and pre_stem is not None and not tried:
            # Every count on the stem kept every convolution float (a code-built detector: mixed(2)
            # on its stem(2) was all four): the top layers on the best before the stem instead.
            others = [pre_stem, *others]
        for other in others if counts else []:
            if passing is not None or not loop.fits():
                break
            passing, more, finished = _fewest(
                loop, counts, lambda k, other=other, layers=layers, extra=extra, label=label, reason=reason:
                    with_float(layers[:k] + extra, f"{other.recipe.name}, {label.format(k)}", reason, base=other))
            tried += more
        outranked = max([best, *tried], key=lambda c: c.rank)
        if base is not None and outranked is not best:  # a failed stem the top layers build on (Silero VAD's arm-cpu ONNX)
            pre_stem = best
        best = outranked
        if passing is not None:
            if not finished:
                rec.stopped = "time budget: a passing candidate was found, fewer float layers were not searched"
            return passing
        if not loop.fits():
            rec.stopped = "time budget"
            return best
    if cpu_tail_only:
        # A float op type anywhere cuts the TPU graph at its first occurrence (BlazePalm's Coral
        # candidate fell to a 1% TPU share): on the Edge TPU only the CPU tail may be float.
        return best
    # The noise is spread over many layers of a few kinds (a transformer's norms and attention):
    # keep the op types that gather the most of it float.
    totals: dict[str, float] = {}
    for e in ranking[:40]:
        totals[e.op] = totals.get(e.op, 0.0) + e.added
    # ...but never the compute ops themselves: an "int8" model with every convolution float is not one.
    # Nor ops that only move or select values: they pass their input's scale on to their output
    # (a float Transpose still feeds int8 readers the same rounding), so keeping them float gains
    # nothing; they rank high because they inherit their input's noise (the openWakeWord
    # melspectrogram spent two of its three op-type candidates on Unsqueeze and Transpose).
    types = [t for t in sorted(totals, key=lambda t: -totals[t]) if t not in COMPUTE_OPS and t not in MOVEMENT_OPS]
    if fmt == "onnx-qdq":  # a type ONNX Runtime does not quantize is float already: a candidate spent for nothing
        from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

        types = [t for t in types if t in QDQRegistry or t in QLinearOpsRegistry]
    # On top of the best candidate so far (its layers stay float too). Tried on the best calibration
    # alone instead, the openWakeWord melspectrogram's OpenVINO candidate no longer passed (with the
    # layers: Power float passed) and BlazePalm's jetson-orin one did not either way.
    for k in TYPE_STEPS:
        if k > len(types):
            break
        if not loop.fits(requantize=True):  # the advice must say the budget ended the search, not that it finished
            rec.stopped = "time budget"
            return best
        chosen = types[:k]
        cand = _with_float_types(loop, best, chosen, f"float op types({', '.join(chosen)})",
                                 {t: f"sensitivity: {t} layers gather {totals[t]:.2f} of int8 noise" for t in chosen})
        if cand is not None and cand.passed:
            return cand
        if cand is not None and cand.rank > best.rank:
            best = cand
    if not _tensorrt(ctx, fmt) and fmt in EDITED_FORMATS:  # the op-type steps' limit: all but the compute float
        if not loop.fits():
            rec.stopped = "time budget"
            return best
        cand = _compute_only(ctx, loop, best)
        if cand is not None and (cand.passed or cand.rank > best.rank):
            best = cand
    return best


__all__ = ["ALTERNATIVES", "Recovery", "RecoveryConfig", "convert_format", "copy_into"]
