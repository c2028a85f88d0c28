"""The manifest is a trust boundary (issue 13, finding 3): strict reading, and verify == load.

Every bad manifest of the audit is refused with a ``ManifestError`` (exit 4) by both ``load`` and
``edge-sdk verify`` - never a ``RecursionError``/``ValueError``/``OSError`` (exit 70) or a hang -
and a seeded corpus of manifest mutations shows that ``verify`` accepts exactly what ``load``
accepts (they run one check function: :func:`edge_sdk.trust.check_artifact`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import warnings
from pathlib import Path

import numpy as np
import pytest

import edge_sdk
from edge_sdk.errors import EdgeSDKError, ManifestError
from edge_sdk.manifest import preprocessing_hash
from edge_sdk.runtimes.verify import verify_one
from edge_sdk.trust import Policy

import rt_artifacts as ra

PLACEHOLDER = "__RAW__"


@pytest.fixture(scope="module")
def arts(tmp_path_factory):
    return ra.onnx_artifacts(tmp_path_factory)


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_SDK_CONFIG", str(tmp_path / "no-config.toml"))
    monkeypatch.setenv("EDGE_SDK_VERIFIED_CACHE", str(tmp_path / "verified"))


def load_verdict(folder) -> str:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            edge_sdk.load(folder).close()
        return "ok"
    except EdgeSDKError as exc:
        return f"refused ({type(exc).__name__})"


def verify_verdict(folder) -> str:
    try:
        verify_one(folder, policy=Policy.resolve())
        return "ok"
    except EdgeSDKError as exc:
        return f"refused ({type(exc).__name__})"


def with_manifest(src: Path, dst: Path, edit=None, raw: str | None = None, text=None) -> Path:
    """A copy of artifact ``src`` whose manifest is edited (dict), given raw, or text-transformed."""
    folder = ra.copy_artifact(src, dst)
    mpath = folder / "manifest.json"
    if raw is not None:
        mpath.write_bytes(raw.encode() if isinstance(raw, str) else raw)
        return folder
    m = json.loads(mpath.read_text())
    if edit is not None:
        edit(m)
    out = json.dumps(m, indent=1)
    if text is not None:
        out = text(out)
    mpath.write_text(out)
    return folder


def set_scale(value):
    def edit(m):
        m["outputs"][0]["dtype"] = "int8"
        m["outputs"][0]["quantization"] = {"scale": value, "zero_point": 0, "dtype": "int8"}
    return edit


# Each case: (id, how the manifest is damaged, a phrase the error must contain)
CASES = [
    ("duplicate-key", dict(text=lambda t: t.replace('"schema_version": 1', '"schema_version": 1, "schema_version": 1', 1)),
     "duplicate key"),
    ("nan-scale", dict(edit=set_scale(PLACEHOLDER), text=lambda t: t.replace(f'"{PLACEHOLDER}"', "NaN")), "NaN"),
    ("infinity-scale", dict(edit=set_scale(PLACEHOLDER), text=lambda t: t.replace(f'"{PLACEHOLDER}"', "-Infinity")),
     "Infinity"),
    ("overflow-scale", dict(edit=set_scale(PLACEHOLDER), text=lambda t: t.replace(f'"{PLACEHOLDER}"', "1e999")),
     "out of range"),
    ("zero-scale", dict(edit=set_scale(0.0)), "finite number above 0"),
    ("negative-scale", dict(edit=set_scale(-0.5)), "finite number above 0"),
    ("zero-point-range", dict(edit=lambda m: (set_scale(0.1)(m), m["outputs"][0]["quantization"].update(zero_point=300))),
     "outside int8"),
    ("5000-digit-int", dict(edit=lambda m: m["artifacts"][0].update(size_bytes=PLACEHOLDER),
                            text=lambda t: t.replace(f'"{PLACEHOLDER}"', "9" * 5000)), "5000 digits"),
    ("deep-nesting", dict(edit=lambda m: m.update(accuracy=PLACEHOLDER),
                          text=lambda t: t.replace(f'"{PLACEHOLDER}"', "[" * 100_000 + "]" * 100_000)), "nested too deeply"),
    ("moderate-nesting", dict(edit=lambda m: m.update(accuracy=PLACEHOLDER),
                              text=lambda t: t.replace(f'"{PLACEHOLDER}"', "[" * 200 + "]" * 200)), "nested too deeply"),
    ("not-utf8", dict(raw=b'{"schema_version": 1, "x": "\xff\xfe"}'), "not UTF-8"),
    ("top-level-list", dict(raw="[1, 2]"), "JSON object"),
    ("truncated", dict(text=lambda t: t[: len(t) // 2]), "not valid JSON"),
    ("oversized", dict(edit=lambda m: m.update(warnings=["x" * 1000] * 5000)), "limit"),
    ("path-control-char", dict(edit=lambda m: m["artifacts"][0].update(path="model\n.onnx")), "not a plain file name"),
    ("path-too-long", dict(edit=lambda m: m["artifacts"][0].update(path="a/" * 600 + "model.onnx")), "not a plain file name"),
    ("path-traversal", dict(edit=lambda m: m["artifacts"][0].update(path="../../etc/passwd")), "leaves the artifact"),
    ("profile-name-path", dict(edit=lambda m: m["profile"].update(name="../../victim")), "invalid profile name"),
    ("profile-name-empty", dict(edit=lambda m: m["profile"].update(name="")), "invalid profile name"),
    ("profile-edited", dict(edit=lambda m: m["profile"]["spec"]["accuracy"].update(min_cosine=0.0)), "sha256"),
    ("preprocessing-edited", dict(edit=lambda m: m["preprocessing"]["spec"].update(scale=1.0)), "preprocessing spec"),
    ("preprocessing-zero-scale", dict(edit=lambda m: (m["preprocessing"]["spec"].update(scale=0.0), m["preprocessing"].update(
        sha256=preprocessing_hash(m["preprocessing"]["spec"])))), "'scale' must be a finite number above 0"),
    ("preprocessing-zero-std", dict(edit=lambda m: (m["preprocessing"]["spec"].update(std=[0.0]), m["preprocessing"].update(
        sha256=preprocessing_hash(m["preprocessing"]["spec"])))), "'std'"),
    ("dynamic-shape", dict(edit=lambda m: m["inputs"][0].update(shape=[1, -1, 8, 3])), "non-static shape"),
    ("io-garbage", dict(edit=lambda m: m["backend_options"].update(io={"openvino-ir": {"inputs": 3}})), "expected a table"),
]


@pytest.mark.parametrize("case, how, phrase", CASES, ids=[c[0] for c in CASES])
def test_bad_manifest_refused_by_load_and_verify(arts, tmp_path, case, how, phrase):
    folder = with_manifest(arts["intel-cpu"], tmp_path / case, **how)
    for check in (lambda: edge_sdk.load(folder), lambda: verify_one(folder, policy=Policy.resolve())):
        with pytest.raises(ManifestError) as err:
            check()
        assert phrase in err.value.message, err.value.message


def test_cli_gives_exit_4_not_70(arts, tmp_path, cli):
    """The audit's exit-70 cases (RecursionError, ValueError, OSError) are one-line errors now."""
    env = {"EDGE_SDK_CONFIG": str(tmp_path / "no-config.toml")}
    how = {case: how for case, how, _ in CASES}
    deep = with_manifest(arts["jetson-orin"], tmp_path / "deep", **how["deep-nesting"])
    digits = with_manifest(arts["jetson-orin"], tmp_path / "digits", **how["5000-digit-int"])
    for target in (deep, digits, "x" * 5000, tmp_path / ("y" * 300)):
        r = cli("verify", str(target), env=env)
        assert r.returncode == 4, (str(target)[:80], r.stderr)
        assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr


def test_fifo_manifest_does_not_hang(arts, tmp_path, cli):
    folder = ra.copy_artifact(arts["jetson-orin"], tmp_path / "fifo")
    (folder / "manifest.json").unlink()
    os.mkfifo(folder / "manifest.json")
    r = cli("verify", str(folder), env={"EDGE_SDK_CONFIG": str(tmp_path / "none.toml")}, timeout=60)
    assert r.returncode == 4 and "FIFO" in r.stderr, r.stderr
    with pytest.raises(ManifestError, match="FIFO"):
        edge_sdk.load(folder)


def test_fifo_or_symlink_artifact_file_is_refused(arts, tmp_path):
    folder = ra.copy_artifact(arts["jetson-orin"], tmp_path / "f")
    (folder / "model.onnx").unlink()
    os.mkfifo(folder / "model.onnx")
    with pytest.raises(ManifestError, match="not a regular file"):
        edge_sdk.load(folder)
    folder = ra.copy_artifact(arts["jetson-orin"], tmp_path / "s")
    (tmp_path / "elsewhere.onnx").write_bytes((folder / "model.onnx").read_bytes())
    (folder / "model.onnx").unlink()
    (folder / "model.onnx").symlink_to(tmp_path / "elsewhere.onnx")
    with pytest.raises(ManifestError, match="symbolic link"):
        edge_sdk.load(folder)


def test_preprocessing_spec_is_checked_against_its_sha256(arts, tmp_path):
    """The audit changed preprocessing.spec without its sha256 and top-1 changed; now it is refused,
    and the untouched artifact's spec still hashes to what the manifest says."""
    m = json.loads((arts["intel-cpu"] / "manifest.json").read_text())
    assert m["preprocessing"]["sha256"] == preprocessing_hash(m["preprocessing"]["spec"]) != ""
    folder = with_manifest(arts["intel-cpu"], tmp_path / "p", edit=lambda d: d["preprocessing"]["spec"].update(mean=[0.4]))
    with pytest.raises(ManifestError, match="preprocessing spec does not match its sha256"):
        edge_sdk.load(folder)


# ----------------------------------------------------------------------------- verify == load
def _paths(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


def mutate(m: dict, rnd: random.Random) -> tuple[dict | None, str]:
    """One seeded mutation of a manifest dict: (new dict, description), or (None, raw text)."""
    m = copy.deepcopy(m)
    paths = list(_paths(m))
    # Half the time, somewhere both must tolerate (reports, notes, names): a corpus of only fatal
    # edits would not show that verify accepts what load accepts.
    lenient = [p for p in paths if p[0] in ("accuracy", "tools", "warnings", "calibration", "created_at", "source",
                                             "static_shapes", "sdk_version") or p[-1] in ("layout", "precision")]
    soft = bool(lenient) and rnd.random() < 0.5
    path = rnd.choice(lenient if soft else paths)
    parent = m
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    old = parent[key]
    if soft:  # a change of value that keeps its type
        op = 3 if isinstance(old, (int, float)) and not isinstance(old, bool) else 5 if isinstance(old, list) and old \
            else 6 if isinstance(old, str) else rnd.randrange(9)
    else:
        op = rnd.randrange(9)
    if op == 0 and isinstance(parent, dict):
        del parent[key]
    elif op == 1:
        parent[key] = None
    elif op == 2:
        parent[key] = rnd.choice(["", "../x", "x" * 300, "\u00e9", "model.onnx", "int8", "float32", "CPU"])
    elif op == 3 and isinstance(old, (int, float)) and not isinstance(old, bool):
        parent[key] = rnd.choice([0, -1, 1, old + 1, old * 2, -old, 2**40, 0.5, 1e300])
    elif op == 4:
        parent[key] = rnd.choice([[], {}, True, 7, [1, 2], {"a": 1}])
    elif op == 5 and isinstance(old, list) and old:
        parent[key] = old + [copy.deepcopy(old[0])]
    elif op == 6 and isinstance(old, str):
        parent[key] = old[:-1] + chr((ord(old[-1]) + 1) % 128 or 65) if old else "a"
    elif op == 7:
        text = json.dumps(m)
        pos = rnd.randrange(len(text))
        return None, text[:pos] + chr(rnd.randrange(32, 127)) + text[pos + 1:]
    else:
        text = json.dumps(m)
        return None, text.replace('"inputs"', '"inputs": [], "inputs"', 1)
    return m, f"{op} at {'/'.join(map(str, path))}"


def test_verify_and_load_agree_on_a_seeded_manifest_corpus(arts, tmp_path):
    """150 mutated manifests (seeded) of an OpenVINO and an ONNX artifact: same verdict every time."""
    rnd = random.Random(1313)
    verdicts, disagree = [], []
    for i in range(150):
        src = arts["intel-cpu"] if i % 2 else arts["jetson-orin"]
        m, what = mutate(json.loads((src / "manifest.json").read_text()), rnd)
        folder = with_manifest(src, tmp_path / f"m{i:03d}", **({"raw": what} if m is None else {"edit": lambda d, m=m: (d.clear(), d.update(m))}))
        v, lv = verify_verdict(folder), load_verdict(folder)
        verdicts.append((v == "ok", lv == "ok"))
        if (v == "ok") != (lv == "ok"):
            disagree.append(f"case {i} ({what if m is not None else 'raw text'}): verify {v}, load {lv}")
    assert not disagree, disagree
    accepted = sum(1 for v, _ in verdicts if v)
    print(f"verify/load agreement: {len(verdicts)} mutated manifests, {accepted} accepted by both, "
          f"{len(verdicts) - accepted} refused by both, {len(disagree)} disagreements")
    assert 30 <= accepted <= 120, accepted  # the corpus has both kinds, or it proves nothing


def test_unchanged_artifacts_still_verify_and_load(arts):
    for name in ("jetson-orin", "intel-cpu", "intel-npu"):
        assert verify_verdict(arts[name]) == load_verdict(arts[name]) == "ok"


def test_sha_of_profile_is_over_the_stored_spec(arts, tmp_path):
    """A later edge-sdk adding a profile field with a default must not call older artifacts edited:
    the embedded profile is hashed as stored. Leaving a defaulted key out of an old spec still verifies."""
    def drop_default(m):
        spec = m["profile"]["spec"]
        spec.pop("notes", None)
        m["profile"]["sha256"] = hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    folder = with_manifest(arts["jetson-orin"], tmp_path / "old", edit=drop_default)
    assert verify_verdict(folder) == load_verdict(folder) == "ok"
    x = np.zeros([1, 8, 8, 3], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with edge_sdk.load(folder) as model:
            assert model.infer(x).outputs["logits"].shape == (1, 4)
