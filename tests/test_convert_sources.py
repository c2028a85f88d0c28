"""Every source format (Keras, SavedModel, float TFLite, ONNX) converts for every profile this
issue covers, passes the gate on real calibration images, and loads in the real runtime."""

from __future__ import annotations

import numpy as np
import pytest

import edge_sdk
from edge_sdk.manifest import read_manifest

from models import cnn_feeds, float_tflite, keras_cnn, onnx_cnn, savedmodel, trained_cnn, write_image_folder

pytestmark = pytest.mark.slow
PROFILES = ["intel-cpu", "intel-npu", "jetson-orin"]
CPU = {"onnx-qdq": ("onnxruntime", "CPUExecutionProvider"), "openvino-ir": ("openvino", "CPU")}
BUILDERS = {"keras": (keras_cnn, "cnn.keras"), "savedmodel": (savedmodel, "cnn_savedmodel"),
            "tflite": (float_tflite, "cnn.tflite"), "onnx": (onnx_cnn, "cnn.onnx")}


@pytest.fixture(scope="session")
def cnn_images(tmp_path_factory):
    return write_image_folder(tmp_path_factory.mktemp("cnn_calib") / "images", n=100)


@pytest.fixture(scope="session", params=sorted(BUILDERS))
def converted(request, tmp_path_factory, cnn_images):
    kind = request.param
    root = tmp_path_factory.mktemp(f"src_{kind}")
    build, name = BUILDERS[kind]
    source = build(root / name)
    summary = edge_sdk.convert(source, PROFILES, root / "out", calib=cnn_images, progress=None)
    return kind, summary, root / "out"


def test_every_profile_passes_the_gate_with_static_int8_artifacts(converted):
    kind, summary, out = converted
    assert summary.source_format == kind and summary.ok
    for p in summary.profiles:
        assert p.gate == "passed", (kind, p.profile, p.accuracy)
        m = read_manifest(out / p.profile)
        assert m.source.format == kind
        assert [t.shape for t in m.inputs] == [[1, 32, 32, 3]] and [t.shape for t in m.outputs] == [[1, 10]]
        assert m.static_shapes["batch_fixed_to_profile"] == [m.inputs[0].name]
        assert all(a.precision == "int8" for a in m.artifacts)
        assert m.tools["edge-sdk"] and (m.tools.get("onnxruntime") or m.tools.get("nncf"))
        assert m.calibration["calibration_samples"] == 80 and m.calibration["holdout_samples"] == 20
        route = next(iter(m.backend_options["routes"].values()))
        assert route.startswith(kind)
        if "openvino-ir" in m.formats and kind != "keras":  # OpenVINO reads these sources itself
            reader = "Core.read_model" if kind in ("onnx", "tflite") else "convert_model"
            assert f"{reader}({BUILDERS[kind][1]})" in route
        if kind in ("keras", "savedmodel") or (kind == "tflite" and "onnx-qdq" in m.formats):
            assert m.tools["tf2onnx"] and m.tools["tensorflow"]  # the static ONNX form came from tf2onnx
        elif kind == "tflite":
            assert "tf2onnx" not in m.tools  # no ONNX detour where the target reads TFLite itself


def test_artifacts_load_in_the_runtime_and_agree_with_keras(converted):
    kind, summary, out = converted
    x = cnn_feeds(10, seed=999)
    want = np.asarray(trained_cnn()(x, training=False))
    for p in summary.profiles:
        fmt = read_manifest(out / p.profile).formats[0]
        backend, device = CPU[fmt]
        with edge_sdk.load(out / p.profile, backend=backend, device=device) as model:
            name = model.inputs[0].name
            got = np.concatenate([next(iter(model.infer({name: x[i:i + 1]}).outputs.values())) for i in range(10)])
        agree = np.mean(np.argmax(got, 1) == np.argmax(want, 1))
        assert agree >= 0.8, (kind, p.profile, agree)
        assert np.max(np.abs(got - want)) < 0.25, (kind, p.profile)
