import pytest

from edge_sdk.errors import ProfileError
from edge_sdk.profiles import builtin_profiles, load_profile_file, resolve_profile

FIVE = {"jetson-orin", "intel-cpu", "intel-npu", "coral-edgetpu", "arm-cpu"}


def test_five_builtin_profiles_parse():
    profs = builtin_profiles()
    assert FIVE <= set(profs)
    assert profs["jetson-orin"].primary_format == "onnx-qdq"
    assert profs["jetson-orin"].quantization.activation_symmetric is True
    assert [s.accelerator for s in profs["jetson-orin"].runtime.chain][:2] == ["gpu", "TensorrtExecutionProvider"]
    assert profs["intel-npu"].runtime.chain[0].accelerator == "NPU"
    assert profs["intel-npu"].artifact.batch_size == 1
    assert profs["coral-edgetpu"].quantization.input_dtype in ("int8", "uint8")
    assert "CONV_2D" in profs["coral-edgetpu"].operators.supported
    assert profs["arm-cpu"].artifact.formats == ["tflite-int8", "onnx-qdq"]


@pytest.mark.parametrize("alias,name", [("jetson", "jetson-orin"), ("intel", "intel-cpu"), ("npu", "intel-npu"),
                                        ("coral", "coral-edgetpu"), ("arm", "arm-cpu"), ("JETSON", "jetson-orin")])
def test_aliases(alias, name):
    assert resolve_profile(alias).name == name


def test_vpu_points_to_npu_with_note():
    notes = []
    assert resolve_profile("vpu", notes=notes).name == "intel-npu"
    assert any("MYRIAD" in n and "2022.3" in n for n in notes)


def test_unknown_profile_lists_available():
    with pytest.raises(ProfileError) as exc:
        resolve_profile("raspberry-pie")
    assert "raspberry-pie" in exc.value.message
    assert "jetson-orin" in exc.value.hint and "coral" in exc.value.hint


def test_hash_is_content_based():
    a = resolve_profile("jetson-orin")
    assert a.sha256 == resolve_profile("jetson").sha256
    assert a.sha256 != resolve_profile("intel-cpu").sha256


GOOD = """
name = "my-board"
description = "custom"
[artifact]
formats = ["onnx-qdq"]
[quantization]
weights = "per-tensor"
[[runtime.chain]]
backend = "onnxruntime"
accelerator = "CPUExecutionProvider"
format = "onnx-qdq"
"""


def test_custom_profile_file(tmp_path):
    p = tmp_path / "board.toml"
    p.write_text(GOOD)
    prof = resolve_profile(str(p))
    assert prof.name == "my-board" and prof.quantization.weights == "per-tensor"
    assert prof.quantization.dense == "per-tensor" and prof.quantization.weights_label == "per-tensor"  # "same"
    coral = resolve_profile("coral-edgetpu").quantization
    assert (coral.weights, coral.dense) == ("per-channel", "per-tensor")
    assert coral.weights_label == "per-channel convolutions, per-tensor dense layers"
    assert prof.accuracy.min_cosine == 0.99  # defaults filled in


@pytest.mark.parametrize("mutation,key,allowed", [
    (lambda t: "bogus = 1\n" + t, "bogus", "allowed keys"),
    (lambda t: t.replace('weights = "per-tensor"', 'weights = "per-row"'), "quantization.weights", "per-channel"),
    (lambda t: t.replace('weights = "per-tensor"', 'weights = "per-tensor"\ndense_weights = "per-row"'),
     "quantization.dense_weights", "same"),
    (lambda t: t.replace('formats = ["onnx-qdq"]', 'formats = "onnx-qdq"'), "artifact.formats", None),
    (lambda t: t.replace('[artifact]', '[artifact]\nbatch_size = "one"'), "artifact.batch_size", None),
    (lambda t: t.replace('backend = "onnxruntime"', 'backend = "tvm"'), "runtime.chain[0].backend", "litert"),
    (lambda t: t.replace('format = "onnx-qdq"\n', 'format = "tflite-int8"\n'), "runtime.chain[0].format", None),
    (lambda t: t.replace('name = "my-board"\n', ''), "name", None),
])
def test_bad_profile_names_file_key_and_allowed(tmp_path, mutation, key, allowed):
    p = tmp_path / "bad.toml"
    p.write_text(mutation(GOOD))
    with pytest.raises(ProfileError) as exc:
        load_profile_file(p)
    text = str(exc.value)
    assert str(p) in text
    assert f"'{key}'" in text
    if allowed:
        assert allowed in text


def test_invalid_toml_and_missing_file(tmp_path):
    p = tmp_path / "broken.toml"
    p.write_text("name = [unclosed")
    with pytest.raises(ProfileError, match="invalid TOML"):
        load_profile_file(p)
    with pytest.raises(ProfileError, match="Cannot read"):
        load_profile_file(tmp_path / "absent.toml")
