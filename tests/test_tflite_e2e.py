"""`edge-sdk convert --profile coral-edgetpu --profile arm-cpu` from a Keras model, its ONNX form
and a float TFLite: int8 TFLite artifacts with static shapes, the profile's I/O dtypes, an Edge
TPU pre-check report and accuracy numbers; a model onnx2tf cannot convert ends in one message.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import models
import test_tflite_models as tm
from edge_sdk.profiles import resolve_profile

pytestmark = pytest.mark.slow

PROFILES = ["coral-edgetpu", "arm-cpu"]


@pytest.fixture(scope="session")
def e2e_inputs(tmp_path_factory):
    base = tmp_path_factory.mktemp("tflite_e2e")
    return {
        "keras": models.keras_cnn(base / "cnn.keras"),
        "onnx": models.onnx_cnn(base / "cnn.onnx"),
        "tflite": models.float_tflite(base / "cnn.tflite"),
        "calib": models.write_image_folder(base / "calib", n=40),
        "base": base,
    }


@pytest.fixture(scope="session")
def cli_runs(e2e_inputs):
    """One `edge-sdk convert` per source format, both profiles at once."""
    from conftest import run_cli

    out = {}
    for fmt in ("keras", "onnx", "tflite"):
        dest = e2e_inputs["base"] / f"out_{fmt}"
        proc = run_cli("convert", str(e2e_inputs[fmt]), *sum((["--profile", p] for p in PROFILES), []),
                       "--out", str(dest), "--calib", str(e2e_inputs["calib"]))
        out[fmt] = (proc, dest)
    return out


@pytest.mark.parametrize("fmt", ["keras", "onnx", "tflite"])
def test_cli_writes_int8_tflite_for_both_profiles(cli_runs, fmt):
    from ai_edge_litert.interpreter import Interpreter

    proc, dest = cli_runs[fmt]
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in PROFILES:
        prof = resolve_profile(name)
        folder = dest / name
        manifest = json.loads((folder / "manifest.json").read_text())
        art = next(a for a in manifest["artifacts"] if a["format"] == "tflite-int8" and a["role"] == "model")
        interp = Interpreter(model_path=str(folder / art["path"]))
        interp.allocate_tensors()
        nat_in, nat_out = interp.get_input_details()[0], interp.get_output_details()[0]
        assert np.dtype(nat_in["dtype"]).name == prof.quantization.input_dtype
        assert np.dtype(nat_out["dtype"]).name == prof.quantization.output_dtype
        assert all(d > 0 for d in nat_in["shape_signature"])
        spec = manifest["inputs"][0]
        assert spec["dtype"] == prof.quantization.input_dtype and all(d > 0 for d in spec["shape"])
        if spec["dtype"] == "uint8":
            assert spec["quantization"]["scale"] > 0 and spec["quantization"]["dtype"] == "uint8"
        gate = manifest["accuracy"]["formats"]["tflite-int8"]
        assert gate["passed"] and gate["backend"] == "litert"
        metrics = next(iter(gate["outputs"].values()))
        assert metrics["cosine"] >= prof.accuracy.min_cosine and metrics["top1_agreement"] >= 0.9
        route = manifest["backend_options"]["routes"]["tflite-int8"]
        assert "TFLiteConverter" in route or "MLIR quantizer" in route
        if name == "coral-edgetpu":
            pre = manifest["backend_options"]["edgetpu_precheck"]
            assert pre["ok"] and pre["tpu_fraction"] == 1.0
            assert manifest["backend_options"]["edgetpu"]["compiled"] is False
            assert "Edge TPU pre-check" in proc.stderr and "Edge TPU-ready but not compiled" in proc.stderr
    if fmt == "onnx":
        assert "onnx2tf" in manifest["tools"]


def test_tflite_source_routes_are_recorded(cli_runs):
    """Both TFLite profiles quantize the float TFLite itself; no tf2onnx/onnx2tf detour."""
    _, dest = cli_runs["tflite"]
    for name in ("arm-cpu", "coral-edgetpu"):
        m = json.loads((dest / name / "manifest.json").read_text())
        assert m["backend_options"]["routes"]["tflite-int8"].startswith("tflite (float) -> LiteRT calibration")
        assert "onnx2tf" not in m["tools"]
    coral = json.loads((dest / "coral-edgetpu" / "manifest.json").read_text())
    assert coral["backend_options"]["edgetpu_precheck"]["ok"] and "tf2onnx" not in coral["tools"]  # nothing needed ONNX


def test_python_api_edge_tpu_leaky_model(tmp_path, e2e_inputs):
    """edge_sdk.convert: LEAKY_RELU, outside the Edge TPU set, is rewritten into ops it maps (the
    route says so); every op maps and the artifact passes its gate."""
    import edge_sdk

    model = tm.keras_cnn(tmp_path / "leaky.keras", hw=32, extra="leaky")
    summary = edge_sdk.convert(str(model), ["coral-edgetpu"], str(tmp_path / "out"), calib=str(e2e_inputs["calib"]),
                               progress=lambda _line: None)
    assert summary.ok
    manifest = json.loads((tmp_path / "out" / "coral-edgetpu" / "manifest.json").read_text())
    pre = manifest["backend_options"]["edgetpu_precheck"]
    assert pre["issues"] == [] and pre["tpu_fraction"] == 1.0, pre
    assert "LEAKY_RELU as relu(x)" in manifest["backend_options"]["routes"]["tflite-int8"]


def test_cli_unconvertible_onnx_is_one_message_and_no_folder(tmp_path, cli):
    model = tm.onnx_cnn(tmp_path / "odd.onnx", hw=32, unsupported_castlike=True)
    feeds = np.stack([a[0] for a in tm.images(12, [1, 3, 32, 32])])
    npz = models.write_npz(tmp_path / "calib.npz", {"input": feeds})
    out = tmp_path / "out"
    proc = cli("convert", str(model), "--profile", "coral-edgetpu", "--out", str(out), "--calib", str(npz))
    assert proc.returncode == 6, proc.stderr[-2000:]
    assert "CastLike" in proc.stderr and "odd_castlike" in proc.stderr and "onnx-qdq" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) < 40
    assert not out.exists()


def test_two_input_two_output_onnx_keeps_source_layouts(tmp_path):
    """onnx2tf makes the rank-4 output channel-last; the artifact gives it back as the source had it."""
    import edge_sdk
    from ai_edge_litert.interpreter import Interpreter

    model = models.two_io_onnx(tmp_path / "two.onnx")
    npz = models.write_npz(tmp_path / "calib.npz", models.two_io_feeds(n=40, height=24))
    summary = edge_sdk.convert(str(model), PROFILES, str(tmp_path / "out"), calib=str(npz),
                               input_shapes=["image:1,3,24,16"], progress=lambda _line: None)
    assert summary.ok
    for name in PROFILES:
        folder = tmp_path / "out" / name
        manifest = json.loads((folder / "manifest.json").read_text())
        assert [(t["name"], t["shape"]) for t in manifest["inputs"]] == [("image", [1, 3, 24, 16]), ("aux", [1, 4])]
        assert [(t["name"], t["shape"]) for t in manifest["outputs"]] == [("logits", [1, 5]),
                                                                          ("features", [1, 8, 24, 16])]
        gate = manifest["accuracy"]["formats"]["tflite-int8"]
        assert gate["passed"] and set(gate["outputs"]) == {"logits", "features"}
        interp = Interpreter(model_path=str(folder / "model.tflite"))
        assert sorted(tuple(d["shape"]) for d in interp.get_output_details()) == [(1, 5), (1, 8, 24, 16)]


def test_savedmodel_source_for_coral(tmp_path, e2e_inputs):
    import edge_sdk

    model = models.savedmodel(tmp_path / "sm")
    summary = edge_sdk.convert(str(model), ["coral-edgetpu"], str(tmp_path / "out"), calib=str(e2e_inputs["calib"]),
                               progress=lambda _line: None)
    assert summary.ok
    manifest = json.loads((tmp_path / "out" / "coral-edgetpu" / "manifest.json").read_text())
    assert manifest["backend_options"]["routes"]["tflite-int8"].startswith("savedmodel -> tf.function")
    assert [t["dtype"] for t in manifest["inputs"] + manifest["outputs"]] == ["uint8", "uint8"]
    assert manifest["accuracy"]["formats"]["tflite-int8"]["passed"]
