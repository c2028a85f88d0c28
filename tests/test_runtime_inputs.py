"""The input contract (names, shapes, dtypes, finite values), preprocessing, and threads.

Uses the real ONNX Runtime / OpenVINO artifacts of ``rt_artifacts`` (no TensorFlow).
"""

from __future__ import annotations

import io
import threading
import warnings

import numpy as np
import pytest

import edge_sdk
from edge_sdk.errors import InputValidationError
from edge_sdk.preprocess import apply, from_dict

import rt_artifacts as ra


@pytest.fixture(scope="session")
def arts(tmp_path_factory):
    return ra.onnx_artifacts(tmp_path_factory)


@pytest.fixture(scope="module")
def model(arts):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = edge_sdk.load(arts["intel-cpu"])
    yield m
    m.close()


@pytest.fixture(scope="module")
def x():
    return ra.sample_inputs(1, seed=3)[0]


@pytest.mark.parametrize("bad, expect", [
    (np.zeros((1, 3, 8, 8), np.float32), r"expected shape \[1, 8, 8, 3\], got \[1, 3, 8, 8\]"),  # NCHW, never transposed
    (np.zeros((8, 8, 3), np.float32), r"expected shape \[1, 8, 8, 3\], got \[8, 8, 3\]"),  # rank
    (np.zeros((2, 8, 8, 3), np.float32), r"got \[2, 8, 8, 3\]"),  # batch
    (np.zeros((1, 8, 8, 3), np.float64), "expected dtype float32, got float64"),
    (np.zeros((1, 8, 8, 3), np.uint8), "expected dtype float32, got uint8"),
    ([[0.0] * 3], "expected a numpy array"),
])
def test_wrong_input_is_one_clear_error(model, bad, expect):
    with pytest.raises(InputValidationError, match=expect) as err:
        model.infer(bad)
    assert err.value.hint  # every contract error says what to do


def test_names_missing_and_extra(model, x):
    with pytest.raises(InputValidationError, match=r"missing \['input'\]"):
        model.infer({"image": x})
    with pytest.raises(InputValidationError, match=r"unexpected \['extra'\]"):
        model.infer({"input": x, "extra": x})
    with pytest.raises(InputValidationError, match="missing"):
        model.infer({})


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_is_rejected_by_default(model, x, value):
    bad = x.copy()
    bad[0, 1, 2, 0] = value
    with pytest.raises(InputValidationError, match="1 NaN/Inf"):
        model.infer(bad)


def test_huge_finite_values_are_not_mistaken_for_inf(model, x):
    model.infer(x * np.float32(1e30))  # the fast check's x.x overflows; the exact check clears it


def test_check_finite_can_be_turned_off(arts, x):
    bad = x.copy()
    bad[0, 0, 0, 0] = np.nan
    with edge_sdk.load(arts["intel-cpu"], check_finite=False) as m:
        m.infer(bad)  # accepted; what the model makes of NaN is the caller's business


def test_non_contiguous_input_is_accepted_without_changing_values(model, x):
    strided = np.asfortranarray(x)
    np.testing.assert_array_equal(model.infer(strided).outputs["logits"], model.infer(x).outputs["logits"])


def test_input_is_not_modified(model, x):
    before = x.copy()
    model.infer(x)
    np.testing.assert_array_equal(x, before)


# ------------------------------------------------------------------ preprocessing
def _png(seed: int = 0, size=(13, 11)) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def test_preprocess_applies_exactly_the_manifest_spec(model, tmp_path):
    png = _png()
    (tmp_path / "a.png").write_bytes(png)
    spec = from_dict(ra.PREPROCESS)
    want = apply(png, spec)
    for image in (png, tmp_path / "a.png", str(tmp_path / "a.png")):
        np.testing.assert_array_equal(model.preprocess(image), want)
    from PIL import Image

    np.testing.assert_array_equal(model.preprocess(Image.open(io.BytesIO(png))), want)
    np.testing.assert_array_equal(model.preprocess(np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))), want)
    res = model.infer_image(png)
    np.testing.assert_array_equal(res.outputs["logits"], model.infer(want).outputs["logits"])
    assert res.timings["preprocess"] > 0


def test_preprocess_without_a_recorded_spec(arts):
    with edge_sdk.load(arts["jetson-orin"], backend="onnxruntime") as m:
        with pytest.raises(InputValidationError, match="records no image preprocessing"):
            m.preprocess(_png())


def test_unreadable_image(model):
    with pytest.raises(InputValidationError, match="Cannot decode image"):
        model.preprocess(b"not an image")
    with pytest.raises(InputValidationError, match="expected a uint8"):
        model.preprocess(np.zeros((4, 4, 3), np.float32))


# ------------------------------------------------------------------ threads
def run_threads(model, feeds, n_threads=8, rounds=5):
    """Every thread runs every feed ``rounds`` times; returns per-thread lists of outputs."""
    results = [[] for _ in range(n_threads)]
    errors = []
    start = threading.Barrier(n_threads)

    def work(i):
        try:
            start.wait()
            for _ in range(rounds):
                for f in feeds:
                    results[i].append(model.infer(f).outputs)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


@pytest.mark.parametrize("name, backend", [("intel-cpu", None), ("jetson-orin", "onnxruntime")])
def test_eight_threads_match_single_threaded(arts, name, backend):
    feeds = ra.sample_inputs(6, seed=11)
    with edge_sdk.load(arts[name], backend=backend) as m:
        single = [m.infer(f).outputs for f in feeds]
        for per_thread in run_threads(m, feeds):
            for k, out in enumerate(per_thread):
                np.testing.assert_array_equal(out["logits"], single[k % len(feeds)]["logits"])
