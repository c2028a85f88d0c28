"""Outputs read only where a presence flag says the object is there (``given``).

MediaPipe's hand landmarker drops a hand whose presence flag is below 0.5: its 21 points and its
handedness are never read there. Judged on every crop, a crop with no hand turned its
meaningless points into int8 "errors". Pure numpy; the real hand models are in
tests/realmodels/test_wider.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from edge_sdk import typed
from edge_sdk.converters.accuracy import compare, infer_kinds
from edge_sdk.errors import InputValidationError
from edge_sdk.manifest import TensorSpec
from edge_sdk.outputs import OutputKind, parse_declaration
from edge_sdk.profiles import AccuracySpec

SPEC = AccuracySpec(min_cosine=0.98, min_sqnr_db=15.0, min_top1_agreement=0.9)
OUTS = [TensorSpec("points", [1, 63], "float32"), TensorSpec("presence", [1, 1], "float32"),
        TensorSpec("handedness", [1, 1], "float32")]
N = 24
HAND = [i for i in range(N) if i % 3 != 2]  # the samples with a hand (16); the others have none
HANDS = len(HAND)


def _hands(seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(N):
        centre = rng.uniform(60, 160, 2)
        pts = np.concatenate([centre + rng.normal(0, 25, (21, 2)), rng.normal(0, 5, (21, 1))], axis=1)
        hand = i in HAND
        out.append({"points": pts.reshape(1, 63).astype(np.float32),
                    "presence": np.array([[rng.uniform(0.9, 1.0) if hand else rng.uniform(0.0, 0.05)]], np.float32),
                    "handedness": np.array([[rng.choice([0.03, 0.97]) if hand else rng.uniform(0.3, 0.7)]], np.float32)})
    return out


def _int8(ref: list[dict[str, np.ndarray]], seed: int = 1) -> list[dict[str, np.ndarray]]:
    """Close to float on the hands; on the crops without one, points anywhere and handedness flipped
    (what int8 does to an output nothing reads there)."""
    rng = np.random.default_rng(seed)
    out = []
    for i, r in enumerate(ref):
        t = {k: v.copy() for k, v in r.items()}
        if i in HAND:
            t["points"] = r["points"] + rng.normal(0, 0.3, r["points"].shape).astype(np.float32)
        else:
            t["points"] = rng.uniform(0, 224, r["points"].shape).astype(np.float32)
            t["handedness"] = 1 - r["handedness"]
        out.append(t)
    return out


def test_points_and_other_flags_beside_a_presence_flag_are_read_where_it_says_yes():
    ref = _hands()
    kinds = infer_kinds(OUTS, ref, None)
    assert kinds["points"].kind == "landmarks" and kinds["points"].given == "presence", kinds["points"]
    assert kinds["handedness"].given == "presence" and kinds["presence"].given is None
    assert "presence flag" in kinds["points"].reason and "where presence says yes" in kinds["points"].label()
    out = compare(ref, _int8(ref), kinds, SPEC)
    assert all(out[o]["passed"] for o in out), {o: out[o]["failures"] for o in out}
    assert out["points"]["samples"] == HANDS and out["points"]["judged_at"] == \
        f"the {HANDS} of {N} samples where float's 'presence' says yes"
    assert out["presence"]["samples"] == N  # the flag itself: every crop
    # Judged on every crop (declared without given: taken as it is), the same artifact fails.
    every = {**kinds, "points": OutputKind("landmarks", source="declared"),
             "handedness": OutputKind("scores", source="declared")}
    failed = compare(ref, _int8(ref), every, SPEC)
    assert not failed["points"]["passed"] and not failed["handedness"]["passed"]


def test_a_hand_int8_invents_or_loses_still_fails_and_the_worst_sample_keeps_its_number():
    ref = _hands()
    test = _int8(ref)
    for i in (2, 5):  # hands where float sees none: 22 of 24 decisions agree
        test[i]["presence"] = np.array([[0.8]], np.float32)
    kinds = infer_kinds(OUTS, ref, None)
    assert not compare(ref, test, kinds, SPEC)["presence"]["passed"]
    test = _int8(ref)
    for i, off in ((4, 60.0), (7, 60.0), (13, 90.0)):  # three hands' points far off, sample 13 the most
        test[i]["points"] = test[i]["points"] + np.float32(off)
    out = compare(ref, test, kinds, SPEC)["points"]
    # named by its number among all 24 samples, not among the 16 judged (where it is the 10th)
    assert out["worst_sample"] == 13 and any("worst sample 13" in f for f in out["failures"]), out


def test_a_raw_logit_flag_is_read_after_its_sigmoid_and_no_flag_judges_nothing():
    ref = _hands()
    for r in ref:  # the face mesh's flag is a raw logit
        p = float(r["presence"].ravel()[0])
        r["presence"] = np.array([[np.log(p / (1 - p))]], np.float32)
    kinds = infer_kinds(OUTS, ref, None)
    assert kinds["presence"].kind == "logits" and kinds["points"].given == "presence", kinds
    assert compare(ref, _int8(ref), kinds, SPEC)["points"]["samples"] == HANDS
    none = [{**r, "presence": np.array([[-9.0]], np.float32)} for r in ref]
    out = compare(none, _int8(none), kinds, SPEC)["points"]
    assert out["passed"] and out["samples"] == 0 and "says no on every held-back sample" in out["not_judged"]


def test_given_is_declared_checked_and_kept_out_of_manifests_that_do_not_use_it():
    name, kind = parse_declaration("points:landmarks:dims=3,given=presence")
    assert (name, kind.given, kind.dims) == ("points", "presence", 3)
    _, flag = parse_declaration("PartitionedCall:1:scores:given=PartitionedCall:0")  # names with ':'
    assert flag.given == "PartitionedCall:0"
    with pytest.raises(InputValidationError, match="unknown option 'given'"):
        parse_declaration("m:mask:given=presence")
    ref = _hands()
    # A declared given names the presence flag: the undeclared outputs are read by it too, and the
    # flag it names is judged on every sample.
    kinds = infer_kinds(OUTS, ref, None, {"points": OutputKind("landmarks", given="handedness", source="declared")})
    assert kinds["points"].given == "handedness" and kinds["handedness"].given is None
    assert kinds["presence"].given == "handedness" and "--output named" in kinds["presence"].reason
    # A declared kind without given is taken as it is: judged on every sample.
    kinds = infer_kinds(OUTS, ref, None, {"points": OutputKind("landmarks", source="declared")})
    assert kinds["points"].given is None and kinds["handedness"].given == "presence"
    with pytest.raises(InputValidationError, match="names no other output"):
        infer_kinds(OUTS, ref, None, {"points": OutputKind("landmarks", given="nothing", source="declared")})
    with pytest.raises(InputValidationError, match="one score or logit per sample"):
        infer_kinds(OUTS, ref, None, {"presence": OutputKind("scores", given="points", source="declared")})
    # manifest: written only when set, and read back
    assert "given" not in typed.to_dict(TensorSpec("x", [1, 2], "float32", kind=OutputKind("landmarks")))["kind"]
    spec = TensorSpec("x", [1, 63], "float32", kind=OutputKind("landmarks", given="presence"))
    back = typed.parse(TensorSpec, typed.to_dict(spec), where="test", error=InputValidationError)
    assert back.kind.given == "presence"


def test_one_flag_without_per_sample_points_changes_nothing():
    """A classifier with two one-value outputs, or per-anchor boxes beside per-anchor scores, has no
    presence flag: every output is judged on every sample."""
    rng = np.random.default_rng(3)
    outs = [TensorSpec("a", [1, 1], "float32"), TensorSpec("b", [1, 1], "float32")]
    ref = [{"a": np.array([[rng.uniform()]], np.float32), "b": np.array([[rng.uniform()]], np.float32)} for _ in range(10)]
    assert all(k.given is None for k in infer_kinds(outs, ref, None).values())
