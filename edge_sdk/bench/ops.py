"""Per-operator profiles from each runtime's own profiler, normalised into one table.

- OpenVINO: the plugin's performance counters (``PERF_COUNT``): layer, type, the kernel that ran
  (its name ends in the precision executed, e.g. ``brgconv_avx512_I8``), real time.
- ONNX Runtime: session profiling (a Chrome-trace JSON): node, op type, execution provider,
  kernel time, output element type.
- LiteRT: its Python API exposes no per-op timer. The table lists the ops with the precision of
  their results and how the delegate partitioned the graph, times left empty, and says so.
- TensorRT: not profiled here (no GPU on the machines this was built on); said so.

Each profile is a fresh session of the same file with the same options the facade used (threads,
OpenVINO precision pin, ONNX Runtime's int8 arithmetic), so profiling overhead never touches the
timed bench loop. A row's ``time_ms`` is the op's median over the profiled runs.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: Ops that do the arithmetic of a network: run in float inside an int8 artifact, they are a fallback.
COMPUTE_TYPES = frozenset({
    "Conv", "ConvTranspose", "MatMul", "Gemm", "Convolution", "GroupConvolution", "ConvolutionBackpropData",
    "FullyConnected", "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "BATCH_MATMUL",
})
#: Ops that only change a tensor's type or layout.
REFORMAT_TYPES = frozenset({"QuantizeLinear", "DequantizeLinear", "Reorder", "Convert", "QUANTIZE", "DEQUANTIZE",
                            "DynamicQuantizeLinear", "Transpose", "MemoryOutput", "ReorderInput", "ReorderOutput",
                            "Cast"})
INT8_PRECISIONS = frozenset({"int8", "uint8"})
TOP = 15


@dataclass
class OpRow:
    """One operator of the profile (times per inference)."""

    name: str
    type: str
    precision: str | None
    time_ms: float | None
    share: float | None = None
    provider: str | None = None
    flags: list[str] = field(default_factory=list)


@dataclass
class OpProfile:
    """A runtime's per-op profile of one artifact.

    ``timed``: the runtime reported a time for every op it ran (then ``coverage`` is the sum of op
    times over the bench's p50: op times leave out the call's own overhead, so it is below 1).
    """

    runtime: str
    timed: bool
    rows: list[OpRow]
    runs: int
    total_ms: float | None = None
    p50_ms: float | None = None
    coverage: float | None = None
    note: str | None = None
    explanation: str | None = None
    #: The execution provider asked for (ONNX Runtime): ops on another one are flagged.
    requested_provider: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def top(self, n: int = TOP) -> list[OpRow]:
        """The ``n`` most expensive ops (or the first ``n`` when the runtime gives no times)."""
        if not self.timed:
            return self.rows[:n]
        return sorted(self.rows, key=lambda r: -(r.time_ms or 0.0))[:n]


def _precision(token: str | None) -> str | None:
    """Normalise a runtime's precision spelling (``I8``, ``tensor(int8)``, ``numpy.int8``...)."""
    if not token:
        return None
    t = token.lower().replace("tensor(", "").replace(")", "").replace("<class 'numpy.", "").replace("'>", "")
    table = {"i8": "int8", "u8": "uint8", "int8": "int8", "uint8": "uint8", "fp32": "fp32", "f32": "fp32",
             "float": "fp32", "float32": "fp32", "bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "f16": "fp16",
             "float16": "fp16", "i32": "int32", "int32": "int32", "i64": "int64", "int64": "int64", "bool": "bool",
             "boolean": "bool", "u1": "bool"}
    return table.get(t, t)


def _finish(p: OpProfile, int8_artifact: bool, requested_provider: str | None = None) -> OpProfile:
    """Shares, flags and the one-line explanation."""
    total = sum(r.time_ms or 0.0 for r in p.rows) if p.timed else None
    p.total_ms = total
    if total and p.p50_ms:
        p.coverage = round(total / p.p50_ms, 3)
    for r in p.rows:
        if total and r.time_ms is not None:
            r.share = round(r.time_ms / total, 4)
        if r.type in REFORMAT_TYPES or r.type.endswith("QuantizeLinear"):
            r.flags.append("reformat")
        if int8_artifact and r.type in COMPUTE_TYPES and r.precision and r.precision not in INT8_PRECISIONS:
            r.flags.append(f"float fallback ({r.precision})")
        if requested_provider and r.provider and r.provider != requested_provider:
            r.flags.append(f"fallback provider ({r.provider})")
    p.explanation = explain(p, int8_artifact)
    return p


def explain(p: OpProfile, int8_artifact: bool, details: dict[str, Any] | None = None) -> str:
    """One line on where the time goes, aimed at "why is int8 not faster here"."""
    if not p.timed or not p.total_ms:
        return p.note or "no op times from this runtime"
    share = {k: sum(r.share or 0.0 for r in p.rows if any(f.startswith(k) for f in r.flags))
             for k in ("reformat", "float fallback", "fallback provider")}
    parts = []
    if p.p50_ms and p.p50_ms < 0.2:
        parts.append(f"the model is tiny ({p.p50_ms:.3f} ms): per-call overhead, not arithmetic, sets the latency")
    if share["fallback provider"] > 0.05:
        parts.append(f"{share['fallback provider']:.0%} of op time on a fallback provider")
    if share["float fallback"] > 0.05:
        parts.append(f"{share['float fallback']:.0%} of op time in compute ops that ran in float")
    if share["reformat"] > 0.15:
        parts.append(f"{share['reformat']:.0%} of op time only converts types or layouts (quantize/dequantize/reorder)")
    arithmetic = str((details or {}).get("int8_arithmetic") or "")
    int8_kernels = any(r.precision in INT8_PRECISIONS and (r.type.startswith(("QLinear", "NhwcQLinear", "QGemm"))
                                                         or r.type.endswith("Integer")) for r in p.rows)
    if int8_artifact and int8_kernels and arithmetic.startswith("s8s8"):
        parts.append("ONNX Runtime on x86 runs int8 x int8 here, its slow path (chosen so results match the device)")
    if not parts:
        top = p.top(3)
        parts.append("time is in the arithmetic: " + ", ".join(f"{r.type} {r.share:.0%}" for r in top if r.share))
    return "; ".join(parts)


def _random_feed(shapes: list[tuple[str, tuple[int, ...], np.dtype]], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feed = {}
    for name, shape, dtype in shapes:
        shape = tuple(max(int(d), 1) for d in shape)
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            feed[name] = rng.integers(max(info.min, -128), min(info.max, 127) + 1, shape).astype(dtype)
        elif dtype == np.bool_:
            feed[name] = rng.random(shape) > 0.5
        else:
            feed[name] = rng.random(shape).astype(dtype)
    return feed


def profile_openvino(cfg, runs: int) -> OpProfile:
    """Per-layer counters of the OpenVINO plugin (median real time over ``runs`` inferences)."""
    from edge_sdk._deps import require
    from edge_sdk.runtimes.openvino import compile_config, weights_path

    ov = require("openvino", "profiling OpenVINO IR models")

    core = ov.Core()
    config: dict[str, Any] = {"PERF_COUNT": True, **compile_config(cfg)}  # as the runner compiles it
    if Path(cfg.model_path).suffix.lower() == ".xml":  # the checked bytes, as the runner reads them
        args = [cfg.read_checked(), cfg.read_checked(weights_path(Path(cfg.model_path), cfg.files))]
    else:
        from edge_sdk.runtimes.onnxruntime import checked_onnx

        args = [checked_onnx(cfg)]
    compiled = core.compile_model(core.read_model(*args), cfg.accelerator, config)
    req = compiled.create_infer_request()
    feed = _random_feed([(str(i), tuple(p.get_shape()), np.dtype(p.get_element_type().to_dtype()))
                         for i, p in enumerate(compiled.inputs)])
    inputs = [feed[str(i)] for i in range(len(compiled.inputs))]
    req.infer(inputs)  # first inference: lazy allocations, not counted
    times: dict[str, list[float]] = {}
    meta: dict[str, tuple[str, str]] = {}
    for _ in range(runs):
        req.infer(inputs)
        for info in req.get_profiling_info():
            if str(info.status).endswith("NOT_RUN") or str(info.status).endswith("OPTIMIZED_OUT"):
                continue
            times.setdefault(info.node_name, []).append(info.real_time.total_seconds() * 1e3)
            meta[info.node_name] = (info.node_type, info.exec_type)
    rows = []
    for name, ts in times.items():
        node_type, exec_type = meta[name]
        token = re.split(r"[_\s]", exec_type)[-1] if exec_type else None
        rows.append(OpRow(name=name, type=node_type, precision=_precision(token), time_ms=float(np.median(ts)),
                          provider=f"{cfg.accelerator}:{exec_type}"))
    return OpProfile(runtime=f"openvino/{cfg.accelerator}", timed=True, rows=rows, runs=runs)


def profile_onnxruntime(cfg, runs: int) -> OpProfile:
    """ONNX Runtime session profiling: kernel time per node (median over ``runs`` inferences)."""
    from edge_sdk._deps import require
    from edge_sdk.runtimes.onnxruntime import checked_onnx, int8_arithmetic, provider_options

    ort = require("onnxruntime", "profiling .onnx models")
    with tempfile.TemporaryDirectory(prefix="edge-sdk-ops-") as tmp:
        so = ort.SessionOptions()
        so.enable_profiling = True
        so.profile_file_prefix = str(Path(tmp) / "ort")
        so.log_severity_level = 3
        if cfg.num_threads:
            so.intra_op_num_threads = int(cfg.num_threads)
        int8_arithmetic(so, cfg.accelerator, cfg)
        providers = [(cfg.accelerator, provider_options(cfg.accelerator, cfg))]
        if cfg.accelerator != "CPUExecutionProvider":
            providers.append(("CPUExecutionProvider", {}))
        sess = ort.InferenceSession(checked_onnx(cfg), sess_options=so, providers=providers)
        types = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int8)": np.int8,
                 "tensor(uint8)": np.uint8, "tensor(int32)": np.int32, "tensor(int64)": np.int64,
                 "tensor(bool)": np.bool_}
        feed = _random_feed([(i.name, tuple(d if isinstance(d, int) else 1 for d in i.shape),
                              np.dtype(types.get(i.type, np.float32))) for i in sess.get_inputs()])
        sess.run(None, feed)  # first inference: kernel selection, dropped below
        for _ in range(runs):
            sess.run(None, feed)
        events = json.loads(Path(sess.end_profiling()).read_text())
    times: dict[str, list[float]] = {}
    meta: dict[str, tuple[str, str | None, str | None]] = {}
    for ev in events:
        if ev.get("cat") != "Node" or not str(ev.get("name", "")).endswith("_kernel_time"):
            continue
        args = ev.get("args") or {}
        name = ev["name"][: -len("_kernel_time")]
        times.setdefault(name, []).append(float(ev.get("dur", 0)) / 1e3)
        out_types = args.get("output_type_shape") or []
        out_type = next(iter(out_types[0]), None) if out_types and isinstance(out_types[0], dict) else None
        meta[name] = (str(args.get("op_name", "?")), args.get("provider"), out_type)
    rows = []
    for name, ts in times.items():
        op_type, provider, out_type = meta[name]
        ts = ts[1:] if len(ts) > runs else ts  # the first (cold) inference
        rows.append(OpRow(name=name, type=op_type, precision=_ort_precision(op_type, out_type),
                          time_ms=float(np.median(ts)), provider=provider))
    return OpProfile(runtime=f"onnxruntime/{cfg.accelerator}", timed=True, rows=rows, runs=runs)


def _ort_precision(op_type: str, out_type: str | None) -> str | None:
    """Integer kernels (QLinearConv, ConvInteger, QGemm...) compute int8 whatever their output type."""
    if op_type.startswith(("QLinear", "NhwcQLinear", "QGemm", "QAttention")) or op_type.endswith("Integer"):
        return "int8"
    return _precision(out_type)


def not_delegated(ops: list[dict], graph_inputs: set[int], graph_outputs: set[int]) -> set[int]:
    """Indices of the original ops a delegate did not take, from the node list alone.

    LiteRT lists every original op plus one ``DELEGATE`` op per partition, and its Python API does
    not say which originals a partition replaced. A partition's inputs are tensors made outside it
    and its outputs the tensors it makes for the outside, so an op is outside every partition when it
    makes a partition input or a graph output no partition makes, reads a graph input or a partition
    output no partition reads, or exchanges a tensor with an op already known to be outside (that
    tensor would otherwise cross a partition's boundary). Propagated to a fixpoint.
    """
    delegates = [o for o in ops if o.get("op_name") == "DELEGATE"]
    if not delegates:
        return set()
    d_in = {int(t) for o in delegates for t in o.get("inputs", []) if int(t) >= 0}
    d_out = {int(t) for o in delegates for t in o.get("outputs", []) if int(t) >= 0}
    orig = [o for o in ops if o.get("op_name") != "DELEGATE"]
    producer = {int(t): int(o["index"]) for o in orig for t in o.get("outputs", []) if int(t) >= 0}
    consumers: dict[int, list[int]] = {}
    for o in orig:
        for t in o.get("inputs", []):
            if int(t) >= 0:
                consumers.setdefault(int(t), []).append(int(o["index"]))
    outside: set[int] = set()
    for o in orig:
        outs = {int(t) for t in o.get("outputs", []) if int(t) >= 0}
        ins = {int(t) for t in o.get("inputs", []) if int(t) >= 0}
        if (outs & d_in) - d_out or (outs & graph_outputs) - d_out or (ins & graph_inputs) - d_in:
            outside.add(int(o["index"]))
    changed = True
    while changed:
        changed = False
        for o in orig:
            i = int(o["index"])
            if i in outside:
                continue
            outs = [int(t) for t in o.get("outputs", []) if int(t) >= 0]
            ins = [int(t) for t in o.get("inputs", []) if int(t) >= 0]
            if any(t not in d_out and any(c in outside for c in consumers.get(t, [])) for t in outs) or \
                    any(t not in d_in and producer.get(t) in outside for t in ins):
                outside.add(i)
                changed = True
    return outside


def profile_litert(cfg, interpreter) -> OpProfile:
    """LiteRT: ops, the precision of their results, and which ones the delegate left to LiteRT's own
    kernels; no per-op times (its Python API has no op timer)."""
    ops = interpreter._get_ops_details()  # a private API, the only op listing LiteRT's Python API has
    delegate_nodes = [o for o in ops if o.get("op_name") == "DELEGATE"]
    try:
        names = {int(d["index"]): str(d["name"]) for d in interpreter.get_tensor_details()}
    except Exception:  # noqa: BLE001 - informational only
        names = {}
    g_in = {int(d["index"]) for d in interpreter.get_input_details()}
    g_out = {int(d["index"]) for d in interpreter.get_output_details()}
    outside = not_delegated(ops, g_in, g_out)
    rows = []
    for o in ops:
        result = o.get("result_types") or []
        outs = [int(i) for i in o.get("outputs", [])]
        label = names.get(outs[0]) if outs else None
        row = OpRow(name=f"#{o['index']} {label}" if label else f"#{o['index']}", type=str(o.get("op_name")),
                    precision=_precision(str(result[0])) if result else None, time_ms=None,
                    provider="delegate" if o.get("op_name") == "DELEGATE" else None)
        if int(o["index"]) in outside:
            row.flags.append("not delegated")
            row.provider = "litert kernels"
        rows.append(row)
    note = ("LiteRT's Python API has no per-op timer: ops are listed with their result precision, no times "
            "(on the device, LiteRT's benchmark_model --enable_op_profiling=true times them)")
    if delegate_nodes:
        note += f"; the {cfg.accelerator} delegate took the graph in {len(delegate_nodes)} partition(s)"
    p = OpProfile(runtime=f"litert/{cfg.accelerator}", timed=False, rows=rows, runs=0, note=note)
    if len(delegate_nodes) == 1 and not outside:
        p.explanation = (f"every op runs in the {cfg.accelerator} delegate (one partition): the time is its kernels' "
                         "(no per-op times from LiteRT's Python API)")
    if delegate_nodes and outside:
        left: dict[str, int] = {}
        for r in rows:
            if "not delegated" in r.flags:
                key = f"{r.type} ({r.precision})" if r.precision else r.type
                left[key] = left.get(key, 0) + 1
        p.explanation = (f"{len(outside)} of {len(ops) - len(delegate_nodes)} ops run on LiteRT's own kernels, "
                         f"not {cfg.accelerator}: " + ", ".join(f"{k} x{v}" for k, v in
                                                                 sorted(left.items(), key=lambda kv: -kv[1])[:6])
                         + (f"; {len(delegate_nodes)} partitions, each boundary a hand-over" if len(delegate_nodes) > 1 else ""))
    return p


def profile(model: Any, runs: int = 20, p50_ms: float | None = None) -> OpProfile:
    """The per-op profile of a loaded :class:`edge_sdk.Model` (a fresh profiling session of its file).

    Args:
        model: What ``edge_sdk.load`` returned (its runner's file and options are reused).
        runs: Profiled inferences after one cold inference.
        p50_ms: The bench's median latency, to report how much of it the op times cover.
    """
    runner = model._runner
    cfg = runner.config
    int8_artifact = any(a.role == "model" and str(a.precision).startswith(("int8", "uint8"))
                        for a in model.manifest.artifacts)
    backend = runner.backend
    from edge_sdk.backends import backends

    desc = backends().get(backend)
    hook = desc.hook("op_profiler") if desc is not None else None
    p = hook(runner, runs) if hook is not None else None
    if p is None:
        return OpProfile(runtime=f"{backend}/{cfg.accelerator}", timed=False, rows=[], runs=0,
                         note=f"no op profiler wired for {backend} (TensorRT: trtexec --dumpProfile on the device)",
                         explanation=None)
    p.p50_ms = p50_ms
    untimed_reason = p.explanation
    _finish(p, int8_artifact, p.requested_provider)
    p.explanation = untimed_reason if not p.timed and untimed_reason else explain(p, int8_artifact, runner.details)
    return p


def openvino_ops(runner, runs: int) -> OpProfile:
    """The OpenVINO backend's ``op_profiler`` hook (:mod:`edge_sdk.backends`)."""
    return profile_openvino(runner.config, runs)


def onnxruntime_ops(runner, runs: int) -> OpProfile:
    """The ONNX Runtime backend's ``op_profiler`` hook: ops on another provider than asked are flagged."""
    p = profile_onnxruntime(runner.config, runs)
    p.requested_provider = runner.config.accelerator
    return p


def litert_ops(runner, runs: int) -> OpProfile | None:
    """The LiteRT backend's ``op_profiler`` hook (ops and delegation of the loaded interpreter; no times)."""
    interp = getattr(runner, "_interp", None)
    return profile_litert(runner.config, interp) if interp is not None else None


def to_lines(p: OpProfile, n: int = TOP) -> list[str]:
    """The terminal table: the top ``n`` ops, then the explanation."""
    head = f"ops, {p.runtime}: " + (f"{len(p.rows)} ops, op times sum to {p.total_ms:.3f} ms"
                                    + (f" ({p.coverage:.0%} of p50 {p.p50_ms:.3f} ms)" if p.coverage else "")
                                    if p.timed and p.total_ms is not None else f"{len(p.rows)} ops, not timed")
    lines = [head]
    for r in p.top(n):
        t = f"{r.time_ms:8.4f} ms {100 * (r.share or 0):5.1f}%" if r.time_ms is not None else " " * 17
        lines.append(f"  {t}  {r.type:<22.22} {str(r.precision or '-'):<6} {r.name[:48]:<48} {', '.join(r.flags)}")
    if p.note:
        lines.append(f"  note: {p.note}")
    if p.explanation and p.explanation != p.note:
        lines.append(f"  why: {p.explanation}")
    return lines
