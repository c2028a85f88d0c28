"""Edge TPU pre-check on real int8 models built to contain ops the Edge TPU cannot run."""

from __future__ import annotations

import pytest

import test_tflite_models as tm
from edge_sdk.converters.edgetpu import precheck
from edge_sdk.errors import ConversionError
from edge_sdk.profiles import OperatorSpec, resolve_profile

pytestmark = pytest.mark.slow

CORAL_OPS = resolve_profile("coral-edgetpu").operators


@pytest.fixture(scope="session")
def odd_models(tmp_path_factory):
    base = tmp_path_factory.mktemp("edgetpu_models")
    return {"leaky": tm.keras_cnn(base / "leaky.keras", extra="leaky"),
            "sin": tm.savedmodel_sin(base / "sin_savedmodel")}


def test_unsupported_int8_op_is_listed_with_mapping_estimate(odd_models, tmp_path):
    """LEAKY_RELU quantizes to int8 but is outside the Edge TPU set: with the rewrite below switched
    off it stays, is flagged, and the rest goes to CPU."""
    from edge_sdk.converters.tflite_int8 import convert

    job = tm.keras_job(odd_models["leaky"], "coral-edgetpu", tmp_path)
    job.options["tflite_delegate_rewrites"] = False
    res = convert(job)  # not blocking: the compiler maps ops up to it and leaves the rest on the CPU
    pre = res.backend_options["edgetpu_precheck"]
    assert not pre["ok"]
    flagged = [i for i in pre["issues"] if i["op"] == "LEAKY_RELU"]
    assert flagged and "not in the Edge TPU's supported set" in flagged[0]["reasons"][0]
    index = flagged[0]["index"]
    assert pre["tpu_ops"] == index and 0 < pre["tpu_fraction"] < 1
    assert pre["tpu_fraction"] == pytest.approx(index / pre["total_ops"])
    assert any("LEAKY_RELU" in w for w in res.warnings)
    assert any("would map to the Edge TPU" in w for w in res.warnings)


def test_leaky_relu_is_rewritten_into_ops_the_edge_tpu_maps(odd_models, tmp_path):
    """By default the Edge TPU profile's float form has LEAKY_RELU as relu(x) + alpha * (x - relu(x))
    (MUL, SUB, MUL, ADD: ops its table has, exact in float): every op maps, top-1 agrees with the
    float model; arm-cpu, whose XNNPACK runs int8 LEAKY_RELU, keeps the op."""
    import numpy as np
    import tensorflow as tf

    from edge_sdk.converters.tflite_int8 import convert

    job = tm.keras_job(odd_models["leaky"], "coral-edgetpu", tmp_path / "coral")
    res = convert(job)
    pre = res.backend_options["edgetpu_precheck"]
    assert pre["ok"] and pre["tpu_fraction"] == 1.0 and "LEAKY_RELU" not in pre["op_counts"], pre
    assert "LEAKY_RELU as relu(x) + alpha * (x - relu(x)) for coral-edgetpu (x1)" in res.route
    km = tf.keras.models.load_model(str(odd_models["leaky"]), compile=False)
    feeds = [f["image"] for f in job.holdout]
    agree = np.mean([tm.run_tflite(job.workdir / res.model_file, x).argmax() == np.asarray(km(x)).argmax() for x in feeds])
    assert agree >= 0.85, agree
    arm = tm.keras_job(odd_models["leaky"], "arm-cpu", tmp_path / "arm")
    res = convert(arm)
    from ai_edge_litert.interpreter import Interpreter

    ops = {o["op_name"] for o in Interpreter(model_path=str(arm.workdir / res.model_file))._get_ops_details()}
    assert "LEAKY_RELU" in ops and "LEAKY_RELU" not in res.route


def test_float_op_is_an_error_for_coral_naming_it(odd_models, tmp_path):
    from edge_sdk.converters.tflite_int8 import convert

    job = tm.keras_job(odd_models["sin"], "coral-edgetpu", tmp_path, fmt="savedmodel")
    with pytest.raises(ConversionError) as err:
        convert(job)
    assert "SIN" in str(err.value).upper()
    assert list(job.workdir.iterdir()) == []


def test_arm_keeps_the_float_op_and_precheck_flags_it(odd_models, tmp_path):
    """On arm-cpu SIN stays float (warned); the Edge TPU pre-check of that model blocks on it."""
    from edge_sdk.converters.tflite_int8 import convert

    job = tm.keras_job(odd_models["sin"], "arm-cpu", tmp_path, fmt="savedmodel")
    res = convert(job)
    assert any("SIN" in op for op in res.backend_options["tflite"]["float_ops"])
    report = precheck((job.workdir / res.model_file).read_bytes(), CORAL_OPS)
    sin = [i for i in report.issues if i.op == "SIN"]
    assert sin and any("not in the Edge TPU's supported set" in r for r in sin[0].reasons)
    assert any("float tensor" in r and "float32" in r for r in sin[0].reasons)
    assert any("SIN" in b for b in report.blocking)
    assert report.tpu_fraction < 1


def test_dynamic_shapes_are_flagged(odd_models, tmp_path):
    import tensorflow as tf

    km = tf.keras.models.load_model(str(odd_models["leaky"]), compile=False)
    model = tf.lite.TFLiteConverter.from_keras_model(km).convert()  # batch dim stays dynamic
    report = precheck(model, OperatorSpec(max_rank=4))
    assert any("dynamic shape" in r for i in report.issues for r in i.reasons)
    assert report.blocking and report.tpu_ops == 0


def test_garbage_is_not_a_tflite_model():
    with pytest.raises(ConversionError, match="Not a TFLite model"):
        precheck(b"definitely not a flatbuffer", CORAL_OPS)


def test_subgraphs_and_rank_are_flagged():
    """A WHILE loop makes a second subgraph; a rank-5 reshape exceeds the Edge TPU's max rank."""
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([1, 4, 4, 2], tf.float32)])
    def fn(x):
        y = tf.reshape(x, [1, 2, 2, 4, 2]) * 2.0
        _, z = tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 0.5), [tf.constant(0), tf.reshape(y, [1, 32])])
        return z

    conv = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()], fn)
    report = precheck(conv.convert(), OperatorSpec(max_rank=4, single_subgraph=True))
    assert any("more than one subgraph" in m for m in report.model_issues)
    assert any("more than one subgraph" in b for b in report.blocking)
    assert any("rank 5 > 4" in r for i in report.issues for r in i.reasons)
    assert report.op_counts.get("WHILE") == 1  # ops are counted in the main subgraph
