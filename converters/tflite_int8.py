"""The ``tflite-int8`` format: full-integer TFLite for ARM CPUs (XNNPACK) and the Coral Edge TPU.

Every route first makes a *float* TFLite form of the source (:data:`ROUTES`, one per source
format), made once per conversion and shared by all TFLite profiles and recovery candidates;
then one quantizer takes it (:mod:`.tflite_native`: calibration in LiteRT, TensorFlow's MLIR
quantizer, the recipe's calibration method and float layers):

* ``keras`` / ``savedmodel``: traced into a ``tf.function`` at the job's static input shapes,
  variables frozen, converted by ``TFLiteConverter`` (float).
* ``onnx``: onnx2tf (offline, in a child process, see :mod:`.onnx2tf_route`) makes a
  SavedModel, then as above. By default the artifact keeps the source's input layout (an NCHW
  image input stays NCHW; onnx2tf puts a TRANSPOSE inside the model, which the Edge TPU runs),
  so the manifest's preprocessing, the accuracy gate and the device all feed what the source
  took. ``job.options["tflite_input_layout"] = "nhwc"`` exposes onnx2tf's NHWC input instead
  (reported in ``backend_options["input_transpose"]``).
* ``tflite`` (float): the file itself, sparse and fp16 weights folded, static shapes; signature
  or not; custom ops kept float. Only if the quantizer cannot take it does its static float ONNX
  go the ONNX route (recorded).

The profile decides the scheme: ``quantization.input_dtype/output_dtype`` (float32 keeps float
I/O, int8/uint8 makes integer I/O), ``quantization.weights`` / ``dense_weights`` (the Edge TPU: per-channel convolutions,
per-tensor dense layers), and
a profile with an ``[operators]`` table (coral-edgetpu) allows integer builtin ops only: a float
builtin op left in the graph is a :class:`~edge_sdk.errors.ConversionError` naming it (custom ops,
which nothing can quantize, stay float and count against the accelerator's share). For such
profiles the Edge TPU pre-check runs and, if ``edgetpu_compiler`` is on PATH, the compiler.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from edge_sdk.errors import ConversionError
from edge_sdk.fsutil import atomic_write_bytes
from edge_sdk.manifest import Quantization, TensorSpec
from edge_sdk.registry import Registry

from .base import ConvertJob, FormatResult
from .targets import tflite_config
from .console import import_tensorflow
from .tflite_tf_route import calib_arrays, first_line, float_tf, from_savedmodel_dir, integer_only, outputs_in_order, sanitize

MODEL_FILE = "model.tflite"


@dataclass
class Converted:
    """A route's float TFLite form of the source, which the quantizer then takes.

    Attributes:
        model: The float TFLite flatbuffer, static shapes (weights folded to dense float32).
        route: How it was made (recorded in the manifest).
        tools: Tool name -> version.
        tensor_names: Source tensor name -> TFLite tensor name, where they differ.
        input_perms: Source input name -> permutation from the source layout to the model's.
        warnings: Things the user should know.
        custom_ops: Custom ops left in the model (float; counted against an accelerator's share).
    """

    model: bytes
    route: str
    tools: dict[str, str] = field(default_factory=dict)
    tensor_names: dict[str, str] = field(default_factory=dict)
    input_perms: dict[str, list[int]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    custom_ops: list[str] = field(default_factory=list)


#: source format -> route making the float TFLite form (the pipeline never asks for a format without a route).
ROUTES: Registry[Callable[[ConvertJob], Converted]] = Registry("TFLite int8 source format", ConversionError)


def _tool_versions(*names: str) -> dict[str, str]:
    from edge_sdk._deps import version_of

    return {n: version_of(n) or "unknown" for n in names}


@ROUTES.register("savedmodel")
def _savedmodel(job: ConvertJob) -> Converted:
    model = from_savedmodel_dir(job, job.source.path)
    return Converted(model, "savedmodel -> tf.function (static shapes) -> TFLiteConverter (float)",
                     _tool_versions("tensorflow"), {s.name: sanitize(s.name) for s in job.source.inputs})


@ROUTES.register("keras")
def _keras(job: ConvertJob) -> Converted:
    tf = import_tensorflow("TFLite conversion")

    try:
        km = tf.keras.models.load_model(str(job.source.path), compile=False)
    except Exception as exc:  # noqa: BLE001 - Keras raises many types for a bad file
        raise ConversionError(f"Cannot load Keras model {job.source.path}: {first_line(exc)}") from None
    names = [s.name for s in job.source.inputs]

    def fn(*args):
        out = km(list(args) if len(args) > 1 else args[0])
        return list(out) if isinstance(out, (list, tuple)) else outputs_in_order(out, [s.name for s in job.source.outputs])

    model = float_tf(job, fn, names, {})
    return Converted(model, "keras -> tf.function (static shapes) -> TFLiteConverter (float)",
                     _tool_versions("tensorflow", "keras"), {n: sanitize(n) for n in names})


@ROUTES.register("onnx")
def _onnx(job: ConvertJob) -> Converted:
    return _via_onnx(job, Path(job.source.path), "onnx")


@ROUTES.register("tflite")
def _tflite(job: ConvertJob) -> Converted:
    """Float TFLite: the source itself, sparse/fp16 weights folded, static shapes; no ONNX detour."""
    from .tflite_native import FOLDABLE, custom_ops, static_shapes, used_ops

    folded = Path(job.float_tflite()).read_bytes()
    model = static_shapes(folded, job.input_shapes)
    steps = "tflite (float)"
    if Path(job.float_tflite()) != Path(job.source.path):  # what pipeline._fold_tflite did to the source
        source_ops = used_ops(Path(job.source.path).read_bytes())
        rewritten = sorted(n.split(":", 1)[1] for n in source_ops - used_ops(model) if n.startswith("CUSTOM:"))
        if source_ops & set(FOLDABLE):
            steps += " -> fold sparse/fp16 weights"
        if rewritten:
            steps += f" -> custom {', '.join(rewritten)} as TRANSPOSE_CONV + ADD"
    converted = Converted(model, steps, _tool_versions("ai-edge-litert"))
    converted.custom_ops = custom_ops(model)
    if converted.custom_ops:
        converted.warnings.append(f"custom op(s) {', '.join(converted.custom_ops)} stay float (LiteRT runs them on "
                                  "the CPU; no quantizer can touch them)")
    return converted


def _via_onnx(job: ConvertJob, onnx_path: Path, origin: str) -> Converted:
    from .onnx2tf_route import onnx_to_savedmodel

    job.log("onnx2tf (offline, child process) -> SavedModel")
    shapes = {s.name: list(job.input_shapes[s.name]) for s in job.source.inputs}
    layout = job.options.get("tflite_input_layout", "source")
    if layout not in ("source", "nhwc"):
        raise ConversionError(f"Option tflite_input_layout must be 'source' or 'nhwc', got {layout!r}.")
    from .sources import refuse_quantized

    refuse_quantized(job.source, "int8 TFLite")
    res = onnx_to_savedmodel(onnx_path, shapes, job.calib, Path(job.scratch),
                             keep_layout=layout == "source")
    model = from_savedmodel_dir(job, res.saved_model, res.input_perms, onnx_ref=onnx_path)
    tools = _tool_versions("onnx2tf", "tensorflow", "onnx")
    return Converted(model, f"{origin} -> onnx2tf (SavedModel) -> tf.function (static shapes) -> TFLiteConverter (float)",
                     tools, {s.name: sanitize(s.name) for s in job.source.inputs}, dict(res.input_perms))


def _shared(job: ConvertJob) -> dict:
    """What every profile and candidate of this conversion shares (the float form and its statistics)."""
    return job.cache.setdefault("shared", {})


def float_form(job: ConvertJob) -> Converted:
    """The float TFLite form of the source, made once per conversion (all TFLite profiles and
    recovery candidates share it; onnx2tf, the slow part, runs once), then rewritten for a target
    whose operator table lacks an op it has an exact equivalent for (made once per such target)."""
    key = f"tflite_float:{job.options.get('tflite_input_layout', 'source')}:{sorted(job.input_shapes.items())}"
    shared = _shared(job)
    if isinstance(shared.get(key), ConversionError):  # it failed once: every profile and candidate says so, none reruns it
        raise shared[key]
    if key not in shared:
        route: Callable[[ConvertJob], Converted] = ROUTES.get(job.source.format)
        job.log(f"{job.source.format} -> float TFLite")
        try:
            shared[key] = _delegate_friendly(job, route(job))
        except ConversionError as exc:
            shared[key] = exc
            raise
    rewrites = _operator_rewrites(job)
    if not rewrites:
        return shared[key]
    target_key = f"{key}:{','.join(name for name, *_ in rewrites)}"
    if target_key not in shared:
        base = shared[key]
        form = dataclasses.replace(base, tools=dict(base.tools), tensor_names=dict(base.tensor_names),
                                   input_perms=dict(base.input_perms), warnings=list(base.warnings),
                                   custom_ops=list(base.custom_ops))
        for name, rewrite, how in rewrites:
            model, n = rewrite(form.model)
            if n:
                job.log(f"{name} x{n} -> {how} ({job.profile.name} runs those, not {name})")
                form.model = model
                form.route += f" -> {name} as {how} for {job.profile.name} (x{n})"
        shared[target_key] = form
    return shared[target_key]


def _operator_rewrites(job: ConvertJob) -> list[tuple[str, Callable[[bytes], tuple[bytes, int]], str]]:
    """Exact float rewrites of ops the profile's operator table lacks into ops it has."""
    from .tflite_native import decompose_leaky_relu, relu_0_to_1_as_relu6

    supported = {s.upper() for s in job.profile.operators.supported}
    if not supported or not job.options.get("tflite_delegate_rewrites", True):
        return []
    return [(name, rewrite, how) for name, needs, rewrite, how in
            (("LEAKY_RELU", {"MUL", "SUB", "ADD"}, decompose_leaky_relu, "relu(x) + alpha * (x - relu(x))"),
             ("RELU_0_TO_1", {"MUL", "RELU6"}, relu_0_to_1_as_relu6, "relu6(6x) / 6"))
            if name not in supported and needs <= supported]


def _delegate_friendly(job: ConvertJob, form: Converted) -> Converted:
    """Rewrite ops XNNPACK does not take in int8 into ops it does, exactly in float: ``PRELU``.

    Only where it was measured to pay: BlazePalm's int8 model went from 20.7 to 7.1 ms. The same
    trick for ``MAXIMUM(x, c)`` (``relu(x - c) + c``; onnx2tf writes the openWakeWord embedding's
    leaky-ReLU clamps as 19 of them) made one partition of twenty but ran slower (0.31 -> 0.47 ms):
    three elementwise passes cost more than the hand-overs they remove, so it is not applied.
    ``options.tflite_delegate_rewrites = false`` turns the rewrite off.
    """
    from .tflite_native import decompose_prelu

    if not job.options.get("tflite_delegate_rewrites", True):
        return form
    for name, rewrite, how in (("PRELU", decompose_prelu, "relu(x) + alpha * (x - relu(x))"),):
        model, n = rewrite(form.model)
        if n:
            job.log(f"{name} x{n} -> {how} (XNNPACK runs those in int8, not {name})")
            form.model = model
            form.route += f" -> {name} decomposed for XNNPACK (x{n})"
    return form


def _stats(job: ConvertJob, form: Converted) -> dict:
    """Calibration statistics of the float form, computed once (every method, every candidate)."""
    from .tflite_native import calibrate

    key = f"tflite_stats:{id(form)}"
    shared = _shared(job)
    if key not in shared:
        feeds = calib_arrays(job, [s.name for s in job.source.inputs], form.input_perms)
        job.log(f"calibrating in LiteRT ({len(feeds)} samples)")
        shared[key] = calibrate(form.model, feeds)
    return shared[key]


def output_dtype(job: ConvertJob) -> str:
    """The dtype the int8 model's float outputs come out in: the profile's, except where an
    integer-only target's recipe keeps layers float. Those make a CPU tail that computes in float,
    so its outputs stay float32: quantizing them again would undo the tail. A YOLOv8 output packs
    pixel boxes (0..520) and scores (0..1); as one uint8 tensor (scale 2.2) every score was 0 on
    the Edge TPU, whatever the tail kept float."""
    q, recipe = job.profile.quantization, job.recipe
    if q.output_dtype != "float32" and (recipe.float_nodes or recipe.float_ops) \
            and tflite_config(job.profile).float_only_in_cpu_tail:
        return "float32"
    return q.output_dtype


def _pixel_inputs(job: ConvertJob, form: Converted) -> tuple[bytes, dict]:
    """For an integer-only target with uint8 I/O: the float form without the CASTs that turn uint8
    pixel inputs into float (:func:`tflite_native.strip_input_casts`), and the calibration
    statistics with those inputs' range set to 0..255, so that each is quantized with scale 1 and
    zero point 0 (the pixels as they are). Otherwise the form and its statistics as they are."""
    from .tflite_native import RANGE_METHODS, strip_input_casts

    stats = _stats(job, form)
    if not integer_only(job) or job.profile.quantization.input_dtype != "uint8":
        return form.model, stats
    model, made_float = strip_input_casts(form.model)
    if made_float:
        stats = {**stats, **{i: {m: (0.0, 255.0) for m in RANGE_METHODS} for i in made_float}}
        job.log(f"{len(made_float)} uint8 input(s) cast to float inside: the CAST removed, the input quantized "
                "as pixels (uint8, scale 1, zero point 0) so that the graph after it can map")
    return model, stats


def _quantize(job: ConvertJob, form: Converted) -> bytes:
    from .tflite_native import apply_stats, delay_float_ops, quantize

    q, recipe = job.profile.quantization, job.recipe
    method = recipe.method(job.profile)
    job.log(f"MLIR quantizer int8 ({method}, {q.weights_label} weights"
            + (f", {len(recipe.float_nodes)} op(s) float" if recipe.float_nodes else "") + ")")
    float_model, stats = _pixel_inputs(job, form)
    calibrated = apply_stats(float_model, stats, method)
    model = quantize(calibrated, per_tensor=q.weights == "per-tensor", per_tensor_dense=q.dense == "per-tensor",
                     input_dtype=q.input_dtype,
                     output_dtype=output_dtype(job), float_nodes=recipe.float_nodes, float_ops=recipe.float_ops,
                     log=Path(job.scratch) / "tflite_quantizer.log")
    if tflite_config(job.profile).float_only_in_cpu_tail:
        # What the accelerator cannot run, as late as the graph allows: the part before it maps.
        model, moved = delay_float_ops(model)
        if moved:
            job.log(f"{moved} op(s) reordered: float and custom ops after every integer op that does not need them")
    return model


def _int8(job: ConvertJob) -> tuple[bytes, Converted]:
    """Quantize the float form; a float TFLite source the native route cannot take goes through ONNX."""
    form = float_form(job)
    try:
        return _quantize(job, form), form
    except ConversionError as exc:
        has_onnx = job.static_onnx is not None or job.onnx_provider is not None
        if job.source.format != "tflite" or not has_onnx:
            raise
        job.log(f"native TFLite route failed ({exc.message}); trying tf2onnx -> onnx2tf")
        key = "tflite_float:detour"
        shared = _shared(job)
        try:
            if isinstance(shared.get(key), ConversionError):
                raise shared[key]
            if key not in shared:
                try:
                    shared[key] = _via_onnx(job, job.onnx(), "tflite -> tf2onnx (static ONNX)")
                except ConversionError as detour:
                    shared[key] = detour
                    raise
                shared[key].tools.update(_tool_versions("tf2onnx"))
                shared[key].warnings.append(f"the native TFLite route failed ({exc.message}); made through tf2onnx -> onnx2tf")
            return _quantize(job, shared[key]), shared[key]
        except ConversionError as detour:
            # the cause is the native route's: the detour is what was tried after it (a float TFLite
            # with RFFT2D, which LiteRT runs, was refused as "ONNX Runtime and OpenVINO cannot run them")
            raise ConversionError(f"{exc.message.rstrip('.')}. The detour through ONNX (tf2onnx -> onnx2tf) failed too: {detour.message}",
                                  exc.hint or detour.hint) from None


def _dtype_name(np_dtype) -> str:
    return np.dtype(np_dtype).name


def source_names(converted: Converted, sources: list[str], names: list[str]) -> dict[str, str]:
    """Source tensor -> TFLite tensor, for the TFLite tensors ``names`` (its inputs or outputs in
    order): by the (sanitised) name the route gave them, else by position, since the routes keep
    the source order (onnx2tf names outputs ``Identity``, ``Identity_1``...)."""
    known = set(names)
    out = {}
    for i, src in enumerate(sources):
        name = converted.tensor_names.get(src, src)
        out[src] = name if name in known or i >= len(names) else names[i]
    return out


def _io_specs(model: bytes, sources: list[TensorSpec], converted: Converted, kind: str) -> list[TensorSpec]:
    """The artifact's tensor specs, read from the interpreter, named after the source tensors
    (matched by :func:`source_names`)."""
    from edge_sdk._deps import require

    interp_mod = require("ai_edge_litert.interpreter", "reading the TFLite model")
    interp = interp_mod.Interpreter(model_content=model)
    details = interp.get_input_details() if kind == "inputs" else interp.get_output_details()
    if len(details) != len(sources):
        raise ConversionError(
            f"The TFLite model has {len(details)} {kind} but the source model has {len(sources)}.",
            "This is a converter bug for this model; try the onnx-qdq format meanwhile.",
        )
    by_name = {d["name"]: d for d in details}
    names = source_names(converted, [src.name for src in sources], [d["name"] for d in details])
    specs = []
    for src in sources:
        d = by_name[names[src.name]]
        scale, zero = d["quantization"]
        dtype = _dtype_name(d["dtype"])
        quant = Quantization(scale=float(scale), zero_point=int(zero), dtype=dtype) if scale else None
        perm = converted.input_perms.get(src.name) if kind == "inputs" else None
        layout = "NHWC" if perm == [0, 2, 3, 1] else src.layout
        specs.append(TensorSpec(name=src.name, shape=[int(x) for x in d["shape"]], dtype=dtype,
                                quantization=quant, layout=layout))
    return specs


def _check_io_dtypes(specs: list[TensorSpec], sources: list[TensorSpec], want: str, kind: str) -> None:
    """Float tensors of the source must come out in the profile's dtype (integer ones, e.g. an
    argmax index or token ids, keep theirs)."""
    for spec, src in zip(specs, sources):
        if src.dtype in ("float32", "float16") and spec.dtype != want:
            raise ConversionError(
                f"Model {kind[:-1]} '{spec.name}' came out as {spec.dtype}, but the profile asks for {want}.",
                "The converter could not honour the profile's I/O dtype for this model.",
            )


def _float_ops(model: bytes) -> list[str]:
    """Ops that still compute in float (an op with a float32 input or output tensor)."""
    from .edgetpu import precheck
    from edge_sdk.profiles import OperatorSpec

    report = precheck(model, OperatorSpec(allowed_dtypes=["int8", "uint8", "int32", "int16", "int64", "bool"]))
    # QUANTIZE/DEQUANTIZE are float<->int8 conversions, not float compute; SHAPE reads dims only.
    return [f"#{i.index} {i.op}" for i in report.issues
            if i.op not in ("QUANTIZE", "DEQUANTIZE", "SHAPE") and any("float" in r for r in i.reasons)]


def _cpu_tail(model: bytes, float_nodes=(), float_ops=()) -> int | None:
    """Index of the first op of the CPU tail: the first custom op or layer kept float (by its
    output tensor name or op type), or a DEQUANTIZE feeding one of them (its float output belongs
    to the tail; wherever it sits, the accelerator's part ends there)."""
    from .graph import from_tflite

    g = from_tflite(model)
    floats, ops = set(float_nodes), set(float_ops)
    tail = [k for k, n in enumerate(g.nodes) if n.native.startswith("CUSTOM:") or floats & set(n.outputs) or n.native in ops]
    if not tail:
        return None
    index = {id(n): k for k, n in enumerate(g.nodes)}
    feeders = [g.producer(t) for k in tail for t in g.nodes[k].inputs if t]
    return min(tail + [index[id(p)] for p in feeders if p is not None and p.native == "DEQUANTIZE"])


def _issue_at_or_after(line: str, index: int) -> bool:
    """For a pre-check line ``op #N ...``: is N >= index (model-level lines never are)."""
    import re

    found = re.match(r"op #(\d+)", line)
    return bool(found) and int(found.group(1)) >= index


def _edgetpu_step(job: ConvertJob, model: bytes, model_path: Path, result: FormatResult) -> None:
    """Pre-check, then compile if the compiler is here; fills ``result`` in place.

    Raises:
        ConversionError: the pre-check finds something the compiler cannot take at all.
    """
    from .edgetpu import compile_model, precheck

    report = precheck(model, job.profile.operators)
    result.backend_options["edgetpu_precheck"] = report.to_dict()
    # A custom op (which nothing quantizes) ends what the compiler maps: it and everything after it
    # run on the CPU, float included. Only what comes before it must be Edge TPU-clean.
    tail = _cpu_tail(model, job.recipe.float_nodes, job.recipe.float_ops)
    blocking = [b for b in report.blocking if tail is None or not _issue_at_or_after(b, tail)]
    if blocking:
        raise ConversionError(
            f"The int8 model cannot run on the Edge TPU: {'; '.join(blocking[:5])}"
            + (f" (and {len(blocking) - 5} more)" if len(blocking) > 5 else ""),
            "Replace the named ops with ones that quantize to int8, or use the arm-cpu profile.",
        )
    for line in report.lines():
        if line.startswith("about") or (not report.ok and tail is None):
            result.warnings.append(f"Edge TPU pre-check: {line}")
    if tail is not None:
        result.warnings.append(f"Edge TPU: op #{tail} (a custom op or a layer kept float) ends the mapped part: "
                               f"{tail} of {report.total_ops} ops ({tail / max(report.total_ops, 1):.0%}) can map to the "
                               "TPU, the rest run on the CPU")
        result.backend_options["edgetpu_precheck"]["cpu_tail_from"] = tail
        result.backend_options["edgetpu_precheck"]["tpu_fraction"] = round(min(report.tpu_fraction, tail / max(report.total_ops, 1)), 4)
    compiled = compile_model(model_path, model_path.parent, job.profile.operators.compiler or "edgetpu_compiler")
    result.backend_options["edgetpu"] = compiled.to_dict()
    if compiled.compiled:
        result.extra_files.append((compiled.compiled_model, "engine"))
        result.extra_files.append((compiled.log_file, "log"))
        result.tools["edgetpu_compiler"] = compiled.compiler_version
    else:
        result.warnings.append(f"{compiled.status}. To compile: {compiled.command}")


def check_input_dtypes(job: ConvertJob) -> None:
    """Refuse, before any work, integer inputs an integer-only accelerator cannot take (int64 on the Edge TPU).

    Float inputs are quantized to the profile's I/O dtype; an integer input is fed as it is, so
    its type must be one the accelerator's operator table allows.

    Raises:
        ConversionError: naming each input, its type, what the target takes and the alternatives.
    """
    allowed = set(job.profile.operators.allowed_dtypes)
    if not allowed:
        return
    bad = [f"'{s.name}' ({s.dtype})" for s in job.source.inputs
           if np.dtype(s.dtype).kind in "iub" and s.dtype not in allowed]
    if bad:
        raise ConversionError(
            f"Input {', '.join(bad)} cannot be fed to {job.profile.name}: its accelerator takes "
            f"{'/'.join(sorted(allowed))} tensors only, and integer inputs are fed as they are (never quantized).",
            "Alternatives: export the model with an int32 input (a Cast inside the graph where an op needs int64), "
            "make a fixed value such as a sample rate a constant of the graph, or run the model on the CPU "
            "(arm-cpu profile).")


def convert(job: ConvertJob) -> FormatResult:
    """Convert ``job.source`` to a full-integer TFLite model for ``job.profile``.

    Args:
        job: The conversion job (static shapes, calibration feeds, staging folder).

    Returns:
        The artifact: ``model.tflite`` (plus the compiled Edge TPU model and its log when the
        compiler is available), I/O specs with quantization params, route and tool versions.

    Raises:
        ConversionError: no route for the source format, the converter failed, float ops remain
            where the profile allows integer ops only, or the Edge TPU pre-check blocks.
        CalibrationError: the calibration feeds do not fit the model.
    """
    check_input_dtypes(job)
    model, converted = _int8(job)
    strict_int = integer_only(job)
    float_ops = _float_ops(model)
    tail = _cpu_tail(model, job.recipe.float_nodes, job.recipe.float_ops)
    # Custom ops (nothing quantizes them) and layers the recipe keeps float make a CPU tail; any
    # other float op in the part before it is what an integer-only target cannot take.
    blocking = [f for f in float_ops if not f.split(" ", 1)[-1].startswith("CUSTOM:")
                and (tail is None or int(f.split(" ", 1)[0].lstrip("#")) < tail)]
    if blocking and strict_int:
        raise ConversionError(
            f"Ops left in float after int8 quantization for {job.profile.name}: {', '.join(blocking[:8])}.",
            "This target runs integer ops only; replace these ops in the model, or use the arm-cpu profile.",
        )
    model_path = job.workdir / MODEL_FILE
    atomic_write_bytes(model_path, model)
    q = job.profile.quantization
    inputs = _io_specs(model, job.source.inputs, converted, "inputs")
    outputs = _io_specs(model, job.source.outputs, converted, "outputs")
    _check_io_dtypes(inputs, job.source.inputs, q.input_dtype, "inputs")
    _check_io_dtypes(outputs, job.source.outputs, output_dtype(job), "outputs")
    result = FormatResult(
        model_file=MODEL_FILE, inputs=inputs, outputs=outputs, precision="int8",
        tools={**converted.tools, **_tool_versions("tensorflow")}, warnings=list(converted.warnings),
        route=f"{converted.route} -> LiteRT calibration -> MLIR quantizer int8 ({job.recipe.method(job.profile)})",
        # Namespaced: the pipeline merges the backend options of all of a profile's formats.
        backend_options={"tflite": {"weights": q.weights, "dense_weights": q.dense, "io_dtypes": [q.input_dtype, output_dtype(job)],
                                    "calibration_method": job.recipe.method(job.profile),
                                    "float_nodes": list(job.recipe.float_nodes)}},
    )
    if float_ops:
        result.warnings.append(f"Ops still computing in float (run by the CPU in float): {', '.join(float_ops)}")
        result.backend_options["tflite"]["float_ops"] = float_ops
    if converted.input_perms:
        result.backend_options["input_transpose"] = converted.input_perms
        for name, perm in converted.input_perms.items():
            result.warnings.append(
                f"Input '{name}' is {'NHWC' if perm == [0, 2, 3, 1] else perm} in the TFLite model (onnx2tf "
                f"transposed it); feed it as {next(s.shape for s in inputs if s.name == name)}.")
    if job.profile.operators.compiler:
        _edgetpu_step(job, model, model_path, result)
    return result
