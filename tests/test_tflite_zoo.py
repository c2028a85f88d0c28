"""Float TFLite sources as model zoos ship them (no signature, sparse and fp16 weights, a MediaPipe
custom op), built by code: each converts to int8 TFLite natively, no ONNX detour, within the gate;
MediaPipe's transposed convolution is rewritten into builtins; the targets that cannot take a custom
op no rewrite knows say which runtimes can."""

from __future__ import annotations

import json

import numpy as np
import pytest

import edge_sdk
from edge_sdk.errors import ConversionError
from edge_sdk.manifest import read_manifest

from tflite_zoo import op_names, zoo_feeds, zoo_tflite

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo")
    models = {"nosig": zoo_tflite(root / "nosig.tflite"),
              "sparse": zoo_tflite(root / "sparse.tflite", sparse=True, fp16=True),
              "custom": zoo_tflite(root / "custom.tflite", custom_op=True)}
    # short input names work: the file's tensor is serving_default_image:0
    np.savez(root / "calib.npz", image=zoo_feeds(60, seed=5))
    np.savez(root / "val.npz", image=zoo_feeds(30, seed=6))
    return root, models


def _convert(root, model, profiles, out):
    try:
        return edge_sdk.convert(model, profiles, root / out, calib=root / "calib.npz", validation=root / "val.npz",
                                progress=None)
    except ConversionError as exc:
        if getattr(exc, "summary", None) is None:
            raise
        return exc.summary


def test_the_sources_are_what_zoos_ship(zoo):
    from ai_edge_litert.interpreter import Interpreter

    _, models = zoo
    for path in models.values():
        assert Interpreter(model_path=str(path)).get_signature_list() == {}
    assert "DENSIFY" in op_names(models["sparse"]) and "DEQUANTIZE" in op_names(models["sparse"])
    assert "CUSTOM:Convolution2DTransposeBias" in op_names(models["custom"])


@pytest.mark.parametrize("kind", ["nosig", "sparse"])
def test_converts_natively_for_arm_coral_and_intel(zoo, kind):
    root, models = zoo
    s = _convert(root, models[kind], ["arm-cpu", "coral-edgetpu", "intel-cpu"], f"out_{kind}")
    by = {p.profile: p for p in s.profiles}
    for name in ("arm-cpu", "coral-edgetpu"):
        m = read_manifest(by[name].folder)
        route = m.backend_options["routes"]["tflite-int8"]
        assert route.startswith("tflite (float)") and "MLIR quantizer int8" in route and "onnx2tf" not in route
        assert ("fold sparse/fp16 weights" in route) == (kind == "sparse")
        gate = m.accuracy["formats"]["tflite-int8"]
        assert gate["passed"] and next(iter(gate["outputs"].values()))["kind"] == "mask"
        ops = set(op_names(by[name].folder + "/model.tflite"))
        assert "DENSIFY" not in ops and "CONV_2D" in ops
    assert read_manifest(by["coral-edgetpu"].folder).backend_options["edgetpu_precheck"]["ok"]
    intel = read_manifest(by["intel-cpu"].folder)
    assert intel.accuracy["formats"]["openvino-ir"]["passed"]
    assert "tf2onnx" not in intel.tools  # OpenVINO read the (folded) TFLite itself


def test_mediapipes_transposed_convolution_is_rewritten_exactly_and_every_profile_converts(zoo, tmp_path):
    """MediaPipe's custom Convolution2DTransposeBias becomes TRANSPOSE_CONV + ADD in the float
    TFLite every route reads: LiteRT computes the same mask from both; OpenVINO and the ONNX
    profiles, which cannot read the custom op, now convert; the int8 TFLite quantizes it."""
    from ai_edge_litert.interpreter import Interpreter

    from edge_sdk.converters.tflite_native import builtin_transpose_conv, custom_ops, fold_constants

    root, models = zoo
    raw = fold_constants(models["custom"].read_bytes())[0]
    rewritten, n = builtin_transpose_conv(raw)
    assert n == 1 and custom_ops(raw) == ["Convolution2DTransposeBias"] and custom_ops(rewritten) == []
    (tmp_path / "rewritten.tflite").write_bytes(rewritten)
    assert {"TRANSPOSE_CONV", "ADD"} <= set(op_names(tmp_path / "rewritten.tflite"))
    x = zoo_feeds(4, seed=9)
    outs = []
    for model in (raw, rewritten):
        it = Interpreter(model_content=model)
        it.allocate_tensors()
        got = []
        for i in range(len(x)):
            it.set_tensor(it.get_input_details()[0]["index"], x[i:i + 1])
            it.invoke()
            got.append(it.get_tensor(it.get_output_details()[0]["index"]).copy())
        outs.append(np.concatenate(got))
    assert outs[0].max() > 0.5  # a mask, not zeros
    np.testing.assert_allclose(outs[1], outs[0], atol=1e-5)

    s = _convert(root, models["custom"], ["arm-cpu", "intel-cpu", "jetson-orin"], "out_rewritten")
    by = {p.profile: p for p in s.profiles}
    assert all(by[p].published for p in ("arm-cpu", "intel-cpu", "jetson-orin")), \
        [(p.profile, [(o.format, o.status, o.reason) for o in p.outcomes]) for p in s.profiles]
    arm = read_manifest(by["arm-cpu"].folder)
    assert "CUSTOM:Convolution2DTransposeBias" not in op_names(by["arm-cpu"].folder + "/model.tflite")
    assert "TRANSPOSE_CONV" in op_names(by["arm-cpu"].folder + "/model.tflite")
    assert not any("stay float" in w for w in arm.warnings)
    assert "Convolution2DTransposeBias as TRANSPOSE_CONV + ADD" in arm.backend_options["routes"]["tflite-int8"]


def test_custom_op_stays_float_is_reported_and_other_targets_say_who_can_run_it(zoo, monkeypatch):
    """A custom op LiteRT runs and no rewrite knows (here: the rewrite switched off) stays float in
    the int8 TFLite, is reported, and the targets that cannot read it say which can."""
    from edge_sdk.converters import tflite_native

    monkeypatch.setattr(tflite_native, "builtin_transpose_conv", lambda model: (model, 0))
    root, models = zoo
    s = _convert(root, models["custom"], ["arm-cpu", "coral-edgetpu", "intel-cpu", "jetson-orin"], "out_custom")
    by = {p.profile: p for p in s.profiles}
    arm = read_manifest(by["arm-cpu"].folder)
    assert arm.formats == ["tflite-int8"] and arm.accuracy["formats"]["tflite-int8"]["passed"]
    assert any("custom op(s) Convolution2DTransposeBias stay float" in w for w in arm.warnings)
    assert "CUSTOM:Convolution2DTransposeBias" in op_names(by["arm-cpu"].folder + "/model.tflite")
    onnx_alt = next(o for o in by["arm-cpu"].outcomes if o.format == "onnx-qdq")
    assert onnx_alt.status == "conversion_failed" and "LiteRT runs" in onnx_alt.reason
    coral = read_manifest(by["coral-edgetpu"].folder)
    pre = coral.backend_options["edgetpu_precheck"]
    assert coral.accuracy["formats"]["tflite-int8"]["passed"] and pre["tpu_fraction"] < 1.0 and "cpu_tail_from" in pre
    assert not by["intel-cpu"].published
    intel = by["intel-cpu"].outcomes[0]
    assert intel.status == "conversion_failed" and "Convolution2DTransposeBias" in intel.reason
    assert "arm-cpu" in intel.reason and "coral-edgetpu" in intel.reason
    jetson = by["jetson-orin"].outcomes[0]
    assert jetson.status == "conversion_failed" and "ONNX Runtime and OpenVINO cannot run" in jetson.reason
    report = json.dumps(s.to_dict())
    assert '"conversion_failed"' in report and '"published"' in report
