"""Accuracy-gate metrics and step selection (fast; the gate end to end is in test_convert_onnx.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edge_sdk.converters.accuracy import gate_step, judge, match_outputs, output_metrics
from edge_sdk.errors import ConversionError
from edge_sdk.profiles import AccuracySpec, builtin_profiles


def test_identical_outputs():
    ref = [np.array([[0.1, 0.7, 0.2]], np.float32)] * 3
    m = output_metrics(ref, [r.copy() for r in ref])
    assert m["cosine"] == pytest.approx(1.0) and m["sqnr_db"] == math.inf and m["max_abs_err"] == 0
    assert m["top1_agreement"] == 1.0 and m["samples"] == 3


def test_sqnr_cosine_and_max_error_match_their_definitions():
    rng = np.random.default_rng(0)
    ref = [rng.normal(0, 1, (1, 8, 4)).astype(np.float32) for _ in range(5)]
    noise = [rng.normal(0, 0.1, r.shape).astype(np.float32) for r in ref]
    test = [r + n for r, n in zip(ref, noise)]
    m = output_metrics(ref, test)
    r, t = np.concatenate([a.ravel() for a in ref]).astype(np.float64), np.concatenate([a.ravel() for a in test]).astype(np.float64)
    assert m["sqnr_db"] == pytest.approx(10 * math.log10(np.sum(r ** 2) / np.sum((r - t) ** 2)), abs=1e-3)
    assert m["cosine"] == pytest.approx(np.dot(r, t) / np.linalg.norm(r) / np.linalg.norm(t), abs=1e-6)
    assert m["max_abs_err"] == pytest.approx(np.max(np.abs(r - t)))
    assert "top1_agreement" not in m  # a feature map is not class scores


def test_top1_agreement_counts_argmax_flips():
    ref = [np.array([[0.1, 0.9]]), np.array([[0.8, 0.2]]), np.array([[0.3, 0.7]]), np.array([[0.6, 0.4]])]
    test = [np.array([[0.1, 0.9]]), np.array([[0.2, 0.8]]), np.array([[0.3, 0.7]]), np.array([[0.6, 0.4]])]
    assert output_metrics(ref, test)["top1_agreement"] == 0.75


def test_judge_names_each_failing_metric():
    spec = AccuracySpec(min_cosine=0.99, min_sqnr_db=20.0, min_top1_agreement=0.9)
    good = {"probs": {"cosine": 0.999, "sqnr_db": 30.0, "top1_agreement": 1.0, "max_abs_err": 0.01}}
    bad = {"probs": {"cosine": 0.9, "sqnr_db": 5.0, "top1_agreement": 0.5, "max_abs_err": 0.5}}
    assert judge(good, spec) == []
    fails = judge(bad, spec)
    assert len(fails) == 3 and all(f.startswith("probs:") for f in fails)


def test_zero_outputs_do_not_divide_by_zero():
    z = [np.zeros((1, 4), np.float32)]
    assert output_metrics(z, z)["cosine"] == 1.0
    assert output_metrics(z, [np.ones((1, 4), np.float32)])["cosine"] == 0.0


@pytest.mark.parametrize("profile, fmt, backend, accel", [
    ("jetson-orin", "onnx-qdq", "onnxruntime", "CPUExecutionProvider"),
    ("intel-cpu", "openvino-ir", "openvino", "CPU"),
    ("intel-npu", "openvino-ir", "openvino", "CPU"),
    ("arm-cpu", "onnx-qdq", "onnxruntime", "CPUExecutionProvider"),
    ("arm-cpu", "tflite-int8", "litert", "xnnpack"),
    ("coral-edgetpu", "tflite-int8", "litert", "xnnpack"),
])
def test_gate_runs_on_the_cpu_step_of_each_format(profile, fmt, backend, accel):
    step = gate_step(builtin_profiles()[profile], fmt)
    assert (step.backend, step.accelerator, step.format) == (backend, accel, fmt)


def test_outputs_match_by_name_then_position():
    assert match_outputs({"a": 1, "b": 2}, {"b": 0, "a": 0}) == {"b": "b", "a": "a"}
    assert match_outputs({"a": 1}, {"x": 0}) == {"x": "a"}
    with pytest.raises(ConversionError):
        match_outputs({"a": 1, "b": 2}, {"x": 0})
