"""Where `tensorrt` imports, convert builds the engine and records TensorRT version and GPU compute
capability (what the runtime checks before loading an engine). This machine has no NVIDIA GPU:
a stand-in `tensorrt` / `cuda-python` pair replaces the missing hardware, and the test checks our
handling: parse -> INT8 flag -> serialized engine in the artifact, hashed, and the manifest keys."""

from __future__ import annotations

import sys
import types

import pytest

import edge_sdk
from edge_sdk.errors import ConversionError
from edge_sdk.manifest import read_manifest

from models import two_io_feeds, two_io_onnx, write_npz

pytestmark = pytest.mark.slow


def _fake_trt(parse_ok: bool = True):
    trt = types.ModuleType("tensorrt")
    trt.__version__ = "10.3.0"
    seen = {}

    class Logger:
        WARNING = 2

        def __init__(self, level):
            pass

    class Config:
        def set_flag(self, flag):
            seen.setdefault("flags", []).append(flag)

    class Builder:
        def __init__(self, logger):
            pass

        def create_network(self, flags):
            return object()

        def create_builder_config(self):
            return Config()

        def build_serialized_network(self, network, config):
            return b"ENGINE" * 8

    class OnnxParser:
        num_errors = 0 if parse_ok else 1

        def __init__(self, network, logger):
            pass

        def parse(self, blob):
            seen["onnx_bytes"] = len(blob)
            return parse_ok

        def get_error(self, i):
            return "In node 3 (importFancy): UNSUPPORTED_NODE"

    trt.Logger, trt.Builder, trt.OnnxParser = Logger, Builder, OnnxParser
    trt.BuilderFlag = types.SimpleNamespace(INT8="INT8", FP16="FP16")
    cudart = types.ModuleType("cuda.bindings.runtime")
    cudart.cudaGetDeviceProperties = lambda dev: (0, types.SimpleNamespace(major=8, minor=7))
    return trt, cudart, seen


@pytest.fixture(scope="module")
def two_io(tmp_path_factory):
    root = tmp_path_factory.mktemp("trt")
    return two_io_onnx(root / "two.onnx"), write_npz(root / "calib.npz", two_io_feeds(30))


def _install(monkeypatch, parse_ok=True):
    trt, cudart, seen = _fake_trt(parse_ok)
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    monkeypatch.setitem(sys.modules, "cuda", types.ModuleType("cuda"))
    monkeypatch.setitem(sys.modules, "cuda.bindings", types.ModuleType("cuda.bindings"))
    monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", cudart)
    return seen


def test_engine_is_built_and_its_version_and_gpu_recorded(two_io, tmp_path, monkeypatch):
    seen = _install(monkeypatch)
    model, calib = two_io
    edge_sdk.convert(model, "jetson-orin", tmp_path / "out", calib=calib, input_shapes={"image": [1, 3, 24, 16]},
                     progress=None)
    m = read_manifest(tmp_path / "out" / "jetson-orin", verify=True)
    # the QDQ ONNX was handed to the parser; int8 from its Q/DQ nodes, fp16 for the rest (as the device builds it)
    assert seen["flags"] == ["INT8", "FP16"] and seen["onnx_bytes"] > 1000
    engine = next(a for a in m.artifacts if a.role == "engine")
    assert engine.path == "model.engine" and engine.size_bytes == 48
    trt = m.backend_options["tensorrt"]
    assert trt["version"] == "10.3.0" and trt["compute_capability"] == "8.7"
    assert m.tools["tensorrt"] == "10.3.0"
    assert not any("not importable" in w for w in m.warnings)


def test_engine_parse_failure_is_one_error_and_nothing_written(two_io, tmp_path, monkeypatch):
    _install(monkeypatch, parse_ok=False)
    model, calib = two_io
    with pytest.raises(ConversionError, match="UNSUPPORTED_NODE"):
        edge_sdk.convert(model, "jetson-orin", tmp_path / "out", calib=calib, input_shapes={"image": [1, 3, 24, 16]},
                         progress=None)
    assert not (tmp_path / "out").exists()
