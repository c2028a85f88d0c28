"""Native TensorRT: the engine compatibility rule and the handling where TensorRT is absent.

This host has no NVIDIA GPU and no ``tensorrt`` module; the engine build/run path is
exercised on a Jetson only. What is tested here is our handling.
"""

from __future__ import annotations

import warnings

import pytest

import edge_sdk
from edge_sdk.errors import DelegateUnavailableError, ModelLoadError
from edge_sdk.runtimes.tensorrt import check_engine_compat

import rt_artifacts as ra


def test_matching_engine_is_accepted():
    check_engine_compat({"version": "10.3.0", "compute_capability": "8.7"}, "10.3.0", "8.7")


@pytest.mark.parametrize("recorded, version, cc, expect", [
    ({"version": "8.6.2", "compute_capability": "8.7"}, "10.3.0", "8.7", "built with TensorRT 8.6.2, this device has 10.3.0"),
    ({"version": "10.3.0", "compute_capability": "8.6"}, "10.3.0", "8.7", "built for compute capability 8.6, this GPU is 8.7"),
    ({}, "10.3.0", "8.7", "does not record"),
])
def test_mismatched_engine_is_refused(recorded, version, cc, expect):
    with pytest.raises(ModelLoadError, match=expect) as err:
        check_engine_compat(recorded, version, cc)
    assert "onnx" in err.value.hint.lower()


@pytest.mark.skipif(__import__("edge_sdk.runtimes.probe").runtimes.probe.tensorrt_version() is not None,
                    reason="tensorrt is installed here: the absent-TensorRT handling cannot be observed")
def test_explicit_tensorrt_without_tensorrt_installed(tmp_path_factory):
    arts = ra.onnx_artifacts(tmp_path_factory)
    with pytest.raises(DelegateUnavailableError, match="tensorrt"):
        edge_sdk.load(arts["jetson-orin"], backend="tensorrt")


def test_tensorrt_step_is_skipped_with_the_reason(tmp_path_factory):
    arts = ra.onnx_artifacts(tmp_path_factory)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        with edge_sdk.load(arts["jetson-orin"]) as m:
            assert m.selection.skipped[0].startswith("tensorrt/gpu: ")


# ------------------------------------------------------------------ the runner, on a stand-in TensorRT
# No NVIDIA GPU here: a stand-in `tensorrt` + `cuda-python` pair (host memory as "device" memory)
# lets the real TensorRTRunner code run, so what is checked is our handling: which engine is used
# or rebuilt, the engine cache, and the buffer round trip.
import ctypes  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402

import numpy as np  # noqa: E402

MAGIC = b"FAKE-TRT-ENGINE:"


def make_fake_trt(version="10.3.0"):
    calls = {"builds": 0}
    trt = types.ModuleType("tensorrt")
    trt.__version__ = version

    class Logger:
        WARNING = 2

        def __init__(self, level):
            pass

    class BuilderFlag:
        INT8, FP16 = 1, 2

    class TensorIOMode:
        INPUT, OUTPUT = "in", "out"

    class Engine:
        names = ["input", "logits"]
        shapes = {"input": (1, 8, 8, 3), "logits": (1, 4)}
        num_io_tensors = 2

        def get_tensor_name(self, i):
            return self.names[i]

        def get_tensor_shape(self, name):
            return self.shapes[name]

        def get_tensor_dtype(self, name):
            return "float"

        def get_tensor_mode(self, name):
            return TensorIOMode.INPUT if name == "input" else TensorIOMode.OUTPUT

        def create_execution_context(self):
            return Context()

    class Context:
        def __init__(self):
            self.addr = {}

        def set_tensor_address(self, name, ptr):
            self.addr[name] = ptr

        def execute_async_v3(self, stream):
            x = np.frombuffer(bytes(MEMORY[self.addr["input"]]), np.float32)
            MEMORY[self.addr["logits"]][:] = (x[:4] * 2).tobytes()
            return True

    class Runtime:
        def __init__(self, logger):
            pass

        def deserialize_cuda_engine(self, blob):
            return Engine() if bytes(blob).startswith(MAGIC) else None

    class Builder:
        def __init__(self, logger):
            pass

        def create_network(self, flags):
            return object()

        def create_builder_config(self):
            return types.SimpleNamespace(set_flag=lambda f: None)

        def build_serialized_network(self, network, config):
            calls["builds"] += 1
            return MAGIC + b"built"

    class OnnxParser:
        num_errors = 0

        def __init__(self, network, logger):
            pass

        def parse(self, data):
            return data[:1] == b"\x08"

    trt.Logger, trt.BuilderFlag, trt.TensorIOMode, trt.Runtime = Logger, BuilderFlag, TensorIOMode, Runtime
    trt.Builder, trt.OnnxParser, trt.nptype = Builder, OnnxParser, lambda dt: np.float32
    return trt, calls


MEMORY: dict[int, bytearray] = {}


def make_fake_cudart():
    rt = types.ModuleType("cuda.bindings.runtime")
    rt.cudaMemcpyKind = types.SimpleNamespace(cudaMemcpyHostToDevice="h2d", cudaMemcpyDeviceToHost="d2h")

    def malloc(n):
        ptr = 0x1000 + len(MEMORY)
        MEMORY[ptr] = bytearray(n)
        return 0, ptr

    def memcpy(dst, src, n, kind, stream):
        if kind == "h2d":
            MEMORY[dst][:] = ctypes.string_at(src, n)
        else:
            ctypes.memmove(dst, bytes(MEMORY[src]), n)
        return (0,)

    rt.cudaMalloc, rt.cudaMemcpyAsync, rt.cudaFree = malloc, memcpy, lambda p: (0,)
    rt.cudaStreamCreate, rt.cudaStreamSynchronize, rt.cudaStreamDestroy = (lambda: (0, 7)), (lambda s: (0,)), (lambda s: (0,))
    rt.cudaGetDeviceProperties = lambda i: (0, types.SimpleNamespace(major=8, minor=7))
    return rt


@pytest.fixture
def fake_gpu(monkeypatch):
    from edge_sdk.runtimes import select
    from edge_sdk.runtimes.probe import StepStatus, probe_step

    trt, calls = make_fake_trt()
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    monkeypatch.setitem(sys.modules, "cuda", types.ModuleType("cuda"))
    monkeypatch.setitem(sys.modules, "cuda.bindings", types.ModuleType("cuda.bindings"))
    monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", make_fake_cudart())
    monkeypatch.setattr(select, "probe_step",
                        lambda b, a: StepStatus(True, "stand-in") if b == "tensorrt" else probe_step(b, a))
    # The stand-in modules exist only in this process: the crash guard's child process would not see them.
    monkeypatch.setenv("EDGE_SDK_CRASH_GUARD", "0")
    return calls


def test_engine_built_from_qdq_onnx_then_cached(fake_gpu, tmp_path_factory, tmp_path):
    arts = ra.onnx_artifacts(tmp_path_factory)
    x = ra.sample_inputs(1, seed=4)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = edge_sdk.load(arts["jetson-orin"], strict=True, cache_dir=tmp_path)  # the native first step
    with model:
        assert model.backend == "tensorrt/gpu (sm 8.7, TensorRT 10.3.0)" and not model.fallback
        np.testing.assert_array_equal(model.infer(x).outputs["logits"], x.reshape(1, -1)[:, :4] * 2)
    assert fake_gpu["builds"] == 1 and len(list(tmp_path.glob("*-trt10.3.0-sm8.7.engine"))) == 1
    with edge_sdk.load(arts["jetson-orin"], cache_dir=tmp_path):
        pass
    assert fake_gpu["builds"] == 1  # the cached engine was reused


@pytest.mark.parametrize("recorded, rebuilt", [("10.3.0", False), ("8.6.1", True)])
def test_shipped_engine_used_only_when_it_fits(fake_gpu, tmp_path_factory, tmp_path, recorded, rebuilt):
    arts = ra.onnx_artifacts(tmp_path_factory)
    engine = tmp_path / "src.engine"
    engine.write_bytes(MAGIC + b"shipped")
    folder = ra.write_artifact(
        tmp_path / "a", "jetson-orin",
        [(arts["qdq_onnx"], "model.onnx", "onnx-qdq", "model"), (engine, "model.engine", "onnx-qdq", "engine")],
        *ra.FLOAT_IO, backend_options={"tensorrt": {"version": recorded, "compute_capability": "8.7"}})
    with edge_sdk.load(folder, backend="tensorrt", cache_dir=tmp_path / "cache") as model:
        assert fake_gpu["builds"] == int(rebuilt)
        assert ("engine_rebuilt_because" in model.details) is rebuilt


def test_tensorrt_without_cuda_python_falls_back_with_the_reason(fake_gpu, monkeypatch, tmp_path_factory):
    arts = ra.onnx_artifacts(tmp_path_factory)
    monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", None)
    monkeypatch.setitem(sys.modules, "cuda.cudart", None)
    with pytest.raises(DelegateUnavailableError, match="cuda-python"):
        edge_sdk.load(arts["jetson-orin"], backend="tensorrt")
    with pytest.warns(Warning):
        with edge_sdk.load(arts["jetson-orin"]) as m:
            assert "cuda-python" in m.selection.skipped[0] and m.delegate == "CPUExecutionProvider"
