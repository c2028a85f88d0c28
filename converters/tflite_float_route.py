"""Float TFLite -> full-integer int8 TFLite with ai-edge-quantizer (static int8, calibrated).

The recipe quantizes every op's activations (asymmetric, per tensor) and weights (symmetric,
per channel, or per tensor when the profile says so) to int8, and leaves the model's INPUT and
OUTPUT tensors float, so the quantizer puts QUANTIZE/DEQUANTIZE ops at the boundaries. Those
boundary ops are what LiteRT's model-interface tool rewrites to give integer I/O (uint8 for the
Edge TPU). Float TFLite files from model zoos usually carry a dynamic batch (``shape_signature``
-1); the model is made static first by writing the job's static shapes into the flatbuffer,
which is valid only when they equal the file's default shapes (checked).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from edge_sdk.errors import ConversionError

#: TFLite TensorType codes used by the model-interface tool.
_TENSOR_TYPE = {"float32": 0, "uint8": 3, "int8": 9}


def _static_model(model: bytes, input_shapes: dict[str, list[int]]) -> bytes:
    """Drop the dynamic dims of a float TFLite model (every tensor's ``shape_signature``).

    Raises:
        ConversionError: an input's static shape differs from the model's default shape, which
            would need shape propagation this route does not do.
    """
    import flatbuffers

    from edge_sdk._deps import require

    schema = require("ai_edge_litert.schema_py_generated", "rewriting TFLite models", extra="litert")
    try:
        m = schema.ModelT.InitFromPackedBuf(bytearray(model), 0)
    except Exception as exc:  # noqa: BLE001 - flatbuffers raises assorted errors on garbage
        raise ConversionError(f"not a readable TFLite model ({type(exc).__name__}).") from None
    for sg in m.subgraphs:
        for idx in sg.inputs:
            t = sg.tensors[idx]
            name = t.name.decode() if isinstance(t.name, bytes) else t.name
            want = input_shapes.get(name)
            if want is not None and list(t.shape) != list(want):
                raise ConversionError(f"Input '{name}': static shape {want} differs from the model's default shape "
                                      f"{list(t.shape)}.")
        for t in sg.tensors:
            t.shapeSignature = None  # the default shape (batch 1) becomes the only shape
    builder = flatbuffers.Builder(len(model) + 1024)
    builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _recipe(per_tensor: bool) -> list[dict]:
    op_config = {
        "activation_tensor_config": {"num_bits": 8, "symmetric": False, "granularity": "TENSORWISE",
                                     "dtype": "INT", "block_size": 0},
        "weight_tensor_config": {"num_bits": 8, "symmetric": True, "dtype": "INT", "block_size": 0,
                                 "granularity": "TENSORWISE" if per_tensor else "CHANNELWISE"},
        "compute_precision": "INTEGER", "explicit_dequantize": False, "skip_checks": False,
    }
    return [
        {"regex": ".*", "operation": "*", "algorithm_key": "min_max_uniform_quantize", "op_config": op_config},
        # Float model I/O: the quantizer adds QUANTIZE/DEQUANTIZE at the boundaries.
        {"regex": ".*", "operation": "INPUT", "algorithm_key": "no_quantize", "op_config": {}},
        {"regex": ".*", "operation": "OUTPUT", "algorithm_key": "no_quantize", "op_config": {}},
    ]


def quantize_float_tflite(model: bytes, input_shapes: dict[str, list[int]], calib: list[dict],
                          per_tensor: bool, input_dtype: str, output_dtype: str) -> bytes:
    """Static int8 quantization of a float TFLite model, with the profile's I/O dtypes.

    Args:
        model: The float TFLite flatbuffer.
        input_shapes: Static shape of every input, keyed by TFLite tensor name.
        calib: Calibration feeds keyed by TFLite tensor name.
        per_tensor: Per-tensor weights (the Edge TPU) instead of per-channel.
        input_dtype / output_dtype: ``float32``, ``int8`` or ``uint8``.

    Returns:
        The int8 model.

    Raises:
        ConversionError: no signature to calibrate through, the quantizer failed, or the I/O
            rewrite failed.
    """
    from edge_sdk._deps import require

    require("ai_edge_quantizer", "int8 quantization of float TFLite models")
    from ai_edge_litert.interpreter import Interpreter
    from ai_edge_quantizer import quantizer

    static = _static_model(model, input_shapes)
    sigs = Interpreter(model_content=static).get_signature_list()
    if not sigs:
        raise ConversionError("The float TFLite model has no signature for ai-edge-quantizer to calibrate through.")
    key = next(iter(sigs))
    runner = Interpreter(model_content=static).get_signature_runner(key)
    by_tensor = {d["name"]: sig_name for sig_name, d in runner.get_input_details().items()}
    dataset = []
    for feed in calib:
        dataset.append({by_tensor.get(n, n): np.asarray(a, np.float32) for n, a in feed.items()})
    try:
        qt = quantizer.Quantizer(bytearray(static), _recipe(per_tensor))
        result = qt.quantize(qt.calibrate({key: dataset}))
        quantized = bytes(result.quantized_model)
    except Exception as exc:  # noqa: BLE001 - the quantizer raises ValueError/RuntimeError/KeyError
        first = next((ln for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        raise ConversionError(f"ai-edge-quantizer could not quantize the model: {first[:300]}") from None
    if (input_dtype, output_dtype) == ("float32", "float32"):
        return quantized
    if input_dtype == "float32" or output_dtype == "float32":
        raise ConversionError(f"Mixed float/integer I/O ({input_dtype} in, {output_dtype} out) is not supported "
                              "for float TFLite sources.")
    iface = require("ai_edge_litert._pywrap_modify_model_interface", "integer model I/O", extra="litert")
    with tempfile.TemporaryDirectory(prefix="edge-sdk-tflite-") as tmp:
        src, dst = Path(tmp) / "in.tflite", Path(tmp) / "out.tflite"
        src.write_bytes(quantized)
        rc = iface.modify_model_interface(str(src), str(dst), _TENSOR_TYPE[input_dtype], _TENSOR_TYPE[output_dtype])
        if rc != 0 or not dst.is_file():
            raise ConversionError(f"LiteRT could not give the int8 model {input_dtype}/{output_dtype} I/O (code {rc}).")
        return dst.read_bytes()
