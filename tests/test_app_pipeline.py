"""Pipelined inference (issue #19): submit() futures and pipeline() results in order, identical to the sync loop,
on a thread-safe runtime (ONNX Runtime) and a serialised one (LiteRT); the camera example runs."""

from __future__ import annotations

import subprocess
import sys
import threading
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest

import edge_sdk
from edge_sdk.errors import InputValidationError, ModelLoadError

import rt_artifacts as ra

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))
import detector_model  # noqa: E402


def bgr_frames(n: int, seed: int = 0, shape=(240, 320, 3)):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(n)]


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    folder = detector_model.build_artifact(tmp_path_factory.mktemp("app_pipe") / "det", size=64)
    with edge_sdk.load(folder, head="yolov8", labels=detector_model.LABELS) as model:
        yield model


def same(a, b):
    assert list(a) == list(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])


def test_pipeline_yields_in_order_and_equals_the_sync_loop(detector):
    assert detector._runner.thread_safe  # ONNX Runtime runs calls concurrently
    frames = bgr_frames(16)
    sync = [detector.infer_image(f, color="bgr") for f in frames]
    for depth in (1, 3, 8):
        piped = list(detector.pipeline(iter(frames), max_in_flight=depth, color="bgr"))
        assert len(piped) == len(frames)
        for s, p in zip(sync, piped):
            same(s, p)
            assert s.detections == p.detections
    futures = [detector.submit(f, color="bgr") for f in frames[:4]]
    assert all(isinstance(f, Future) for f in futures)
    for s, f in zip(sync, futures):
        same(s, f.result(timeout=60))


def test_pipeline_reads_a_generator_lazily_and_stops_cleanly(detector):
    read = []

    def camera():
        for i, f in enumerate(bgr_frames(50, seed=2)):
            read.append(i)
            yield f

    it = detector.pipeline(camera(), max_in_flight=2, color="bgr")
    first = next(it)
    assert "output0" in first
    assert len(read) <= 3  # read ahead by max_in_flight, not the whole stream
    it.close()  # the consumer stops: in-flight frames finish, the worker threads end
    assert not [t for t in threading.enumerate() if t.name.startswith("edge_sdk-pipeline")]


def test_a_bad_frame_raises_at_its_turn(detector):
    frames = bgr_frames(3) + [None] + bgr_frames(2)
    got = []
    with pytest.raises(InputValidationError, match="Got None"):
        for r in detector.pipeline(frames, max_in_flight=2, color="bgr"):
            got.append(r)
    assert len(got) == 3
    with pytest.raises(InputValidationError, match="Got None"):
        detector.submit(None).result(timeout=60)
    for bad in (0, 65, 1.5):
        with pytest.raises(InputValidationError, match="max_in_flight"):
            next(detector.pipeline(frames, max_in_flight=bad))
    with pytest.raises(InputValidationError, match="Unknown frame colour"):
        next(detector.pipeline(frames, color="argb"))


def test_submit_after_close_refuses(tmp_path):
    folder = detector_model.build_artifact(tmp_path / "det", size=64)
    model = edge_sdk.load(folder)
    fut = model.submit(bgr_frames(1)[0], color="bgr")
    model.close()  # waits for submitted frames
    assert fut.done() and "output0" in fut.result()
    with pytest.raises(ModelLoadError, match="closed"):
        model.submit(bgr_frames(1)[0])


def test_pipeline_on_litert_is_serialised_and_identical(tmp_path_factory):
    """A LiteRT interpreter is not thread-safe: the model's own stays under its lock, the pipeline runs one
    interpreter per frame in flight (tests/test_app_pipeline_native.py); results stay identical."""
    arts = ra.tflite_artifacts(tmp_path_factory)
    fi, fo = ra.tflite_io_specs(arts["tflite_float_io"])
    folder = ra.write_artifact(tmp_path_factory.mktemp("app_pipe_litert") / "arm-cpu", "arm-cpu",
                               [(arts["tflite_float_io"], "model.tflite", "tflite-int8", "model")], fi, fo, ra.PREPROCESS)
    frames = bgr_frames(12, seed=5, shape=(30, 40, 3))
    with edge_sdk.load(folder, backend="litert") as model:
        assert model.backend.startswith("litert/") and not model._runner.thread_safe
        sync = [model.infer_image(f, color="bgr") for f in frames]
        for s, p in zip(sync, model.pipeline(frames, max_in_flight=4, color="bgr")):
            same(s, p)


def test_camera_example_runs_offline():
    r = subprocess.run([sys.executable, str(REPO / "examples" / "camera_app.py"), "--frames", "8", "--compare"],
                       capture_output=True, text=True, timeout=300, cwd=str(REPO))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "edge-sdk pipeline: 8 frames" in r.stdout
    assert "same detection counts: True" in r.stdout
    assert " at (" in r.stdout  # labelled boxes in frame pixels were printed
    # the user code is about ten lines
    src = (REPO / "examples" / "camera_app.py").read_text()
    body = src.split("def detect_loop")[1].split('"""')[2].split("\n\n\ndef ")[0]
    lines = [ln for ln in body.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert len(lines) <= 12, lines


def test_pipeline_on_openvino_is_identical(tmp_path_factory):
    """OpenVINO runs one infer request per thread: concurrent frames, results identical to the sync loop."""
    arts = ra.onnx_artifacts(tmp_path_factory)
    frames = bgr_frames(10, seed=7, shape=(24, 32, 3))
    with edge_sdk.load(arts["intel-cpu"]) as model:
        assert model.backend.startswith("openvino/") and model._runner.thread_safe
        sync = [model.infer_image(f, color="bgr") for f in frames]
        for s, p in zip(sync, model.pipeline(frames, max_in_flight=4, color="bgr")):
            same(s, p)
