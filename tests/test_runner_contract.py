"""The runner lifecycle contract (#16), run over every registered backend.

activate twice and deactivate twice are safe; activate after deactivate gives the same metadata
(not appended twice) and the same results; a corrupt file is a ``ModelLoadError`` and leaves the
runner inactive; deactivate releases what activate made (the native session/model/interpreter is
freed, TensorRT's device buffers and stream are handed back).

LiteRT, ONNX Runtime and OpenVINO run for real. TensorRT cannot run on this host (no NVIDIA GPU):
it runs on the stand-in ``tensorrt`` and ``cuda-python`` modules of ``test_runtime_tensorrt``,
which count what is allocated and freed.
"""

from __future__ import annotations

import gc
import sys
import types
import weakref

import numpy as np
import pytest

import rt_artifacts as ra
from edge_sdk.errors import ModelLoadError
from edge_sdk.runtimes.base import RunnerConfig
from edge_sdk.runtimes.select import BACKENDS
from test_runtime_tensorrt import MAGIC, make_fake_cudart, make_fake_trt

#: backend -> (artifact key in rt_artifacts, model file, accelerator, the attribute holding the native object)
CASES = {
    "litert": ("arm-cpu", "model.tflite", "xnnpack", "_interp"),
    "onnxruntime": ("jetson-orin", "model.onnx", "CPUExecutionProvider", "_sess"),
    "openvino": ("intel-cpu", "model.xml", "CPU", "_compiled"),
    "tensorrt": ("trt-engine", "model.engine", "gpu", "_ctx"),
}


def test_every_registered_backend_is_covered():
    assert set(BACKENDS.names()) == set(CASES)


@pytest.fixture
def fake_trt(monkeypatch):
    trt, _ = make_fake_trt()
    cudart = make_fake_cudart()
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    monkeypatch.setitem(sys.modules, "cuda", types.ModuleType("cuda"))
    monkeypatch.setitem(sys.modules, "cuda.bindings", types.ModuleType("cuda.bindings"))
    monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", cudart)
    return cudart


def _config(backend, request, tmp_path) -> RunnerConfig:
    key, name, accelerator, _ = CASES[backend]
    if backend == "tensorrt":
        request.getfixturevalue("fake_trt")
        path = tmp_path / name
        path.write_bytes(MAGIC + b"engine for the lifecycle test")
        return RunnerConfig(path, accelerator, backend_options={"tensorrt": {"version": "10.3.0",
                                                                             "compute_capability": "8.7"}})
    tmp = request.getfixturevalue("tmp_path_factory")
    arts = ra.tflite_artifacts(tmp) if backend == "litert" else ra.onnx_artifacts(tmp)
    folder = arts[key]
    files = {"weights": folder / "model.bin"} if backend == "openvino" else {}
    return RunnerConfig(folder / name, accelerator, num_threads=1, files=files)


def _feed(runner):
    rng = np.random.default_rng(0)
    out = []
    for t in runner.input_metadata:
        if np.issubdtype(t.dtype, np.integer):
            info = np.iinfo(t.dtype)
            out.append(rng.integers(info.min, info.max, size=t.shape, dtype=t.dtype, endpoint=True))
        else:
            out.append(rng.random(t.shape, dtype=np.float32).astype(t.dtype))
    return out


PARAMS = [pytest.param("litert", marks=pytest.mark.slow),  # its artifact is made by a real TensorFlow conversion
          "onnxruntime", "openvino", "tensorrt"]


@pytest.mark.parametrize("backend", PARAMS)
def test_lifecycle(backend, request, tmp_path):
    cfg = _config(backend, request, tmp_path)
    runner = BACKENDS.get(backend)(cfg)
    assert not runner.is_active
    runner.deactivate()  # never activated: nothing to do, no error

    assert runner.activate() is runner and runner.activate() is runner  # twice: the second is a no-op
    native = getattr(runner, CASES[backend][3])
    assert native is not None
    gone = weakref.ref(native)
    del native
    meta = (list(runner.input_metadata), list(runner.output_metadata))
    assert meta[0] and meta[1]
    feed = _feed(runner)
    first = runner.infer(feed)

    runner.deactivate()
    runner.deactivate()  # twice
    assert not runner.is_active
    gc.collect()
    assert gone() is None, "deactivate left the native object alive"
    with pytest.raises(ModelLoadError, match="not active"):
        runner.infer(feed)

    runner.activate()  # again: the same metadata, not appended to
    assert (runner.input_metadata, runner.output_metadata) == meta
    for a, b in zip(first, runner.infer(feed)):
        np.testing.assert_array_equal(a, b)
    runner.deactivate()


@pytest.mark.parametrize("backend", PARAMS)
@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_file_is_model_load_error(backend, damage, request, tmp_path):
    cfg = _config(backend, request, tmp_path)
    data = cfg.model_path.read_bytes()
    bad = tmp_path / "bad" / cfg.model_path.name
    bad.parent.mkdir()
    bad.write_bytes(b"\x13\x37not a model at all" * 8 if damage == "garbage" else data[: len(data) // 2])
    files = dict(cfg.files)
    if "weights" in files:  # OpenVINO: the weights beside the damaged .xml
        (bad.parent / "model.bin").write_bytes(files["weights"].read_bytes())
        files["weights"] = bad.parent / "model.bin"
    runner = BACKENDS.get(backend)(RunnerConfig(bad, cfg.accelerator, num_threads=cfg.num_threads, files=files,
                                                backend_options=cfg.backend_options))
    with pytest.raises(ModelLoadError):
        runner.activate()
    assert not runner.is_active and not runner.input_metadata
    runner.deactivate()  # safe after a failed activate


# ------------------------------------------------------------------ TensorRT's device resources
def _counting(cudart):
    live = {"buffers": set(), "streams": set()}
    malloc, n = cudart.cudaMalloc, [0]

    def cuda_malloc(size):
        err, ptr = malloc(size)
        live["buffers"].add(ptr)
        return err, ptr

    def cuda_free(ptr):
        live["buffers"].remove(ptr)  # a double free raises here
        return (0,)

    def stream_create():
        n[0] += 1
        live["streams"].add(n[0])
        return 0, n[0]

    def stream_destroy(s):
        live["streams"].remove(s)
        return (0,)

    cudart.cudaMalloc, cudart.cudaFree = cuda_malloc, cuda_free
    cudart.cudaStreamCreate, cudart.cudaStreamDestroy = stream_create, stream_destroy
    return live


def test_tensorrt_deactivate_frees_buffers_and_stream(fake_trt, request, tmp_path):
    live = _counting(fake_trt)
    runner = BACKENDS.get("tensorrt")(_config("tensorrt", request, tmp_path))
    for _ in range(3):
        runner.activate()
        assert len(live["buffers"]) == 2 and len(live["streams"]) == 1  # one per I/O tensor, one stream
        assert [t.name for t in runner.input_metadata] == ["input"] and [t.name for t in runner.output_metadata] == ["logits"]
        runner.deactivate()
        assert live == {"buffers": set(), "streams": set()}


def test_tensorrt_failed_activation_frees_what_it_made(fake_trt, request, tmp_path):
    live = _counting(fake_trt)
    malloc = fake_trt.cudaMalloc
    calls = [0]

    def second_malloc_fails(size):
        calls[0] += 1
        return (2, None) if calls[0] == 2 else malloc(size)  # cudaErrorMemoryAllocation on the output buffer

    fake_trt.cudaMalloc = second_malloc_fails
    runner = BACKENDS.get("tensorrt")(_config("tensorrt", request, tmp_path))
    with pytest.raises(Exception, match="CUDA call failed with error 2"):
        runner.activate()
    assert not runner.is_active and not runner.input_metadata and not runner.output_metadata
    assert live == {"buffers": set(), "streams": set()}
