"""Every gate criterion carries its evidence (issue 54, step a): the samples it rests on, its estimate,
a one-sided 95% bound (Wilson for a rate over samples, a seeded bootstrap over samples otherwise),
its threshold and what the bound would say - recorded in the manifest and --json beside a decision
it does not change yet."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from edge_sdk.converters.accuracy.evidence import bootstrap_bound, evidence, format_verdict, wilson_bound

pytestmark = pytest.mark.usefixtures("isolated")


def test_the_issues_figures():
    assert round(wilson_bound(31, 32), 2) == 0.87  # the text-direction classifier that "passed" at 0.969
    at32 = evidence(1.0, 0.98, True, np.ones(32, bool))
    assert (at32["n"], at32["method"], at32["verdict"]) == (32, "wilson", "unverified")
    assert at32["bound"] < 0.98 <= at32["estimate"]
    at300 = evidence(1.0, 0.98, True, np.ones(300, bool))
    assert at300["verdict"] == "passed" and at300["bound"] >= 0.98
    assert evidence(0.95, 0.98, True, np.r_[np.ones(285, bool), np.zeros(15, bool)])["verdict"] == "failed"


def test_an_error_bound_is_an_upper_bound_and_reproducible():
    rng = np.random.default_rng(3)
    err = rng.uniform(0, 0.1, 400)
    groups = np.repeat(np.arange(40), 10)
    a, b = evidence(float(err.mean()), 0.1, False, err, groups), evidence(float(err.mean()), 0.1, False, err, groups)
    assert a == b  # seeded: the same data gives the same bound, run to run
    assert a["side"] == "max" and a["method"] == "bootstrap" and a["bound"] > a["estimate"]
    assert (a["n"], a["elements"]) == (40, 400)


def test_elements_of_one_sample_are_resampled_together():
    """Ten samples of 100 positions each, each sample all-agree or all-disagree: over positions the
    data looks like 1,000 draws; over samples it is ten, and the bound says so."""
    agree = np.repeat(np.array([1, 1, 1, 1, 1, 1, 1, 1, 1, 0], float), 100)
    by_sample = bootstrap_bound(agree, np.repeat(np.arange(10), 100), lower=True)
    by_element = bootstrap_bound(agree, None, lower=True)
    assert by_sample < 0.75 < by_element


def test_the_format_verdict_is_the_worst_criterions():
    outputs = {"y": {"evidence": {"top1_agreement": evidence(1.0, 0.98, True, np.ones(32, bool)),
                                  "score_error": evidence(0.01, 0.1, False, np.full(32, 0.01))}}}
    v = format_verdict(outputs)
    assert v["verdict"] == "unverified" and v["decides"] is False and v["criteria"] == 2
    assert v["unverified"] == ["y: top1_agreement"] and v["worst"]["criterion"] == "y: top1_agreement"


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    d = tmp_path_factory.mktemp("clf")
    rng = np.random.default_rng(0)
    g = h.make_graph([h.make_node("MatMul", ["x", "W"], ["l"]), h.make_node("Softmax", ["l"], ["probs"], axis=-1)],
                     "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 16])],
                     [h.make_tensor_value_info("probs", T.FLOAT, [1, 5])],
                     [nh.from_array(rng.normal(0, 1, (16, 5)).astype(np.float32), "W")])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8), d / "clf.onnx")
    np.save(d / "calib.npy", rng.normal(0, 1, (160, 1, 16)).astype(np.float32))
    return d


def test_the_manifest_and_json_carry_every_criterions_evidence(classifier, tmp_path, capsys):
    from edge_sdk.cli import main
    from edge_sdk.manifest import read_manifest

    code = main(["convert", str(classifier / "clf.onnx"), "--profile", "jetson-orin", "--calib",
                 str(classifier / "calib.npy"), "--out", str(tmp_path / "out"), "--json"])
    summary = json.loads(capsys.readouterr().out)
    report = summary["profiles"][0]["accuracy"]["formats"]["onnx-qdq"]
    manifest = read_manifest(tmp_path / "out" / "jetson-orin")
    assert manifest.accuracy["formats"]["onnx-qdq"]["evidence"] == report["evidence"]
    held_back = manifest.accuracy["holdout_samples"]
    probs = report["outputs"]["probs"]
    judged = set(probs.get("margins", {}))
    assert judged and judged == set(probs["evidence"])  # every criterion the gate judged has its record
    top1 = probs["evidence"]["top1_agreement"]
    assert top1["n"] == held_back and top1["method"] == "wilson" and top1["threshold"] == 0.9
    for ev in probs["evidence"].values():
        assert set(ev) >= {"n", "estimate", "bound", "threshold", "side", "method", "verdict"}
    assert report["evidence"]["decides"] is False
    assert report["evidence"]["verdict"] in ("passed", "unverified", "failed")
    # step a decides nothing: the gate's verdict stands as before
    assert (code == 0) == report["passed"]
