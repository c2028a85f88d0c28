"""TensorFlow side of the ``tflite-int8`` format: trace at static shapes, freeze, quantize.

Shared by the Keras, SavedModel and ONNX (onnx2tf -> SavedModel) routes of
:mod:`.tflite_int8`: a model callable is traced into a ``tf.function`` with the job's static
input shapes, its variables are frozen to constants (the calibrator cannot read resource
variables), and ``tf.lite.TFLiteConverter`` quantizes it with a representative dataset made of
``job.calib``, with the profile's I/O dtypes, op set and weight granularity. The converter's
console chatter goes to a log in scratch.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from edge_sdk.errors import CalibrationError, ConversionError

from .base import ConvertJob
from .console import import_tensorflow, quiet


def integer_only(job: ConvertJob) -> bool:
    """A profile with an operator table (an accelerator) runs integer ops only."""
    ops = job.profile.operators
    return bool(ops.supported or ops.allowed_dtypes)


def sanitize(name: str) -> str:
    """A name TensorFlow accepts for an op/TensorSpec (``^[A-Za-z0-9.][A-Za-z0-9_.\\/>-]*$``)."""
    out = re.sub(r"[^A-Za-z0-9_.\-/]", "_", name)
    return out if out and out[0].isalnum() else f"x{out}"


def calib_arrays(job: ConvertJob, names: list[str], perms: dict[str, list[int]]) -> list[list[np.ndarray]]:
    """Calibration feeds as lists in model-input order, transposed where the route changed layout.

    Raises:
        CalibrationError: no feeds, or a feed lacks an input / has the wrong shape.
    """
    if not job.calib:
        raise CalibrationError("No calibration data for int8 TFLite conversion.",
                               "Pass --calib with images or an .npz, or --calib random for a smoke test.")
    out = []
    dtypes = input_dtypes(job)
    for k, feed in enumerate(job.calib):
        row = []
        for name in names:
            if name not in feed:
                raise CalibrationError(f"Calibration sample {k} has no input '{name}' (has: {', '.join(feed)}).")
            arr = np.asarray(feed[name], dtype=dtypes.get(name, np.float32))
            want = list(job.input_shapes[name])
            if list(arr.shape) != want:
                raise CalibrationError(f"Calibration sample {k} input '{name}' has shape {list(arr.shape)}, "
                                       f"expected {want}.")
            row.append(np.transpose(arr, perms[name]) if name in perms else arr)
        out.append(row)
    return out


def input_dtypes(job: ConvertJob) -> dict[str, np.dtype]:
    """The source's dtype per input: integer inputs (token ids, masks, a sample rate) stay integer."""
    return {s.name: np.dtype(s.dtype) for s in job.source.inputs}


def float_tf(job: ConvertJob, fn, arg_names: list[str], perms: dict[str, list[int]]) -> bytes:
    """Trace ``fn`` at static shapes, freeze it, and convert it to a float TFLite model.

    Quantization happens after, on the float TFLite itself (:mod:`.tflite_native`), so every
    TFLite route shares one calibrator, one quantizer and the recovery loop's recipes.

    Args:
        job: The job (profile, shapes).
        fn: A Python callable taking the inputs positionally (source order) and returning a list
            of outputs in source order.
        arg_names: Source input names, in order.
        perms: Layout permutations applied to inputs (their shapes are transposed).
    """
    tf = import_tensorflow("TFLite conversion")
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    shapes = {n: ([job.input_shapes[n][i] for i in perms[n]] if n in perms else list(job.input_shapes[n]))
              for n in arg_names}
    try:
        with quiet(Path(job.scratch) / "tflite_converter.log"):
            dtypes = input_dtypes(job)
            specs = [tf.TensorSpec(shapes[n], tf.as_dtype(dtypes.get(n, np.dtype(np.float32))), name=sanitize(n))
                     for n in arg_names]
            concrete = tf.function(fn, input_signature=specs).get_concrete_function()
            # Freezing turns variables into constants (resource variables would stay VAR_HANDLE ops).
            conv = tf.lite.TFLiteConverter.from_concrete_functions([convert_variables_to_constants_v2(concrete)])
            conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
            return conv.convert()
    except Exception as exc:  # noqa: BLE001 - TF raises ConverterError, RuntimeError, ValueError...
        from .tool_errors import tool_error

        raise tool_error("tflite", exc, f"TFLiteConverter could not make a TFLite model of {job.source.path.name}",
                         "An op named above has no TFLite builtin; use an ONNX or OpenVINO profile.") from None


def first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    picked = [ln for ln in lines if "error" in ln.lower() or "op" in ln.lower()] or lines or [type(exc).__name__]
    return picked[0][:400]


def outputs_in_order(result, names: list[str]) -> list:
    """Order a signature's output dict like the source outputs (by name, else by key order)."""
    if not isinstance(result, dict):
        return list(result) if isinstance(result, (list, tuple)) else [result]
    keys = list(result)
    picked = []
    for i, name in enumerate(names):
        key = name if name in result else sanitize(name) if sanitize(name) in result else None
        picked.append(result[key] if key is not None else result[sorted(keys)[i]])
    return picked


def from_savedmodel_dir(job: ConvertJob, path: Path, perms: dict[str, list[int]] | None = None,
                         onnx_ref: Path | None = None) -> bytes:
    """A float TFLite of a SavedModel's ``serving_default``; ``onnx_ref`` (onnx2tf routes) fixes output layouts."""
    tf = import_tensorflow("int8 TFLite conversion")

    perms = perms or {}
    try:
        loaded = tf.saved_model.load(str(path))
        sig = loaded.signatures["serving_default"]
    except (KeyError, OSError, ValueError) as exc:
        raise ConversionError(f"Cannot load SavedModel {path} with a 'serving_default' signature: "
                              f"{first_line(exc)}") from None
    sig_keys = list(sig.structured_input_signature[1])
    names = [s.name for s in job.source.inputs]
    keymap = {}
    for i, name in enumerate(names):
        # The key as given, as we sanitise names, as onnx2tf does (':' -> '__'), else by position.
        found = [k for k in (name, sanitize(name), name.replace(":", "__")) if k in sig_keys]
        keymap[name] = found[0] if found else sig_keys[i]
    out_names = [s.name for s in job.source.outputs]

    sig_specs = sig.structured_input_signature[1]
    # onnx2tf gives a scalar input (an int64 sample rate) a [None] signature: feed it as [1].
    ranks = {n: len(sig_specs[keymap[n]].shape) for n in names if sig_specs[keymap[n]].shape.rank is not None}
    lift = {n: ranks[n] for n in names if n in ranks and not job.input_shapes[n] and ranks[n] > 0}

    def raw(*args):
        args = [tf.reshape(a, [1] * lift[n]) if n in lift else a for n, a in zip(names, args)]
        return outputs_in_order(sig(**{keymap[n]: a for n, a in zip(names, args)}), out_names)

    out_perms = {}
    if onnx_ref is not None:
        from .onnx2tf_route import output_perms

        # One sample through both models says which outputs onnx2tf made channel-last.
        dtypes = input_dtypes(job)
        feed = {n: np.asarray(job.calib[0][n], dtypes[n]) if job.calib else
                np.full(job.input_shapes[n], 0.5 if dtypes[n].kind == "f" else 0, dtypes[n]) for n in names}
        tf_outs = raw(*[np.transpose(feed[n], perms[n]) if n in perms else feed[n] for n in names])
        out_perms = output_perms(onnx_ref, feed, [np.asarray(o) for o in tf_outs], out_names)

    def fn(*args):
        outs = raw(*args)
        # Back to the source layout: one manifest describes every format of a profile.
        return [tf.transpose(o, out_perms[i]) if i in out_perms else o for i, o in enumerate(outs)]

    model = float_tf(job, fn, names, perms)
    del loaded  # keep the SavedModel's variables alive until the model is frozen and converted
    return model
