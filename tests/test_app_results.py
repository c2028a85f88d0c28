"""Results as a read-only mapping, top-k, the typed/exported API, fallback logging, a missing runtime wheel (issue #19)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

import edge_sdk
from edge_sdk import errors
from edge_sdk.errors import InputValidationError

import rt_artifacts as ra

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))
import detector_model  # noqa: E402


@pytest.fixture(scope="module")
def arts(tmp_path_factory):
    return ra.onnx_artifacts(tmp_path_factory)


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    return detector_model.build_artifact(tmp_path_factory.mktemp("app_results") / "det", size=64)


def test_result_is_a_read_only_mapping(arts):
    with edge_sdk.load(arts["jetson-orin"], backend="onnxruntime") as m:
        r = m.infer(ra.sample_inputs(1)[0])
    assert isinstance(r, Mapping)
    assert "logits" in r and "probs" not in r and 0 not in r
    assert list(r) == ["logits"] and list(r.keys()) == ["logits"] and len(r) == 1
    assert set(dict(r)) == {"logits"}
    np.testing.assert_array_equal(dict(r)["logits"], r["logits"])
    np.testing.assert_array_equal(r.get("logits"), r.outputs["logits"])
    assert r.get("probs") is None
    with pytest.raises(KeyError, match="'probs' is not an output of this model; outputs: 'logits'"):
        r["probs"]
    with pytest.raises(TypeError):
        r["logits"] = np.zeros(4)  # read-only
    with pytest.raises(InputValidationError, match="without a detector head"):
        r.detections
    assert r.transform is None  # infer() of an array has no image transform


def test_top_k_for_a_classifier(arts):
    with edge_sdk.load(arts["intel-cpu"], labels=["a", "b", "c", "d"]) as m:
        r = m.infer_image(np.full((20, 30, 3), 100, np.uint8))
    scores = r["logits"].reshape(-1)
    best = r.top_k(2)
    assert [t.index for t in best] == list(np.argsort(-scores)[:2])
    assert [t.label for t in best] == [["a", "b", "c", "d"][i] for i in np.argsort(-scores)[:2]]
    assert best[0].score == pytest.approx(float(scores.max()))
    assert r.top_k(10, output="logits")[-1].index == int(np.argmin(scores))
    with pytest.raises(KeyError, match="outputs: 'logits'"):
        r.top_k(1, output="probs")


def test_every_error_class_and_warning_is_exported():
    for name in dir(errors):
        obj = getattr(errors, name)
        if isinstance(obj, type) and issubclass(obj, errors.EdgeSDKError):
            assert getattr(edge_sdk, name) is obj, name
            assert name in edge_sdk.__all__
    from edge_sdk.runtimes.base import FallbackWarning

    assert edge_sdk.FallbackWarning is FallbackWarning and "FallbackWarning" in edge_sdk.__all__
    assert edge_sdk.AccuracyWarning.__name__ == "AccuracyWarning"
    for name in ("Detection", "Head", "TopK", "ImageTransform"):
        assert name in edge_sdk.__all__ and getattr(edge_sdk, name).__name__ == name


def test_package_is_typed_for_type_checkers():
    """py.typed ships as package data, and the lazy entry points have real imports under TYPE_CHECKING."""
    assert (REPO / "edge_sdk" / "py.typed").is_file()
    import tomllib

    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "py.typed" in data["tool"]["setuptools"]["package-data"]["edge_sdk"]
    init = (REPO / "edge_sdk" / "__init__.py").read_text()
    block = init.split("if TYPE_CHECKING:")[1].split("\n\n")[0]
    for name in ("load", "Model", "InferenceResult", "FallbackWarning", "convert", "benchmark"):
        assert f" {name}" in block, name
    # the TYPE_CHECKING imports resolve to exactly what the lazy names give at run time
    code = compile(block.replace("    from .", "from edge_sdk."), "<typecheck>", "exec")
    ns: dict = {}
    exec(code, ns)  # noqa: S102 - our own file's imports
    for name in ("load", "Model", "InferenceResult", "FallbackWarning", "Head"):
        assert ns[name] is getattr(edge_sdk, name)


def test_fallback_is_warned_and_logged(arts, caplog):
    with caplog.at_level(logging.WARNING, logger="edge_sdk"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with edge_sdk.load(arts["intel-npu"]) as m:
                assert m.fallback
    assert any(issubclass(w.category, edge_sdk.FallbackWarning) for w in caught)
    logged = [r for r in caplog.records if r.name.startswith("edge_sdk") and "running on openvino/CPU" in r.getMessage()]
    assert logged and logged[0].levelno == logging.WARNING


MISSING_ORT = r"""
import sys, json
sys.modules["onnxruntime"] = None  # the wheel is not installed: every import of it fails
import edge_sdk
from edge_sdk.errors import exit_code_for
try:
    edge_sdk.load(sys.argv[1], crash_guard=False)
except Exception as exc:
    print(json.dumps({"cls": type(exc).__name__, "msg": str(exc), "code": exit_code_for(exc),
                      "extra": getattr(exc, "extra", None)}))
"""


def test_missing_runtime_wheel_is_missing_dependency_error(detector):
    """README and device_app.py promise MissingDependencyError (exit 8) naming the extra."""
    r = subprocess.run([sys.executable, "-c", MISSING_ORT, str(detector)], capture_output=True, text=True, timeout=120)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["cls"] == "MissingDependencyError", out
    assert out["code"] == 8 and out["extra"] == "onnxruntime"
    assert 'pip install "edge-sdk[onnxruntime]"' in out["msg"]


def test_missing_delegate_is_still_delegate_unavailable(arts):
    """Only a missing wheel becomes MissingDependencyError; a missing accelerator stays exit 5."""
    with pytest.raises(edge_sdk.DelegateUnavailableError):
        edge_sdk.load(arts["intel-npu"], strict=True)
