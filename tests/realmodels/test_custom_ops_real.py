"""A float TFLite source whose custom ops only its own application registers (MediaPipe's face
landmarks with attention: Landmarks2TransformMatrix, TransformLandmarks, TransformTensorBilinear).
LiteRT cannot run it, so nothing can calibrate it or check int8 against it: ``convert`` says so
before any work, names the ops and what to use instead, exits with the conversion error's code
and leaves no output behind (it used to end in LiteRT's RuntimeError as an "internal error")."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from practice import fetch  # noqa: E402

from conftest import run_cli  # noqa: E402
from edge_sdk.converters.sources import read_source  # noqa: E402
from edge_sdk.errors import ConversionError  # noqa: E402

pytestmark = pytest.mark.realmodels


def test_unrunnable_custom_ops_are_named_before_any_work(tmp_path):
    model = fetch("face_landmark_with_attention.tflite")
    with pytest.raises(ConversionError) as err:
        read_source(model)
    msg = err.value.message
    assert "Landmarks2TransformMatrix" in msg and "TransformTensorBilinear" in msg and "LiteRT cannot run" in msg
    assert "face_landmark.tflite" in err.value.hint
    np.savez(tmp_path / "calib.npz", input_1=np.random.default_rng(0).uniform(0, 1, (8, 192, 192, 3)).astype(np.float32))
    r = run_cli("convert", str(model), "--profile", "arm-cpu", "--calib", str(tmp_path / "calib.npz"),
                "--out", str(tmp_path / "out"))
    errtext = r.stderr
    assert r.returncode == ConversionError.exit_code, (r.stdout, errtext)
    assert "Landmarks2TransformMatrix" in errtext and "Traceback" not in errtext and "internal error" not in errtext
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_custom_ops_litert_runs_still_read():
    """MediaPipe's Convolution2DTransposeBias (selfie segmentation) is a custom op LiteRT runs: read as before."""
    src = read_source(fetch("selfie_segmentation.tflite"))
    assert src.format == "tflite" and src.inputs[0].shape == [1, 256, 256, 3]
