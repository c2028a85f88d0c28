"""The runtime facade on real ONNX Runtime and OpenVINO artifacts (no TensorFlow needed).

Checks: outputs equal the raw runtime call, chain walking (strict refuses, non-strict warns
once and reports the fallback, an explicit backend/device is quiet), multi-profile folders,
integrity (one-byte change, corrupt containers with verify=False), and model lifetime.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import edge_sdk
from edge_sdk.errors import (DelegateUnavailableError, InputValidationError, ManifestError, ModelLoadError,
                             ProfileError)
from edge_sdk.runtimes.base import FallbackWarning

import rt_artifacts as ra


@pytest.fixture(scope="session")
def arts(tmp_path_factory):
    return ra.onnx_artifacts(tmp_path_factory)


@pytest.fixture(scope="module")
def x():
    return ra.sample_inputs(1, seed=7)[0]


def raw_ort(model_path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    # As the runner opens it: int8 x int8 kept on x86 (ORT's default turns activations into uint8 for
    # its U8S8 kernels, whose int16 sums saturate on CPUs without VNNI: other numbers than any device's).
    so = ort.SessionOptions()
    so.add_session_config_entry("session.qdqisint8allowed", "1")
    sess = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def raw_openvino(xml: Path, x: np.ndarray) -> np.ndarray:
    import openvino as ov

    req = ov.Core().compile_model(str(xml), "CPU").create_infer_request()
    return req.infer([x])[0]


def load_quiet(path, **kw):
    """Load with every warning turned into an error (for paths that must not warn)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return edge_sdk.load(path, **kw)


# ------------------------------------------------------------------ outputs equal the raw runtime
def test_onnx_qdq_equals_raw_onnxruntime(arts, x):
    with pytest.warns(FallbackWarning):
        model = edge_sdk.load(arts["jetson-orin"])
    with model:
        res = model.infer(x)
        assert res.backend == "onnxruntime/CPUExecutionProvider"
        np.testing.assert_array_equal(res.outputs["logits"], raw_ort(arts["jetson-orin"] / "model.onnx", x))
        assert res.outputs["logits"].dtype == np.float32 and res.outputs["logits"].shape == (1, 4)
        assert res.model_sha256 == model.manifest.artifact("onnx-qdq").sha256
        assert set(res.timings) == {"preprocess", "quantize", "inference", "dequantize", "total"}
        assert all(v >= 0 for v in res.timings.values())
        assert res.timings["total"] >= res.timings["inference"]


@pytest.mark.parametrize("name", ["intel-cpu", "intel-npu"])
def test_openvino_ir_equals_raw_openvino(arts, x, name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        model = edge_sdk.load(arts[name])
    with model:
        res = model.infer({"input": x})
        np.testing.assert_array_equal(res.outputs["logits"], raw_openvino(arts[name] / "model.xml", x))
        assert model.backend == "openvino/CPU" and res.delegate == "CPU"
        assert model.details["inference_precision"]  # the plugin's real precision is reported
        assert model.details["layers_int8"] > 0  # the QDQ nodes became int8 layers


def test_qdq_is_close_to_float_model(arts, x):
    """Sanity: the int8 artifacts compute the same function as the float model (cosine)."""
    ref = raw_ort(arts["float_onnx"], x).ravel()
    with edge_sdk.load(arts["jetson-orin"], backend="onnxruntime") as m:
        got = m.infer(x).outputs["logits"].ravel()
    assert float(ref @ got / (np.linalg.norm(ref) * np.linalg.norm(got))) > 0.98


# ------------------------------------------------------------------ picking the delegate
def test_strict_refuses_jetson_with_what_is_missing(arts):
    with pytest.raises(DelegateUnavailableError) as err:
        edge_sdk.load(arts["jetson-orin"], strict=True)
    text = str(err.value)
    assert "tensorrt" in text.lower() and "TensorrtExecutionProvider" in text
    assert "hint" in text and "TensorRT" in err.value.hint


def test_strict_refuses_intel_npu(arts):
    with pytest.raises(DelegateUnavailableError) as err:
        edge_sdk.load(arts["intel-npu"], strict=True)
    assert "NPU" in err.value.message and "driver" in err.value.hint


def test_fallback_warns_once_and_tells_the_truth(arts, x):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = edge_sdk.load(arts["jetson-orin"])
    fallback = [w for w in caught if issubclass(w.category, FallbackWarning)]
    assert len(fallback) == 1, [str(w.message) for w in caught]
    assert "onnxruntime/CPUExecutionProvider" in str(fallback[0].message)
    with model:
        assert model.fallback and model.step.native is False
        assert [s.split(":")[0] for s in model.selection.skipped] == [
            "tensorrt/gpu", "onnxruntime/TensorrtExecutionProvider", "onnxruntime/CUDAExecutionProvider"]
        res = model.infer(x)
        assert res.fallback and res.delegate == "CPUExecutionProvider"
        assert model.describe()["fallback"] is True
        # Inference itself never warns again.
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            model.infer(x)


@pytest.mark.parametrize("name, backend, device", [
    ("jetson-orin", "onnxruntime", "CPUExecutionProvider"),
    ("intel-npu", "openvino", "CPU"),
    ("intel-cpu", "openvino", None),
    ("jetson-orin", None, "CPUExecutionProvider"),
])
def test_explicit_choice_is_not_a_fallback(arts, x, name, backend, device):
    """The converters' accuracy gate loads each format on the CPU path: quiet and honest."""
    model = load_quiet(arts[name], backend=backend, device=device, strict=False)
    with model:
        assert not model.fallback and model.selection.explicit
        assert not model.infer(x).fallback


def test_explicit_unavailable_device_raises_even_without_strict(arts):
    with pytest.raises(DelegateUnavailableError) as err:
        edge_sdk.load(arts["jetson-orin"], backend="onnxruntime", device="CUDAExecutionProvider")
    assert "CUDAExecutionProvider" in err.value.message


def test_unknown_backend_lists_the_known_ones(arts):
    with pytest.raises(InputValidationError) as err:
        edge_sdk.load(arts["intel-cpu"], backend="tvm")
    assert "litert" in err.value.hint and "openvino" in err.value.hint


def test_backend_that_cannot_read_the_format(arts):
    with pytest.raises(InputValidationError, match="cannot read"):
        edge_sdk.load(arts["intel-cpu"], backend="litert")


def test_openvino_can_run_the_qdq_onnx_explicitly(arts, x):
    """A backend outside the chain that reads the format may be chosen explicitly."""
    with load_quiet(arts["jetson-orin"], backend="openvino", device="CPU") as m:
        assert m.backend == "openvino/CPU"
        np.testing.assert_allclose(m.infer(x).outputs["logits"], raw_ort(arts["jetson-orin"] / "model.onnx", x), atol=0.05)


def test_ort_provider_dropped_at_session_creation_is_reported(arts, monkeypatch, x):
    """ORT silently drops a provider it cannot start; we check get_providers() and fall back honestly.

    Fake: the probe claims CUDA is present (this host has no NVIDIA GPU), so the session is
    really created with CUDAExecutionProvider requested and ORT really ignores it.
    """
    from edge_sdk.runtimes import select
    from edge_sdk.runtimes.probe import StepStatus, probe_step

    def fake(backend, acc):
        if acc == "CUDAExecutionProvider":
            return StepStatus(True, "pretend")
        return probe_step(backend, acc)

    monkeypatch.setattr(select, "probe_step", fake)
    with pytest.warns(FallbackWarning, match="dropped CUDAExecutionProvider|CUDAExecutionProvider"):
        model = edge_sdk.load(arts["jetson-orin"])
    with model:
        assert model.delegate == "CPUExecutionProvider"
        assert any(s.startswith("onnxruntime/CUDAExecutionProvider") for s in model.selection.skipped)


# ------------------------------------------------------------------ multi-profile folders
@pytest.fixture(scope="module")
def multi(arts, tmp_path_factory):
    root = tmp_path_factory.mktemp("multi")
    for name in ("jetson-orin", "intel-cpu", "intel-npu"):
        ra.copy_artifact(arts[name], root / name)
    return root


def test_multi_profile_folder_picks_the_native_profile_and_says_which(multi):
    from edge_sdk.runtimes.probe import host_matches, probe_step
    from edge_sdk.profiles import resolve_profile

    prof = resolve_profile("intel-cpu")
    if not (host_matches(prof) and probe_step("openvino", "CPU").available):
        pytest.skip("this host is not an x86-64 OpenVINO CPU host")  # the CI host is
    model = load_quiet(multi)
    with model:
        assert model.profile == "intel-cpu" and not model.fallback
        assert any("picked profile 'intel-cpu'" in n for n in model.selection.notes)


def test_multi_profile_folder_by_name_and_alias(multi):
    with pytest.warns(FallbackWarning):
        with edge_sdk.load(multi, profile="jetson") as m:
            assert m.profile == "jetson-orin"
    with pytest.raises(ModelLoadError, match="no artifact for profile 'coral-edgetpu'"):
        edge_sdk.load(multi, profile="coral")
    with pytest.raises(ProfileError):
        edge_sdk.load(multi, profile="no-such-board")


def test_profile_mismatch_on_single_folder(arts):
    with pytest.raises(ModelLoadError, match="converted for profile 'intel-cpu'"):
        edge_sdk.load(arts["intel-cpu"], profile="jetson")


def test_not_an_artifact_folder(tmp_path):
    with pytest.raises(ModelLoadError, match="neither an artifact folder"):
        edge_sdk.load(tmp_path)
    with pytest.raises(ModelLoadError, match="not found"):
        edge_sdk.load(tmp_path / "missing")


# ------------------------------------------------------------------ integrity
@pytest.mark.parametrize("name, file", [("jetson-orin", "model.onnx"), ("intel-cpu", "model.bin"),
                                        ("intel-cpu", "model.xml")])
def test_one_byte_change_is_refused(arts, tmp_path, name, file):
    folder = ra.copy_artifact(arts[name], tmp_path / name)
    data = bytearray((folder / file).read_bytes())
    data[len(data) // 2] ^= 0x01
    (folder / file).write_bytes(bytes(data))
    with pytest.raises(ManifestError, match="sha256"):
        edge_sdk.load(folder)


def test_edited_embedded_profile_is_refused(arts, tmp_path):
    """Moving the CPU step first in the embedded chain would turn a fallback into 'native'."""
    import json

    folder = ra.copy_artifact(arts["jetson-orin"], tmp_path / "a")
    m = json.loads((folder / "manifest.json").read_text())
    m["profile"]["spec"]["runtime"]["chain"][-1]["native"] = True
    (folder / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ManifestError, match="embedded profile 'jetson-orin' does not match its sha256"):
        edge_sdk.load(folder, strict=True)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupt_onnx_without_verify_is_a_load_error(arts, tmp_path, damage):
    folder = ra.copy_artifact(arts["jetson-orin"], tmp_path / "a")
    f = folder / "model.onnx"
    data = f.read_bytes()
    f.write_bytes({"truncate": data[: len(data) // 3], "garbage": b"\x00\xff" * 500, "empty": b""}[damage])
    with pytest.raises(ModelLoadError) as err:
        edge_sdk.load(folder, verify=False, backend="onnxruntime")
    assert "model.onnx" in err.value.message


@pytest.mark.parametrize("damage", ["xml-garbage", "xml-not-ir", "bin-truncated", "bin-missing"])
def test_corrupt_openvino_ir_without_verify_is_a_load_error(arts, tmp_path, damage):
    folder = ra.copy_artifact(arts["intel-cpu"], tmp_path / "a")
    xml, bin_ = folder / "model.xml", folder / "model.bin"
    if damage == "xml-garbage":
        xml.write_bytes(xml.read_bytes()[:200])
    elif damage == "xml-not-ir":
        xml.write_text("<html><body/></html>")
    elif damage == "bin-truncated":
        bin_.write_bytes(bin_.read_bytes()[:16])
    else:
        bin_.rename(folder / "elsewhere.bin")
    with pytest.raises(ModelLoadError):  # ManifestError (a listed file is missing) is a ModelLoadError too
        edge_sdk.load(folder, verify=False)


def test_manifest_disagreeing_with_the_model_file_is_refused(arts, tmp_path):
    from edge_sdk.manifest import TensorSpec

    folder = tmp_path / "bad"
    ra.write_artifact(folder, "intel-cpu", [(arts["intel-cpu"] / "model.xml", "model.xml", "openvino-ir", "model"),
                                            (arts["intel-cpu"] / "model.bin", "model.bin", "openvino-ir", "weights")],
                      [TensorSpec("input", [1, 3, 8, 8], "float32")], ra.FLOAT_IO[1])
    with pytest.raises(ModelLoadError, match=r"manifest says shape \[1, 3, 8, 8\]"):
        edge_sdk.load(folder)


def test_per_format_io_specs_override(arts, tmp_path, x):
    """backend_options.io.<format> gives a format its own boundary specs."""
    import json

    folder = ra.copy_artifact(arts["intel-cpu"], tmp_path / "a")
    m = json.loads((folder / "manifest.json").read_text())
    m["inputs"][0]["name"] = "image"
    m["backend_options"] = {"io": {"openvino-ir": {"inputs": [dict(m["inputs"][0], name="input")],
                                                   "outputs": m["outputs"]}}}
    (folder / "manifest.json").write_text(json.dumps(m))
    with load_quiet(folder) as model:
        assert [t.name for t in model.inputs] == ["input"]
        model.infer({"input": x})


# ------------------------------------------------------------------ lifetime
def test_close_and_context_manager(arts, x):
    with load_quiet(arts["intel-cpu"]) as model:
        model.infer(x)
    with pytest.raises(ModelLoadError, match="closed"):
        model.infer(x)
    model.close()  # twice is fine
    assert "intel-cpu" in repr(model)
