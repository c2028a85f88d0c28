"""Every artifact the converters produce loads and runs through the facade, equal to the raw runtime.

The bundled digits model is converted for every built-in profile once per session (real
onnx2tf / TFLiteConverter / quantize_static / OpenVINO), then each format of each profile is
run through ``edge_sdk.load`` on this machine's CPU path and compared, bit for bit, with the
raw runtime call on the same input (quantized by hand where the artifact's I/O is integer).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import edge_sdk
from edge_sdk.errors import DelegateUnavailableError
from edge_sdk.manifest import read_manifest
from edge_sdk.profiles import builtin_profiles

pytestmark = pytest.mark.slow

DIGITS = Path(__file__).resolve().parents[1] / "examples" / "digits"
CPU_STEP = {"tflite-int8": ("litert", "xnnpack"), "onnx-qdq": ("onnxruntime", "CPUExecutionProvider"),
            "openvino-ir": ("openvino", "CPU")}
PAIRS = [(p, f) for p, prof in sorted(builtin_profiles().items()) for f in prof.artifact.formats]


@pytest.fixture(scope="session")
def converted(tmp_path_factory):
    from edge_sdk.preprocess import from_dict

    out = tmp_path_factory.mktemp("rt_converted") / "out"
    spec = from_dict(json.loads((DIGITS / "preprocess.json").read_text()))
    edge_sdk.convert(str(DIGITS / "digits_cnn.onnx"), sorted(builtin_profiles()), str(out), calib=str(DIGITS / "calib"),
                     preprocess=spec, progress=None)
    return out


def raw_run(fmt: str, path: Path, x: np.ndarray) -> np.ndarray:
    """The runtime's own API, nothing from edge_sdk."""
    if fmt == "tflite-int8":
        from ai_edge_litert.interpreter import Interpreter

        it = Interpreter(model_path=str(path))
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        return it.get_tensor(it.get_output_details()[0]["index"])
    if fmt == "onnx-qdq":
        import onnxruntime as ort

        so = ort.SessionOptions()  # as the runner opens it: int8 x int8 kept on x86 (no U8S8 saturation)
        so.add_session_config_entry("session.qdqisint8allowed", "1")
        s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        return s.run(None, {s.get_inputs()[0].name: x})[0]
    import openvino as ov

    return ov.Core().compile_model(str(path), "CPU").create_infer_request().infer([x])[0]


@pytest.mark.parametrize("profile, fmt", PAIRS)
def test_converted_artifact_equals_raw_runtime(converted, profile, fmt):
    folder = converted / profile
    backend, device = CPU_STEP[fmt]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an explicit CPU choice is not a fallback: no warning
        model = edge_sdk.load(folder, backend=backend, device=device)
    with model:
        spec, ospec = model.inputs[0], model.outputs[0]
        x = np.random.default_rng(1).uniform(0, 1, spec.shape).astype(np.float32)
        got = model.infer(x).outputs[ospec.name]
        feed = x
        if spec.quantization is not None and spec.dtype in ("int8", "uint8"):
            q, info = spec.quantization, np.iinfo(spec.dtype)
            feed = np.clip(np.rint(x / np.float32(q.scale)) + q.zero_point, info.min, info.max).astype(spec.dtype)
        want = raw_run(fmt, folder / read_manifest(folder).artifact(fmt).path, feed)
        if ospec.quantization is not None and ospec.dtype in ("int8", "uint8"):
            want = (want.astype(np.float32) - ospec.quantization.zero_point) * np.float32(ospec.quantization.scale)
        np.testing.assert_array_equal(got, want)
        image = sorted(p for p in (DIGITS / "val").iterdir())[0]
        assert model.infer_image(image).outputs[ospec.name].shape == tuple(ospec.shape)


@pytest.mark.parametrize("profile", ["coral-edgetpu", "jetson-orin", "intel-npu"])
def test_strict_refuses_accelerator_profiles_here(converted, profile):
    from edge_sdk.runtimes.probe import probe_step

    first = builtin_profiles()[profile].runtime.chain[0]
    if probe_step(first.backend, first.accelerator).available:
        pytest.skip(f"this host has {first.backend}/{first.accelerator}")
    with pytest.raises(DelegateUnavailableError):
        edge_sdk.load(converted / profile, strict=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = edge_sdk.load(converted / profile)
    with model:
        assert model.fallback and len(caught) == 1
        assert model.infer_image(sorted((DIGITS / "val").iterdir())[0]).fallback
