"""verify refuses what first use would refuse, and a refusal says why (issue 43, findings 7 and 8)."""

from __future__ import annotations

import warnings

import numpy as np

import pytest

import edge_sdk
from edge_sdk.errors import InputValidationError, ManifestError, ModelLoadError

import rt_artifacts as ra

pytestmark = pytest.mark.usefixtures("isolated")  # tests/conftest.py


@pytest.fixture(scope="module")
def arts(tmp_path_factory):
    return ra.onnx_artifacts(tmp_path_factory)


load = ra.load_quiet

def test_an_openvino_refusal_says_what_is_wrong_not_where_in_cpp(arts, tmp_path):
    """Issue 43, finding 8: 136 of 250 OpenVINO XML refusals said only
    'Exception from src/inference/src/cpp/core.cpp:84:'; the message now carries OpenVINO's own reason."""
    from hardening_corpus import rehash

    folder = ra.copy_artifact(arts["intel-cpu"], tmp_path / "a")
    xml = folder / "model.xml"
    xml.write_bytes(xml.read_bytes().replace(b'element_type="f32"', b'element_type="zz"', 1))
    rehash(folder, "model.xml")
    with pytest.raises(ModelLoadError) as err:
        load(folder)
    assert '"zz" is not a member of enum' in err.value.message, err.value.message
    assert "core.cpp" not in err.value.message


@pytest.mark.parametrize("edit, says", [({"size": [4096, 4096]}, "does not match the model input 8x8"),
                                         ({"layout": "NCHW"}, "channels in that layout"),
                                         ({"color": "GRAY"}, "1-channel")])
def test_verify_refuses_preprocessing_every_infer_image_would_refuse(arts, tmp_path, cli, edit, says):
    """Issue 43, finding 7: verify said OK for manifests whose every infer_image was then refused
    (an absurd size, a layout or colour that does not fit the input); both now share one rule
    (edge_sdk.preprocess.for_inputs) and the door applies it to every format."""
    import json

    from edge_sdk.manifest import preprocessing_hash

    folder = ra.copy_artifact(arts["intel-cpu"], tmp_path / "a")
    mpath = folder / "manifest.json"
    m = json.loads(mpath.read_text())
    m["preprocessing"]["spec"].update(edit)
    m["preprocessing"]["sha256"] = preprocessing_hash(m["preprocessing"]["spec"])
    mpath.write_text(json.dumps(m, indent=2))
    with pytest.raises(ManifestError, match=says):
        load(folder)
    r = cli("verify", str(folder), env={"EDGE_SDK_CONFIG": str(tmp_path / "n.toml")})
    assert r.returncode == 4 and says in r.stdout + r.stderr, r.stdout + r.stderr


def test_a_masked_array_is_refused_not_read_under_its_mask(arts):
    """Issue 43, finding 5: a numpy masked array's mask was ignored."""
    x = ra.sample_inputs(1)[0]
    with load(arts["jetson-orin"]) as m:
        want = m.infer({"input": x}, raw=True)["logits"]
        mask = np.zeros(x.shape, bool)
        mask[0, 0, 0, 0] = True
        for feed in ({"input": np.ma.masked_array(x, mask=mask)}, np.ma.masked_array(x, mask=mask)):
            with pytest.raises(InputValidationError, match="masked array with 1 masked value"):
                m.infer(feed)
        got = m.infer({"input": np.ma.masked_array(x)}, raw=True)["logits"]  # nothing masked: its data
        np.testing.assert_array_equal(got, want)


def test_a_head_or_labels_that_do_not_fit_are_refused_at_load(arts):
    """Issue 43, findings 5 and 7: 2 labels for a 4-class output, and heads that cannot decode the
    outputs, were accepted by load and failed (or mislabelled) on the first frame; the head's own
    decoder now runs once on zero outputs at load, and labels must number the classes."""
    from edge_sdk.detect import Head

    for kw, says in (({"labels": ["a", "b"]}, "2 labels for a model whose output holds 4 classes"),
                     ({"head": "yolov8"}, r"needs an output \[1, 4 \+ C, N\]"),
                     ({"head": "yolov5"}, r"needs an output \[1, N, 5 \+ C\]"),
                     ({"head": Head("boxes-scores", output="nope")}, "nope")):
        with pytest.raises(InputValidationError, match=says):
            load(arts["intel-cpu"], **kw)
    with load(arts["intel-cpu"], labels=["a", "b", "c", "d"]) as m:  # the right count loads
        assert m.infer_image(np.zeros((20, 20, 3), np.uint8)).top_k(1)[0].label in "abcd"


def test_verify_refuses_a_recorded_head_that_does_not_fit(arts, tmp_path, cli):
    import json

    folder = ra.copy_artifact(arts["intel-cpu"], tmp_path / "a")
    mpath = folder / "manifest.json"
    m = json.loads(mpath.read_text())
    m["postprocess"] = {**(m.get("postprocess") or {}), "head": "yolov8"}
    mpath.write_text(json.dumps(m, indent=2))
    with pytest.raises(ManifestError, match="the recorded head does not fit the openvino-ir outputs"):
        load(folder)
    r = cli("verify", str(folder), "--no-load", env={"EDGE_SDK_CONFIG": str(tmp_path / "n.toml")})
    assert r.returncode == 4 and "does not fit" in r.stdout + r.stderr, r.stdout + r.stderr


@pytest.fixture(scope="module")
def ranged(tmp_path_factory):
    """An intel-cpu artifact converted from the tiny model on pixels in 0..1 (so its ranges are recorded)."""
    base = tmp_path_factory.mktemp("ranged")
    f = ra.build_float_onnx(base / "tiny.onnx")
    calib = np.random.default_rng(0).uniform(0, 1, (40, 1, 8, 8, 3)).astype(np.float32)
    edge_sdk.convert(f, ["intel-cpu"], base / "out", calib={"input": calib}, progress=None)
    return base / "out" / "intel-cpu"


def test_an_input_far_outside_its_calibrated_range_is_warned_or_refused(ranged):
    """Issue 43, finding 5: 0-255 pixel values fed as floats to a 0-1 model were accepted on every
    backend (the wrong class at p = 0.94-0.99). The converter records each float input's calibrated
    range; the device warns once (strict: refuses) when values go more than one span beyond it."""
    import json

    rec = json.loads((ranged / "manifest.json").read_text())["calibration"]["input_ranges"]
    lo, hi = rec["input"]
    assert 0.0 <= lo < 0.05 and 0.95 < hi <= 1.0, rec
    x = np.random.default_rng(1).uniform(0, 1, (1, 8, 8, 3)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", edge_sdk.InputRangeWarning)
        warnings.filterwarnings("ignore", category=edge_sdk.FallbackWarning)
        with edge_sdk.load(ranged) as m:
            m.infer(x)
            m.infer(np.clip(x * 1.5 - 0.2, -0.5, 1.5).astype(np.float32))  # a little outside: honest data does that
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with edge_sdk.load(ranged) as m:
            m.infer(x * 255)
            m.infer({"input": x * 255})
    said = [str(w.message) for w in caught if issubclass(w.category, edge_sdk.InputRangeWarning)]
    assert len(said) == 1 and "far outside the range it was calibrated on" in said[0] and "0..1" in said[0], said
    with edge_sdk.load(ranged, strict=True) as m:
        m.infer(x)
        with pytest.raises(InputValidationError, match="far outside"):
            m.infer(x * 255)
