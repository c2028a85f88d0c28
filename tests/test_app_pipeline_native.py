"""Pipelined inference on each runtime's own async machinery (issue #19).

Real runtimes on models built by code: OpenVINO (one infer request per worker), ONNX Runtime
(``session.run`` on worker threads), LiteRT (one interpreter per in-flight frame). Checked: the
pipeline's results equal the synchronous ``infer_image`` loop bit for bit and in order, the native
path is really used (what the queue made) and inferences overlap (two native calls in progress at
once), closing mid-stream is clean. Throughput vs the sync loop is measured in
``benchmarks/bench_pipeline.py``, not asserted: on this shared 2-core host it depends on other load.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import edge_sdk
from edge_sdk.errors import InputValidationError, ModelLoadError

import rt_artifacts as ra

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))
import detector_model  # noqa: E402

HW = 96  # model input side: inference of a few ms, so that it dominates the frame


def bgr_frames(n: int, seed: int = 0, shape=(120, 160, 3)):
    """Noise frames whose brightness ramps up, so an int8 model's outputs differ frame to frame."""
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, 128, shape) + 8 * (i % 16)).astype(np.uint8) for i in range(n)]


@pytest.fixture(scope="module")
def arts(tmp_path_factory):
    """LiteRT / OpenVINO / ONNX Runtime artifacts of one int8 model of 4 conv blocks x 32 channels at 96x96."""
    base = tmp_path_factory.mktemp("pipe_native")
    size = {"hw": HW, "channels": 32, "blocks": 4}
    onnx = ra.build_onnx_family(base / "work", base / "a", **size)
    tfl = ra.build_tflite_family(base / "work_tfl", base / "a", onnx["qdq_onnx"], **size)
    pre = dict(ra.PREPROCESS, size=[HW, HW])
    fi, fo = ra.tflite_io_specs(tfl["tflite_float_io"])
    litert = ra.write_artifact(base / "litert" / "arm-cpu", "arm-cpu",
                               [(tfl["tflite_float_io"], "model.tflite", "tflite-int8", "model")], fi, fo, pre)
    ins = [ra.TensorSpec("input", [1, HW, HW, 3], "float32", None, "NHWC")]
    ort = ra.write_artifact(base / "ort" / "jetson-orin", "jetson-orin",
                            [(onnx["qdq_onnx"], "model.onnx", "onnx-qdq", "model")], ins, ra.FLOAT_IO[1], pre)
    return {"litert": litert, "openvino": onnx["intel-cpu"], "onnxruntime": ort}


#: What runs a pipeline's inferences (ONNX Runtime: session.run on worker threads; run_async measured slower).
NATIVE = {"litert": "interpreter", "openvino": "infer request", "onnxruntime": "worker threads"}


def load(arts, backend: str, **kw):
    return edge_sdk.load(arts[backend], backend=backend, **kw)


def same(a, b):
    assert list(a) == list(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])


@pytest.mark.parametrize("backend", ["litert", "openvino", "onnxruntime"])
def test_pipeline_equals_the_sync_loop_in_order_on_the_native_queue(arts, backend):
    frames = bgr_frames(12, seed=3)
    with load(arts, backend, num_threads=2) as model:
        assert model.backend.startswith(backend + "/")
        sync = [model.infer_image(f, color="bgr") for f in frames]
        assert len({r["logits"].tobytes() for r in sync}) == len(frames)  # distinct frames, so order shows
        for depth in (1, 2, 4):
            piped = list(model.pipeline(iter(frames), max_in_flight=depth, color="bgr"))
            assert len(piped) == len(frames)
            for s, p in zip(sync, piped):
                same(s, p)
                assert p.backend == s.backend and p.transform == s.transform
                assert p.timings["inference"] > 0 and p.timings["total"] >= p.timings["preprocess"]
            used = model.last_pipeline
            assert NATIVE[backend] in used["kind"] and used["jobs"] == depth
            # what the runtime made for the pipeline: requests / interpreters; ORT reuses its session
            assert used["made"] == (0 if backend == "onnxruntime" else depth)
        # submit() takes the same path
        for s, fut in zip(sync, [model.submit(f, color="bgr") for f in frames[:4]]):
            same(s, fut.result(timeout=60))


def test_litert_interpreters_split_the_thread_budget_and_are_released(arts):
    with load(arts, "litert", num_threads=4) as model:
        list(model.pipeline(bgr_frames(4), max_in_flight=2, color="bgr"))
        assert model.last_pipeline["kind"] == "litert 2 interpreter(s) x 2 thread(s)"
        list(model.pipeline(bgr_frames(4), max_in_flight=8, color="bgr"))
        assert "8 interpreter(s) x 1 thread(s)" in model.last_pipeline["kind"]
        assert not model.__dict__.get("_pipes")  # each pipeline released its interpreters when it ended


def native_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(("edge_sdk-pipeline", "edge_sdk-native"))]


@pytest.mark.parametrize("backend", ["litert", "openvino", "onnxruntime"])
def test_closing_mid_pipeline_is_clean(arts, backend):
    model = load(arts, backend)
    it = model.pipeline(bgr_frames(40, seed=1), max_in_flight=4, color="bgr")
    first = next(it)
    assert "logits" in first
    fut = model.submit(bgr_frames(1, seed=9)[0], color="bgr")
    model.close()  # frames in flight finish, the queues and their requests/interpreters are released
    assert fut.done() and "logits" in fut.result()
    with pytest.raises(ModelLoadError, match="closed"):
        next(it)
    model.close()  # twice is safe
    assert not native_threads()
    with pytest.raises(ModelLoadError, match="closed"):
        next(model.pipeline(bgr_frames(2), color="bgr"))
    with pytest.raises(ModelLoadError, match="closed"):
        model.submit(bgr_frames(1)[0])


def test_leaving_the_loop_releases_the_queue_and_errors_come_at_their_turn(arts):
    with load(arts, "openvino") as model:
        it = model.pipeline(bgr_frames(30), max_in_flight=3, color="bgr")
        next(it)
        it.close()
        assert not model.__dict__.get("_pipes") and not native_threads()
        frames = bgr_frames(3) + [np.zeros((0, 4, 3), np.uint8)] + bgr_frames(2)
        got = []
        with pytest.raises(InputValidationError):
            for r in model.pipeline(frames, max_in_flight=4, color="bgr"):
                got.append(r)
        assert len(got) == 3
        assert not native_threads()
        for bad in (0, 65, True, 2.0):
            with pytest.raises(InputValidationError, match="max_in_flight"):
                next(model.pipeline(frames, max_in_flight=bad))


def test_detector_pipeline_decodes_like_the_sync_loop(tmp_path):
    """The head's decoding runs on the pipeline's finish stage: same boxes in frame pixels."""
    folder = detector_model.build_artifact(tmp_path / "det", size=64)
    frames = bgr_frames(6, seed=4, shape=(240, 320, 3))
    with edge_sdk.load(folder, head="yolov8", labels=detector_model.LABELS) as model:
        sync = [model.infer_image(f, color="bgr") for f in frames]
        piped = list(model.pipeline(frames, max_in_flight=3, color="bgr"))
    assert [p.detections for p in piped] == [s.detections for s in sync]
    assert all("postprocess" in p.timings for p in piped)


@pytest.mark.parametrize("backend", ["litert", "onnxruntime", "openvino"])
def test_inferences_really_overlap(arts, backend):
    """Two frames' native calls are in progress at once: separate LiteRT interpreters invoked from two
    threads (no model lock), concurrent session.run calls, two OpenVINO requests in flight. Overlap is
    what makes a pipeline faster than the sync loop when a core is free; the frames/s themselves
    depend on the load of this shared 2-core host, so they are measured side by side in
    benchmarks/bench_pipeline.py (docs/benchmarks.md) instead of asserted here."""
    frames = bgr_frames(24, seed=6)
    with load(arts, backend, num_threads=1) as model:
        # Whether two calls meet is up to the OS scheduler on a small model (one CI run saw a
        # LiteRT pass of 24 frames where each call ended before the next began): up to five passes.
        peaks = []
        for _ in range(5):
            list(model.pipeline(frames, max_in_flight=2, color="bgr"))
            peaks.append(model.last_pipeline["peak"])
            if peaks[-1] == 2:
                break
        assert peaks[-1] == 2 and max(peaks) <= 2, (peaks, model.last_pipeline)
        list(model.pipeline(frames, max_in_flight=1, color="bgr"))
        assert model.last_pipeline["peak"] == 1  # one in flight: never two at once


def test_the_default_queue_serialises_a_runner_that_is_not_thread_safe(arts):
    """TensorRT and LiteRT with a hardware delegate keep the base runner's queue: one worker, holding the
    model's lock around each call, so a sync infer() from another thread never runs beside it."""
    from edge_sdk.runtimes.base import Runner

    with load(arts, "litert") as model:
        runner = model._runner
        assert not runner.thread_safe and model._lock is not None
        queue = Runner.open_queue(runner, 4, model._lock)
        assert queue.jobs == 1 and "one call at a time" in queue.kind and queue.made == 0
        x = np.zeros(runner.input_metadata[0].shape, runner.input_metadata[0].dtype)
        with model._lock:  # another thread is inferring
            fut = queue.submit([x])
            assert not fut.done()
            threading.Event().wait(0.2)
            assert not fut.done()
        outs, ms = fut.result(timeout=60)
        np.testing.assert_array_equal(outs[0], runner.infer_impl([x])[0])
        queue.close()
        queue.close()
        with pytest.raises(ModelLoadError, match="closed"):
            queue.submit([x])


def test_a_cancelled_submit_is_skipped(arts):
    with load(arts, "onnxruntime", num_threads=1) as model:
        frames = bgr_frames(8, seed=8)
        futs = [model.submit(f, color="bgr") for f in frames]
        cancelled = [f for f in futs[2:] if f.cancel()]  # those a worker had not started yet
        for f in futs:
            if f not in cancelled:
                assert "logits" in f.result(timeout=60)
    assert all(f.cancelled() for f in cancelled)


def test_litert_pipeline_runs_the_bytes_load_checked_not_the_path(arts, tmp_path):
    """The extra interpreters are made from the bytes load() checked against the manifest's sha256,
    never from the path: a file replaced after load() changes nothing the pipeline runs."""
    folder = ra.copy_artifact(arts["litert"], tmp_path / "arm-cpu")
    frames = bgr_frames(3)
    with edge_sdk.load(folder, backend="litert") as model:
        assert model.last_pipeline is None
        want = [model.infer_image(f, color="bgr")["logits"] for f in frames]
        (folder / "model.tflite").write_bytes(b"TFL3 not a model any more")
        got = [r["logits"] for r in model.pipeline(frames, max_in_flight=2, color="bgr")]
        assert model.last_pipeline["made"] == 2, model.last_pipeline  # two interpreters made after the swap
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
