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
