"""tflite-int8 converter on real models: Keras and ONNX sources, arm-cpu and coral-edgetpu.

Each artifact is loaded in LiteRT here, its I/O dtypes and static shapes are checked against the
profile, and its predictions on held-back inputs are compared with the float model's (the same
metrics and thresholds as the pipeline's accuracy gate: cosine and top-1 agreement).
"""

from __future__ import annotations

import numpy as np
import pytest

import test_tflite_models as tm
from edge_sdk.errors import CalibrationError, ConversionError
from edge_sdk.profiles import resolve_profile

pytestmark = pytest.mark.slow

PROFILES = ["arm-cpu", "coral-edgetpu"]


@pytest.fixture(scope="session")
def sources(tmp_path_factory):
    base = tmp_path_factory.mktemp("tflite_sources")
    return {"keras": tm.keras_cnn(base / "cnn.keras"), "onnx": tm.onnx_cnn(base / "cnn.onnx")}


def _float_reference(fmt: str, path, feeds):
    if fmt == "onnx":
        import onnxruntime as ort

        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return [sess.run(None, {"input": f["input"]})[0] for f in feeds]
    import tensorflow as tf

    km = tf.keras.models.load_model(str(path), compile=False)
    return [np.asarray(km(f["image"])) for f in feeds]


@pytest.fixture(scope="session")
def converted(sources, tmp_path_factory):
    """Every (source format, profile) pair converted once per session."""
    from edge_sdk.converters.tflite_int8 import convert

    out = {}
    for fmt, path in sources.items():
        for profile in PROFILES:
            tmp = tmp_path_factory.mktemp(f"{fmt}_{profile}")
            job = (tm.keras_job if fmt == "keras" else tm.onnx_job)(path, profile, tmp)
            out[(fmt, profile)] = (job, convert(job))
    return out


@pytest.mark.parametrize("fmt", ["keras", "onnx"])
@pytest.mark.parametrize("profile", PROFILES)
def test_artifact_loads_and_matches_profile(converted, fmt, profile):
    from ai_edge_litert.interpreter import Interpreter

    job, res = converted[(fmt, profile)]
    q = resolve_profile(profile).quantization
    path = job.workdir / res.model_file
    assert path.is_file() and res.precision == "int8"
    interp = Interpreter(model_path=str(path))
    interp.allocate_tensors()
    native_in = interp.get_input_details()[0]
    assert np.dtype(native_in["dtype"]).name == q.input_dtype
    assert np.dtype(interp.get_output_details()[0]["dtype"]).name == q.output_dtype
    assert all(d > 0 for d in native_in["shape_signature"]), "shapes must be static"
    spec_in, spec_out = res.inputs[0], res.outputs[0]
    assert spec_in.name == job.source.inputs[0].name and spec_out.name == "probs"
    assert spec_in.shape == list(job.input_shapes[spec_in.name])  # source layout kept (ONNX: NCHW)
    assert (spec_in.dtype, spec_out.dtype) == (q.input_dtype, q.output_dtype)
    for spec in (spec_in, spec_out):
        if spec.dtype in ("int8", "uint8"):
            assert spec.quantization is not None and spec.quantization.dtype == spec.dtype
            assert spec.quantization.scale > 0
        else:
            assert spec.quantization is None
    assert fmt in res.route and "TFLiteConverter" in res.route
    assert res.tools.get("tensorflow")
    if fmt == "onnx":
        assert res.tools.get("onnx2tf")


@pytest.mark.parametrize("fmt", ["keras", "onnx"])
@pytest.mark.parametrize("profile", PROFILES)
def test_int8_predictions_agree_with_float_model(converted, sources, fmt, profile):
    job, res = converted[(fmt, profile)]
    name = res.inputs[0].name
    refs = _float_reference(fmt, sources[fmt], job.holdout)
    spec = resolve_profile(profile).accuracy
    cos, agree = [], 0
    for feed, ref in zip(job.holdout, refs):
        got = tm.run_tflite(job.workdir / res.model_file, feed[name])
        ref_c, got_c = ref - ref.mean(), got - got.mean()  # centred: softmax outputs share a big DC part
        cos.append(float((ref_c * got_c).sum() / (np.linalg.norm(ref_c) * np.linalg.norm(got_c) + 1e-12)))
        agree += int(ref.argmax() == got.argmax())
    assert min(cos) >= spec.min_cosine, cos
    assert agree / len(refs) >= spec.min_top1_agreement


def test_coral_records_precheck_and_uncompiled_state(converted):
    job, res = converted[("keras", "coral-edgetpu")]
    pre = res.backend_options["edgetpu_precheck"]
    assert pre["ok"] and pre["tpu_fraction"] == 1.0 and pre["total_ops"] >= 5
    assert pre["op_counts"].get("CONV_2D") == 2
    tpu = res.backend_options["edgetpu"]
    assert tpu["compiled"] is False and "not compiled" in tpu["status"]
    assert tpu["command"].endswith("edgetpu_compiler -s -o . model.tflite")
    assert any("Edge TPU-ready but not compiled" in w for w in res.warnings)
    assert res.backend_options["tflite"]["weights"] == "per-channel"
    assert [p.name for p in job.workdir.iterdir()] == ["model.tflite"]


def test_arm_has_no_edgetpu_step(converted):
    _, res = converted[("keras", "arm-cpu")]
    assert "edgetpu_precheck" not in res.backend_options and "edgetpu" not in res.backend_options
    assert res.backend_options["tflite"]["weights"] == "per-channel"
    assert not any("float" in w for w in res.warnings), res.warnings


def test_onnx_nhwc_layout_is_explicit(sources, tmp_path):
    """On request the TFLite input is onnx2tf's NHWC: the spec and backend options say so."""
    from edge_sdk.converters.tflite_int8 import convert

    job = tm.onnx_job(sources["onnx"], "arm-cpu", tmp_path)
    job.options["tflite_input_layout"] = "nhwc"
    res = convert(job)
    spec = res.inputs[0]
    assert spec.shape == [1, 16, 16, 3] and spec.layout == "NHWC"
    assert res.backend_options["input_transpose"] == {"input": [0, 2, 3, 1]}
    import onnxruntime as ort

    sess = ort.InferenceSession(str(sources["onnx"]), providers=["CPUExecutionProvider"])
    feed = job.holdout[0]["input"]
    got = tm.run_tflite(job.workdir / res.model_file, np.transpose(feed, [0, 2, 3, 1]))
    assert got.argmax() == sess.run(None, {"input": feed})[0].argmax()


def test_no_calibration_data_is_one_clear_error(sources, tmp_path):
    from edge_sdk.converters.tflite_int8 import convert

    job = tm.keras_job(sources["keras"], "arm-cpu", tmp_path)
    job.calib = []
    with pytest.raises(CalibrationError, match="No calibration data") as err:
        convert(job)
    assert err.value.hint and not any(job.workdir.iterdir())


def test_calibration_shape_mismatch_names_the_input(sources, tmp_path):
    from edge_sdk.converters.tflite_int8 import convert

    job = tm.keras_job(sources["keras"], "arm-cpu", tmp_path)
    job.calib = [{"image": np.zeros((1, 8, 8, 3), np.float32)}]
    with pytest.raises(CalibrationError, match="'image' has shape \\[1, 8, 8, 3\\]"):
        convert(job)


def test_unknown_source_format_lists_routes(sources, tmp_path):
    from edge_sdk.converters.tflite_int8 import convert

    job = tm.keras_job(sources["keras"], "arm-cpu", tmp_path)
    job.source.format = "caffe"
    with pytest.raises(ConversionError, match="caffe") as err:
        convert(job)
    assert "keras" in str(err.value)


@pytest.fixture(scope="session")
def float_tflite(sources, tmp_path_factory):
    """The Keras CNN as a float TFLite file with a dynamic batch (as model zoos ship them)."""
    import tensorflow as tf

    km = tf.keras.models.load_model(str(sources["keras"]), compile=False)
    path = tmp_path_factory.mktemp("float_tflite") / "cnn.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(km).convert())
    return path


@pytest.mark.parametrize("profile", PROFILES)
def test_float_tflite_quantized_natively(float_tflite, sources, tmp_path, profile):
    """No ONNX detour: LiteRT calibration + the MLIR quantizer on the float flatbuffer itself."""
    from ai_edge_litert.interpreter import Interpreter

    from edge_sdk.converters.tflite_int8 import convert

    name = Interpreter(model_path=str(float_tflite)).get_input_details()[0]["name"]
    job = tm.make_job(float_tflite, "tflite", profile, [tm.TensorSpec(name, [-1, 16, 16, 3], "float32")],
                      [tm.TensorSpec("probs", [-1, tm.NUM_CLASSES], "float32")], {name: [1, 16, 16, 3]}, tmp_path)
    res = convert(job)
    q = resolve_profile(profile).quantization
    assert res.route.startswith("tflite (float) -> LiteRT calibration") and "MLIR quantizer int8" in res.route
    assert "tf2onnx" not in res.tools and "onnx2tf" not in res.tools
    assert (res.inputs[0].dtype, res.outputs[0].dtype) == (q.input_dtype, q.output_dtype)
    assert res.inputs[0].shape == [1, 16, 16, 3]
    interp = Interpreter(model_path=str(job.workdir / res.model_file))
    assert all(d > 0 for d in interp.get_input_details()[0]["shape_signature"])
    ops = {o["op_name"] for o in interp._get_ops_details()}
    assert "CONV_2D" in ops and "FULLY_CONNECTED" in ops
    refs = _float_reference("keras", sources["keras"], [{"image": f[name]} for f in job.holdout])
    agree = sum(int(tm.run_tflite(job.workdir / res.model_file, f[name]).argmax() == r.argmax())
                for f, r in zip(job.holdout, refs))
    assert agree / len(refs) >= 0.9
    scales = _weight_scales(job.workdir / res.model_file)
    assert scales and all(n > 1 for n in scales)
    dense = _weight_scales(job.workdir / res.model_file, "FULLY_CONNECTED")
    assert dense and all((n == 1) if profile == "coral-edgetpu" else (n > 1) for n in dense)
    if profile == "coral-edgetpu":
        assert res.backend_options["edgetpu_precheck"]["ok"]


def test_float_tflite_the_native_route_cannot_take_needs_the_onnx_form(sources, tmp_path):
    """A Keras file mislabelled as TFLite: the native route fails, and the detour needs the pipeline's ONNX."""
    from edge_sdk.converters.tflite_int8 import convert

    job = tm.keras_job(sources["keras"], "arm-cpu", tmp_path)
    job.source.format = "tflite"
    with pytest.raises(ConversionError) as err:
        convert(job)
    assert "TFLite model" in err.value.message


def _weight_scales(path, op_name: str = "CONV_2D") -> list[int]:
    """Number of quantization scales of each ``op_name`` weight tensor."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(path))
    tensors = {t["index"]: t for t in interp.get_tensor_details()}
    return [len(tensors[int(op["inputs"][1])]["quantization_parameters"]["scales"])
            for op in interp._get_ops_details() if op["op_name"] == op_name]


@pytest.mark.parametrize("fmt", ["keras", "onnx"])
def test_weights_granularity_follows_profile(converted, fmt):
    """coral-edgetpu: per-channel convolutions (what the Edge TPU compiler maps from TF2's quantizer)
    and per-tensor dense layers; arm-cpu: per-channel everywhere."""
    job, res = converted[(fmt, "coral-edgetpu")]
    path = job.workdir / res.model_file
    assert _weight_scales(path) and all(n > 1 for n in _weight_scales(path))
    assert _weight_scales(path, "FULLY_CONNECTED") == [1]
    assert res.backend_options["tflite"]["dense_weights"] == "per-tensor"
    job, res = converted[(fmt, "arm-cpu")]
    path = job.workdir / res.model_file
    assert all(n > 1 for n in _weight_scales(path))
    assert all(n > 1 for n in _weight_scales(path, "FULLY_CONNECTED"))
    assert res.backend_options["tflite"]["dense_weights"] == "per-channel"
