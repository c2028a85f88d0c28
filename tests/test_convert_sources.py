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


def _two_stage_classifier(path):
    """openWakeWord's shape of classifier, built by code: a score, then under ``If(score >= 0.5)``
    (a ``[1, 1]`` condition) a verifier head whose weights are the outer graph's initializers."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.normal(0, 1, (8, 1)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 1, (8, 1)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array([[0.5]], np.float32), "t")]
    then = helper.make_graph([helper.make_node("MatMul", ["x", "w2"], ["v"], name="verify"),
                              helper.make_node("Sigmoid", ["v"], ["p2"], name="verify_sigmoid")], "then", [],
                             [helper.make_tensor_value_info("p2", TensorProto.FLOAT, [1, 1])])
    other = helper.make_graph([helper.make_node("Identity", ["p1"], ["p1_out"], name="keep")], "else", [],
                              [helper.make_tensor_value_info("p1_out", TensorProto.FLOAT, [1, 1])])
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["s"], name="score"),
             helper.make_node("Sigmoid", ["s"], ["p1"], name="score_sigmoid"),
             helper.make_node("GreaterOrEqual", ["p1", "t"], ["cond"], name="gate"),
             helper.make_node("If", ["cond"], ["y"], name="verifier", then_branch=then, else_branch=other)]
    graph = helper.make_graph(nodes, "two_stage", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.save(model, str(path))
    return model, numpy_helper.to_array(inits[0])


def test_if_branches_made_readable_for_openvino(tmp_path):
    import onnx
    import onnxruntime as ort
    import openvino as ov

    from edge_sdk.converters.sources import self_contained_branches

    model, w1 = _two_stage_classifier(tmp_path / "two_stage.onnx")
    with pytest.raises(Exception, match="If"):  # OpenVINO refuses the [1, 1] condition as it is
        ov.Core().compile_model(str(tmp_path / "two_stage.onnx"), "CPU")
    assert self_contained_branches(model) == 2  # the condition made a scalar; w2 copied into the then branch
    then = next(a.g for a in model.graph.node[-1].attribute if a.name == "then_branch")
    assert [i.name for i in then.initializer] == ["w2"]
    assert "w2" not in {i.name for i in model.graph.initializer}  # moved: the main graph never read it
    assert self_contained_branches(model) == 0  # a second pass (onnx2tf's copy of the static form) changes nothing
    onnx.checker.check_model(model)
    onnx.save(model, str(tmp_path / "fixed.onnx"))
    fixed = ov.Core().compile_model(str(tmp_path / "fixed.onnx"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    sess = ort.InferenceSession(str(tmp_path / "two_stage.onnx"), providers=["CPUExecutionProvider"])
    branches = set()
    for x in np.random.default_rng(4).normal(0, 1, (16, 1, 8)).astype(np.float32):
        ref = sess.run(None, {"x": x})[0]
        np.testing.assert_allclose(fixed({"x": x})[0], ref, rtol=1e-5, atol=1e-6)
        branches.add(bool((x @ w1)[0, 0] >= 0))  # sigmoid(s) >= 0.5: the verifier ran
    assert branches == {True, False}  # both branches were compared


def test_two_stage_classifier_converts_even_when_the_data_never_takes_a_branch(tmp_path):
    """The If model end to end (NNCF calibrates each branch on the samples that take it): with
    calibration samples on both sides of the threshold NNCF quantizes it; when no sample takes the
    verifier branch, OpenVINO still publishes - ONNX Runtime quantizes the main graph, the untaken
    branch stays float, and the manifest and the warnings say so - and does the float model's
    job on both branches."""
    import openvino as ov

    from edge_sdk.manifest import read_manifest

    model_path = tmp_path / "two_stage.onnx"
    _, w1 = _two_stage_classifier(model_path)
    x = np.random.default_rng(5).normal(0, 1, (120, 1, 8)).astype(np.float32)
    positive = (x @ w1)[:, 0, 0] >= 0
    np.savez(tmp_path / "both.npz", x=x)
    np.savez(tmp_path / "negatives.npz", x=x[~positive])
    summary = edge_sdk.convert(model_path, ["intel-cpu"], tmp_path / "both", calib=tmp_path / "both.npz",
                               progress=None)
    assert [o.status for p in summary.profiles for o in p.outcomes] == ["published"]
    assert read_manifest(tmp_path / "both" / "intel-cpu").backend_options["openvino"]["nncf_mode"] == "post-training"
    summary = edge_sdk.convert(model_path, ["intel-cpu", "jetson-orin"], tmp_path / "neg",
                               calib=tmp_path / "negatives.npz", progress=None)
    assert [o.status for p in summary.profiles for o in p.outcomes] == ["published", "published"]
    m = read_manifest(tmp_path / "neg" / "intel-cpu")
    assert m.backend_options["openvino"]["quantizer"] == "onnxruntime"
    assert any("no calibration sample took one branch" in w for w in m.warnings)
    ir = ov.Core().read_model(str(tmp_path / "neg" / "intel-cpu" / "model.xml"))
    assert any(op.get_type_name() == "FakeQuantize" for op in ir.get_ordered_ops())  # int8, not a float copy
    test = np.random.default_rng(6).normal(0, 1, (40, 1, 8)).astype(np.float32)
    took = set()
    with edge_sdk.load(tmp_path / "neg" / "intel-cpu") as model:
        assert model.backend.startswith("openvino"), model.backend
        for v in test:
            want = 1 / (1 + np.exp(-(v @ w1)[0, 0]))
            took.add(bool(want >= 0.5))
            got = float(model.infer({"x": v}).outputs["y"].reshape(-1)[0])
            if want < 0.5:  # the else branch passes the int8 score through
                assert abs(got - want) < 0.03, (got, want)
            else:  # the verifier ran (float): a probability, and no crash on the branch never calibrated
                assert 0.0 <= got <= 1.0
    assert took == {True, False}


def test_a_legacy_hdf5_keras_file_converts(tmp_path, cnn_images):
    """Keras 2's HDF5 format under its other common name (``.hdf5``, as ModelCheckpoint examples and
    fer's emotion model ship it): it was refused as an unsupported file."""
    from edge_sdk.converters.sources import read_source

    from models import trained_cnn

    trained_cnn().save(tmp_path / "cnn.h5")
    path = (tmp_path / "cnn.h5").rename(tmp_path / "cnn.hdf5")
    src = read_source(path)
    assert src.format == "keras" and [o.shape[-1] for o in src.outputs] == [10]
    summary = edge_sdk.convert(path, ["intel-cpu"], tmp_path / "out", calib=cnn_images, progress=None)
    assert summary.profiles[0].published, summary.table()
