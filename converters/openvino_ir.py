"""OpenVINO IR int8 (Intel CPU, Intel NPU) via ``openvino.convert_model`` and NNCF.

Steps: ``convert_model`` (OpenVINO reads ONNX, TFLite and SavedModel sources itself; Keras
goes through the pipeline's static ONNX form), ``reshape`` to the static
shapes, then ``nncf.quantize`` over the calibration feeds with ``subset_size`` set to the real
count (NNCF's default of 300 would silently cap a bigger set and overstate a smaller one).
A ``validation_fn`` in ``job.options`` switches to NNCF's accuracy-controlled quantization.
"""

from __future__ import annotations

import re
from pathlib import Path


from edge_sdk._deps import require
from edge_sdk.errors import ConversionError
from edge_sdk.manifest import TensorSpec

from .base import ConvertJob, FormatResult
from .console import quiet
from .tool_errors import tool_error


def compress_quantize_weights_transformation(model) -> None:
    """NNCF's last step: FakeQuantize on weights -> int8 constants with a decompression."""
    from openvino._offline_transformations import compress_quantize_weights_transformation as compress

    compress(model)

XML_FILE = "model.xml"
BIN_FILE = "model.bin"
_OV_DTYPES = {"f32": "float32", "f16": "float16", "i8": "int8", "u8": "uint8", "i32": "int32", "i64": "int64",
              "boolean": "bool"}


def _read(job: ConvertJob):
    """Read the source into OpenVINO (ONNX/TFLite with ``Core.read_model``, a SavedModel folder with
    ``convert_model``; Keras via its static ONNX); output names are set to the source's so the gate and the manifest agree."""
    ov = require("openvino", "OpenVINO IR conversion")
    # Keras goes through its static ONNX form: convert_model on a loaded Keras 3 model object
    # gave a wrong int8 IR for the second profile of a run in our tests (gate cosine 0.17, cause
    # not isolated), while the ONNX form is exact.
    src = {"keras": job.onnx, "tflite": job.float_tflite}.get(job.source.format, lambda: job.source.path)()
    if job.source.format == "onnx" and _has_if(job):
        src = job.onnx()  # its If nodes made readable (sources.self_contained_branches)
    try:
        # ONNX (and TFLite) files go through Core.read_model, the frontend alone; convert_model adds
        # its own graph transformations, after which NNCF placed quantizers less well: on the bundled
        # digits CNN 293/300 correct vs 296/300 (= float) with the same data and settings.
        if Path(src).suffix.lower() in (".onnx", ".tflite"):
            model = ov.Core().read_model(str(src))
        else:
            model = ov.convert_model(str(src))
        _source_output_names(model, job)
        model.reshape({name: ov.PartialShape(shape) for name, shape in job.input_shapes.items()})
    except Exception as exc:  # noqa: BLE001 - OpenVINO raises C++ exceptions as RuntimeError subclasses
        error = _frontend_error(ov, job, exc)
        if job.source.format != "tflite" or not _missing_ops(exc):
            raise error from None
        # An op OpenVINO's TFLite frontend has no translator for (IF: openWakeWord's two-stage
        # classifiers): the static ONNX form the pipeline makes for the ONNX profiles, whose
        # frontend has it. Said in the log and the route.
        job.log(f"{error.message.split(' (')[0]}: reading the model's static ONNX form instead")
        try:
            src = job.onnx()
            model = ov.Core().read_model(str(src))
            _source_output_names(model, job)
            model.reshape({name: ov.PartialShape(shape) for name, shape in job.input_shapes.items()})
        except Exception:  # noqa: BLE001 - the TFLite frontend's error is the one to report
            raise error from None
        stable_names(model)
        return model, str(src)
    stable_names(model, counters=job.source.format == "tflite")
    return model, str(src)


def _source_output_names(model, job: ConvertJob) -> None:
    """Name the model's outputs as the source's, so the gate and the manifest agree."""
    for port, spec in zip(model.outputs, job.source.outputs):
        if spec.name not in port.get_names():
            port.get_tensor().set_names({spec.name})


def _save(ov, qmodel, job: ConvertJob, made_by: str, hint: str) -> tuple[list[TensorSpec], list[TensorSpec], dict[str, int]]:
    """Check ``qmodel`` is int8, save it as the artifact's IR and return (inputs, outputs, the saved
    IR's int8 evidence).

    Raises:
        ConversionError: ``qmodel`` holds no FakeQuantize (``made_by`` put no int8 quantizer in).
    """
    evidence = int8_evidence(qmodel)
    if not evidence["FakeQuantize"]:
        raise ConversionError(f"{made_by} left no int8 quantizers ({evidence}).", hint)
    inputs, outputs = _specs(qmodel)
    ov.save_model(qmodel, str(job.workdir / XML_FILE), compress_to_fp16=False)
    return inputs, outputs, int8_evidence(ov.Core().read_model(str(job.workdir / XML_FILE)))


def stable_names(model, counters: bool = False) -> int:
    """Name every op the frontend left unnamed after its type and position (``Convolution@12``).

    An unnamed op's friendly name is its instance name (``Convolution_657``), a counter over every
    op this process has made: the next read of the same file names it differently, so a recipe's
    float layers (NNCF's ``IgnoredScope``) would silently match nothing in the candidate. The
    TFLite frontend leaves the convolution of each Conv2D + bias unnamed, and names the ops it adds
    itself (no tensor of the file is theirs) after such a counter (``Gather_5535``, a folded
    Constant): with ``counters``, those are renamed too.

    Returns:
        How many ops were renamed.
    """
    taken = {op.get_friendly_name() for op in model.get_ops()}
    renamed = 0
    for i, op in enumerate(model.get_ordered_ops()):
        friendly = op.get_friendly_name()
        tensors = {n for port in op.outputs() for n in port.get_names()}
        if friendly != op.get_name() and not (counters and friendly not in tensors and re.search(r"_\d+$", friendly)):
            continue
        name = f"{op.get_type_name()}@{i}"
        while name in taken:
            name += "'"
        op.set_friendly_name(name)
        taken.add(name)
        renamed += 1
    return renamed


def _has_if(job: ConvertJob) -> bool:
    """Whether the ONNX source has ``If`` nodes in its main graph (read once per job cache: every
    recovery candidate reads the model)."""
    if "source_has_if" not in job.cache:
        import onnx

        try:
            graph = onnx.load(str(job.source.path), load_external_data=False).graph
            job.cache["source_has_if"] = any(n.op_type == "If" for n in graph.node)
        except Exception:  # noqa: BLE001 - OpenVINO reports an unreadable file itself
            job.cache["source_has_if"] = False
    return job.cache["source_has_if"]


def _missing_ops(exc: BaseException) -> list[str]:
    """The ops an OpenVINO frontend error says it has no translator for."""
    return re.findall(r"No (?:translator|conversion rule) found for (\S+?)(?: node)?\.", str(exc))


def _frontend_error(ov, job: ConvertJob, exc: BaseException) -> ConversionError:
    """OpenVINO's failure in one line: the op it has no translator for, and who can run the model instead."""
    missing = _missing_ops(exc)
    name = Path(job.source.path).name
    if missing:
        hint = ("LiteRT runs TFLite custom ops: the TFLite formats (profiles arm-cpu, coral-edgetpu) still convert."
                if job.source.format == "tflite" else "Replace the op before export, or target a profile whose runtime has it.")
        return ConversionError(f"OpenVINO {ov.get_version().split('-')[0]} cannot read op {', '.join(sorted(set(missing)))} "
                               f"of {name} (its {job.source.format} frontend has no translator for it).", hint)
    return tool_error("ov-frontend", exc, f"OpenVINO could not convert {name}", "An op may be unsupported by OpenVINO's frontend.")


def _specs(model) -> tuple[list[TensorSpec], list[TensorSpec]]:
    def spec(port, kind: str) -> TensorSpec:
        ps = port.get_partial_shape()
        if not ps.is_static:
            raise ConversionError(f"OpenVINO {kind} '{port.get_any_name()}' is not static after reshape: {ps}.",
                                  "Pass --input-shape for every dynamic dim.")
        return TensorSpec(port.get_any_name(), [int(d) for d in ps.to_shape()],
                          _OV_DTYPES.get(port.get_element_type().get_type_name(), "float32"))

    return [spec(p, "input") for p in model.inputs], [spec(p, "output") for p in model.outputs]


def int8_evidence(model) -> dict[str, int]:
    """Count FakeQuantize ops and int8/uint8 constants in the quantized graph."""
    ops = list(model.get_ops())
    fq = sum(1 for op in ops if op.get_type_name() == "FakeQuantize")
    low = sum(1 for op in ops if op.get_type_name() == "Constant"
              and op.get_output_element_type(0).get_type_name() in ("i8", "u8"))
    return {"FakeQuantize": fq, "int8_constants": low}


def convert(job: ConvertJob) -> FormatResult:
    """Convert and quantize the source to an int8 OpenVINO IR in ``job.workdir``.

    Raises:
        ConversionError: conversion, reshape or quantization failed, or the result is not int8.
    """
    from .sources import refuse_quantized

    ov = require("openvino", "OpenVINO IR conversion")
    nncf = require("nncf", "OpenVINO int8 quantization")
    # one answer for a quantized source: NNCF would quantize its int8 weights again, without a word
    refuse_quantized(job.source, "int8 OpenVINO IR")
    model, read_from = _read(job)
    names = [p.get_any_name() for p in model.inputs]
    # NNCF feeds each item to the model as-is: a dict keyed by input name works for any input count.
    calib = nncf.Dataset([{n: feed[n] for n in names} for feed in job.calib])
    preset = getattr(nncf.QuantizationPreset, job.targets.nncf.preset)
    target = getattr(nncf.TargetDevice, job.targets.nncf.target_device)
    validation_fn = job.options.get("validation_fn")
    n = len(job.calib)
    # The profile's calibration method picks NNCF's activation range estimator. NNCF's own default
    # averages per-sample min/max, which clips small tensors (a [1,4] side input, a pooled vector)
    # hard; "minmax" means the global range, as ONNX Runtime's MinMax calibrator uses.
    from nncf.openvino.quantization.backend_parameters import BackendParameters
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, OverflowFix
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet

    # "median" (recovery only): the median over samples of each sample's min and max - outliers of a
    # few samples cut at min/max cost. BlazeFace full range (docs/accuracy-wider.md): gate score
    # error 0.21 -> 0.09; the quantile estimator reached 0.105 and quantized in 16.7 s against 4.9 s.
    estimators = {"minmax": RangeEstimatorParametersSet.MINMAX, "percentile": RangeEstimatorParametersSet.MEAN_QUANTILE,
                  "entropy": RangeEstimatorParametersSet.HISTOGRAM, "median": RangeEstimatorParametersSet.MEDIAN_MINMAX}
    recipe = job.recipe
    method = recipe.method(job.profile)
    if method not in estimators:
        raise ConversionError(f"Calibration method '{method}' is not one NNCF offers here (minmax, percentile, entropy, median).")
    overflow = job.targets.nncf.overflow_fix
    whole = not recipe.float_nodes and not recipe.float_ops and validation_fn is None
    # Quantized whole, its weights stay FakeQuantize (NNCF compresses them to int8 constants at the
    # end) until the model is cached for keep_float, as NNCF's accuracy control keeps them.
    advanced = AdvancedQuantizationParameters(activations_range_estimator_params=estimators[method],
                                              overflow_fix=getattr(OverflowFix, overflow) if overflow else None,
                                              backend_params={BackendParameters.COMPRESS_WEIGHTS: False} if whole else {})
    ignored = None
    if recipe.float_nodes or recipe.float_ops:
        ignored = nncf.IgnoredScope(names=list(recipe.float_nodes), types=list(recipe.float_ops), validate=False)
    fast_bc = recipe.option("bias_correction", "fast") != "full"
    derived, whole_key = None, recipe.whole_key("openvino-ir", job.profile)
    if validation_fn is None and recipe.float_nodes and not recipe.float_ops and whole_key in job.cache:
        try:
            with quiet(Path(job.scratch) / "nncf.log"):
                derived = keep_float(*job.cache[whole_key], set(recipe.float_nodes))
        except Exception as exc:  # noqa: BLE001 - NNCF internals; IgnoredScope below is the fallback
            job.log(f"reverting layers in the quantized model failed ({type(exc).__name__}: {str(exc)[:120]}); "
                    "quantizing again with them ignored")
    if derived is not None:
        job.log(f"{len(recipe.float_nodes)} layer(s) float: NNCF's quantizers at their inputs removed from the model "
                f"quantized whole ({method}), their weights and biases restored ({len(derived[1])} op(s) float)")
        return _result(ov, nncf, job, derived[0], read_from, "post-training", n, preset, target, method, fast_bc,
                       overflow, derived[1])
    if validation_fn is not None:
        job.log(f"nncf.quantize_with_accuracy_control ({n} samples, target {target.value})")
    else:
        job.log(f"nncf.quantize ({n} samples, subset_size={n}, target {target.value}, preset {preset.value}, {method}"
                + ("" if fast_bc else ", full bias correction")
                + (f", {len(recipe.float_nodes)} layer(s) float" if recipe.float_nodes else "") + ")")
    fmodel = None
    try:
        # NNCF draws progress bars and logs each step: they go to a log in scratch; our one line stays.
        with quiet(Path(job.scratch) / "nncf.log"):
            if validation_fn is not None:
                valid = nncf.Dataset([{k: feed[k] for k in names} for feed in job.holdout])
                qmodel = nncf.quantize_with_accuracy_control(
                    model, calib, valid, validation_fn, max_drop=float(job.options.get("max_drop", 0.01)),
                    preset=preset, target_device=target, subset_size=n, advanced_quantization_parameters=advanced)
                mode = "accuracy-control"
            else:
                fmodel = model.clone() if whole else None  # the float model keep_float restores from
                model_type = nncf.ModelType.TRANSFORMER if recipe.option("model_type") == "transformer" else None
                qmodel = nncf.quantize(model, calib, preset=preset, target_device=target, subset_size=n,
                                       fast_bias_correction=fast_bc, ignored_scope=ignored, model_type=model_type,
                                       advanced_parameters=advanced)
                mode = "post-training"
    except Exception as exc:  # noqa: BLE001 - NNCF raises many types
        if "dataset must not be empty" in str(exc) and any(op.get_type_name() == "If" for op in model.get_ordered_ops()):
            return _untaken_branch(job, ov)
        raise tool_error("nncf", exc, "NNCF quantization failed",
                         "NNCF could not quantize this graph as it is: keep the failing layers float (--float-nodes), "
                         "or use another format (onnx-qdq, tflite-int8).") from None
    if fmodel is not None:
        # quantized whole: a mixed candidate of this calibration reverts layers in it (keep_float)
        job.cache[whole_key] = (qmodel.clone(), fmodel)
        compress_quantize_weights_transformation(qmodel)
    return _result(ov, nncf, job, qmodel, read_from, mode, n, preset, target, method, fast_bc, overflow, None)


def keep_float(qmodel, fmodel, names: set[str]):
    """``names`` (op friendly names) reverted to float in ``qmodel``, the model NNCF quantized whole,
    as NNCF's own accuracy control reverts them (``quantize_with_accuracy_control``): each named
    op's group of quantizers (the FakeQuantize ops at its inputs and those that only feed the same
    float path) is removed, and the weights and biases of every op the group covers are restored
    from ``fmodel`` (bias correction and weight rounding undone). An op sharing a removed quantizer
    with a named one goes float too: it is in the returned list.

    A candidate then costs about its gate, where quantizing again with an ``IgnoredScope``
    collects every statistic anew: BlazeFace full range intel-cpu 1.3-1.6 CPU s per mixed candidate
    (0.9 of it the gate) against 7.5 for its median-ranges candidate (AVX-512 VNNI host). A named op in no quantizer group (a Pad between a Relu's
    quantizer and its readers) is float in the quantized model already and is listed as such.

    Returns:
        (the edited model, names of the ops now float), or None where no named op is quantized at
        all, or a reverted op's weights cannot be restored (the IgnoredScope route then decides).
    """
    from nncf.common.factory import build_graph
    from nncf.common.quantization.quantizer_removal import revert_operations_to_floating_point_precision
    from nncf.quantization.advanced_parameters import RestoreMode
    from nncf.quantization.algorithms.accuracy_control.openvino_backend import OVAccuracyControlAlgoBackend as Backend
    from nncf.quantization.algorithms.accuracy_control.ranker import Ranker

    qmodel = qmodel.clone()
    qgraph = build_graph(qmodel)
    groups = Ranker(1, None, Backend, None).find_groups_of_quantizers_to_rank(qgraph)

    def producers(group) -> set[str]:  # the ops whose outputs the group's quantizers quantize
        return {p.node_name for q in group.quantizers for p in qgraph.get_previous_nodes(q)}

    # A named op's group: the quantizers at its inputs (it is among the group's operations) or at
    # its output (the sensitivity ranking names the op whose output tensor NNCF quantizes).
    chosen = [g for g in groups if names & ({op.node_name for op in g.operations} | producers(g))]
    quantizable = {op.node_name for g in groups for op in g.operations} | {p for g in groups for p in producers(g)}
    if not chosen or not names & quantizable:
        return None
    covered = {op.node_name for g in chosen for op in g.operations}
    # The float weights and biases of the ops to revert (NNCF's accuracy control collects them for
    # every op; an op whose quantized form NNCF describes without its weight ports cannot be
    # restored: the IgnoredScope route then).
    fgraph = build_graph(fmodel)
    for name in covered:
        node, qnode = fgraph.get_node_by_name(name), qgraph.get_node_by_name(name)
        if Backend.is_node_with_bias(node, fgraph):
            qnode.attributes["original_bias"] = Backend.get_bias_value(node, fgraph, fmodel)
        if Backend.is_node_with_weight(node):
            if qnode.layer_attributes is None:
                return None
            for port_id in Backend.get_weight_tensor_port_ids(qnode):
                qnode.attributes[f"original_weight.{port_id}"] = Backend.get_weight_value(node, fmodel, port_id)
    quantizers = list({q.node_name: q for g in chosen for q in g.quantizers}.values())
    operations = list({op.node_name: op for g in chosen for op in g.operations}.values())
    edited = revert_operations_to_floating_point_precision(
        operations, quantizers, qmodel, qgraph, RestoreMode.ACTIVATIONS_AND_WEIGHTS,
        Backend.get_op_with_weights_metatypes(), Backend.is_node_with_weight, Backend.get_weight_tensor_port_ids)
    compress_quantize_weights_transformation(edited)  # as nncf.quantize leaves int8 weights
    return edited, sorted(covered | (names - quantizable))


def _result(ov, nncf, job: ConvertJob, qmodel, read_from: str, mode: str, n: int, preset, target, method: str,
            fast_bc: bool, overflow, reverted: list[str] | None) -> FormatResult:
    """Save ``qmodel`` as the artifact and describe it."""
    recipe = job.recipe
    inputs, outputs, evidence_saved = _save(ov, qmodel, job, "NNCF" if reverted is None else "Reverting the float layers",
                                            "The model may contain no quantizable ops (Convolution, MatMul...)."
                                            if reverted is None else "Every quantized op was among the float layers.")
    result = FormatResult(
        model_file=XML_FILE, inputs=inputs, outputs=outputs, extra_files=[(BIN_FILE, "weights")], precision="int8",
        tools={"openvino": ov.get_version(), "nncf": nncf.__version__},
        route=f"{job.source.format} -> openvino.{'Core.read_model' if Path(read_from).suffix.lower() in ('.onnx', '.tflite') else 'convert_model'}"
              f"({Path(read_from).name}) -> reshape static -> nncf {mode}",
        backend_options={"openvino": {"nncf_mode": mode, "nncf_subset_size": n, "nncf_preset": preset.value,
                                      "nncf_target_device": target.value,
                                      "nncf_activation_range": method, "nncf_bias_correction": "fast" if fast_bc else "full",
                                      "nncf_model_type": recipe.option("model_type") or "default",
                                      "nncf_overflow_fix": (overflow or "default").lower(),
                                      **({"inference_precision": "f32"} if recipe.option("inference_precision") == "f32"
                                         or recipe.float_nodes or recipe.float_ops else {}),
                                      "float_nodes": list(recipe.float_nodes), "int8_evidence": evidence_saved,
                                      "weights_compressed_to_fp16": False}},
    )
    if reverted is not None:  # how the recipe's float layers were kept float, and which ops went float
        result.route += f" -> {len(reverted)} op(s) reverted to float (NNCF accuracy control's quantizer groups)"
        result.backend_options["openvino"]["float_layers"] = {
            "how": "quantized whole, then each float layer's group of quantizers removed and its weights and "
                   "biases restored (as nncf.quantize_with_accuracy_control reverts a layer)",
            "layers": reverted}
    return result


def _untaken_branch(job: ConvertJob, ov) -> FormatResult:
    """NNCF calibrates each branch of an ``If`` on the samples that take it and refuses a branch no
    calibration sample took (openWakeWord's verifier head runs only on positives). ONNX Runtime's
    quantizer leaves ``If`` branches float: quantize the static ONNX form with it at this profile's
    settings (uint8 activations, per-channel weights) and let OpenVINO read the QDQ model (its
    frontend makes the Q/DQ pairs FakeQuantize, as NNCF's own output has). The untaken branch
    stays float and the manifest and the log say so; positives in the calibration data let NNCF
    quantize it instead.

    Raises:
        ConversionError: either step failed, or OpenVINO's reading holds no int8 quantizer.
    """
    import dataclasses

    from . import onnx_qdq

    job.log("NNCF refused an If branch no calibration sample took: quantizing with ONNX Runtime, the branches float")
    # Weights in 7 bits (ORT's reduce_range), as NNCF's overflow fix makes them: x86 CPUs without
    # VNNI would saturate full-range int8 products (see targets.NNCFConfig.overflow_fix).
    reduce = job.targets.nncf.overflow_fix == "ENABLE"
    recipe = dataclasses.replace(job.recipe, options=(*job.recipe.options, ("reduce_range", reduce)))
    sub = dataclasses.replace(job, workdir=Path(job.scratch) / "onnx-qdq-for-openvino", cache={}, recipe=recipe)
    sub.workdir.mkdir(parents=True, exist_ok=True)
    qdq = onnx_qdq.convert(sub)
    hint = "Add calibration samples that take every branch of the If, so that NNCF can quantize it."
    try:
        qmodel = ov.Core().read_model(str(sub.workdir / qdq.model_file))
        _source_output_names(qmodel, job)
        stable_names(qmodel)
    except Exception as exc:  # noqa: BLE001 - OpenVINO raises C++ exceptions as RuntimeError subclasses
        raise ConversionError(f"OpenVINO could not read the ONNX Runtime QDQ model: {str(exc).strip()[:300]}", hint) from None
    inputs, outputs, evidence_saved = _save(ov, qmodel, job, "OpenVINO's reading of the QDQ model", hint)
    qdq_opts = qdq.backend_options["onnx_qdq"]
    return FormatResult(
        model_file=XML_FILE, inputs=inputs, outputs=outputs, extra_files=[(BIN_FILE, "weights")], precision="int8",
        tools={"openvino": ov.get_version(), **qdq.tools},
        route=f"{qdq.route} -> openvino.Core.read_model (NNCF refused an If branch no calibration sample took)",
        warnings=["no calibration sample took one branch of the model's If: ONNX Runtime quantized it and that "
                  "branch stayed float (NNCF needs samples on every branch)"],
        backend_options={"openvino": {"quantizer": "onnxruntime", "why": "no calibration sample took one branch of an If",
                                      "calibration_method": qdq_opts["calibration_method"],
                                      "activation_dtype": qdq_opts["activation_dtype"],
                                      "per_channel": qdq_opts["per_channel"], "weights_7bit": reduce,
                                      "float_nodes": qdq_opts["float_nodes"],
                                      "int8_evidence": evidence_saved,
                                      "weights_compressed_to_fp16": False}},
    )


__all__ = ["convert", "int8_evidence"]
