import numpy as np
import pytest
from PIL import Image

from edge_sdk import preprocess as pp
from edge_sdk.errors import InputValidationError


def test_parse_kv_and_apply_nchw(tmp_path):
    spec = pp.parse("size=4x6,layout=NCHW,color=RGB,scale=1/255,mean=0.5,std=0.5")
    img = Image.new("RGB", (6, 4), (255, 0, 51))
    out = pp.apply(img, spec)
    assert out.shape == (1, 3, 4, 6) and out.dtype == np.float32
    np.testing.assert_allclose(out[0, :, 0, 0], [1.0, -1.0, (51 / 255 - 0.5) / 0.5], atol=1e-6)


def test_bgr_nhwc_gray(tmp_path):
    img = Image.new("RGB", (2, 2), (10, 20, 30))
    out = pp.apply(img, pp.parse("size=2x2,layout=NHWC,color=BGR,scale=1"))
    assert out.shape == (1, 2, 2, 3)
    np.testing.assert_allclose(out[0, 0, 0], [30, 20, 10])
    g = pp.apply(img, pp.parse("size=2x2,layout=NCHW,color=GRAY,scale=1"))
    assert g.shape == (1, 1, 2, 2)


def test_path_and_bytes_and_bad(tmp_path):
    p = tmp_path / "x.png"
    Image.new("RGB", (8, 8), (1, 2, 3)).save(p)
    spec = pp.PreprocessSpec(size=[8, 8])
    np.testing.assert_array_equal(pp.apply(p, spec), pp.apply(p.read_bytes(), spec))
    (tmp_path / "bad.png").write_bytes(b"not an image")
    with pytest.raises(InputValidationError, match="Cannot decode"):
        pp.apply(tmp_path / "bad.png", spec)


def test_letterbox_and_crop_shapes():
    img = Image.new("RGB", (20, 10), (200, 200, 200))
    for mode in ("letterbox", "center-crop"):
        out = pp.apply(img, pp.PreprocessSpec(size=[8, 8], resize=mode, scale=1))
        assert out.shape == (1, 3, 8, 8)
    lb = pp.apply(img, pp.PreprocessSpec(size=[8, 8], resize="letterbox", scale=1, pad_value=0))
    assert lb[0, 0, 0, 0] == 0 and lb[0, 0, 4, 4] == 200


def test_bad_spec_names_key():
    with pytest.raises(InputValidationError, match="layout"):
        pp.parse("layout=NCWH")
    with pytest.raises(InputValidationError, match="unknown key"):
        pp.parse("sise=3x3")


def test_size_from_shape_checks_channels():
    spec = pp.PreprocessSpec(color="GRAY", layout="NHWC")
    assert spec.with_size_from_shape([1, 8, 9, 1]).size == [8, 9]
    with pytest.raises(InputValidationError, match="channels"):
        spec.with_size_from_shape([1, 8, 9, 3])


def test_hash_changes_with_spec():
    a, b = pp.PreprocessSpec(size=[8, 8]), pp.PreprocessSpec(size=[8, 8], scale=1.0)
    assert pp.spec_hash(a) != pp.spec_hash(b) and len(pp.spec_hash(a)) == 64
