"""The hashed file is the file that runs (issue 43, finding 4).

The audit ran ``load`` while a thread swapped ``model.onnx`` between the artifact's model and
another valid one: the runtime re-opened the file by path after the door had hashed it, and a
passed trial was cached by that hash, so 22 of 400 loads ran bytes that were never hashed. Now
each runner is handed bytes read once and checked against the manifest
(``RunnerConfig.read_checked``; the crash guard's child does the same), never the path.

Two generators: a deterministic one that replaces a file right after the door passed it (every
backend here, crash guard on and off), and the audit's race (a thread swapping the file while
loads run), which asserts that no load ran the other model's bytes.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.errors import ManifestError, ModelLoadError

import rt_artifacts as ra

pytestmark = pytest.mark.usefixtures("isolated")  # tests/conftest.py


@pytest.fixture(scope="module")
def arts(tmp_path_factory):
    return ra.tflite_artifacts(tmp_path_factory)


@pytest.fixture(scope="module")
def other_onnx(tmp_path_factory):
    """A second valid QDQ model with the same I/O and other weights (different outputs)."""
    work = tmp_path_factory.mktemp("other")
    f = ra.build_float_onnx(work / "float.onnx", seed=7)
    return ra.build_qdq_onnx(f, work / "qdq.onnx")


load = ra.load_quiet

def flipped(path: Path) -> bytes:
    """Other bytes that still pass the cheap container checks (so only the hash can tell)."""
    if path.suffix == ".xml":
        return path.read_bytes() + b"<!-- swapped -->\n"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    return bytes(data)


CASES = {"jetson-orin": "model.onnx", "intel-cpu": "model.xml", "intel-cpu/bin": "model.bin",
         "arm-cpu": "model.tflite"}


@pytest.mark.parametrize("crash_guard", [False, True], ids=["guard-off", "guard-on"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_file_replaced_after_the_door_is_never_run(arts, tmp_path, monkeypatch, case, crash_guard):
    import edge_sdk.trust as trust

    folder = ra.copy_artifact(arts[case.split("/")[0]], tmp_path / "a")
    target = folder / CASES[case]
    with load(folder) as m:  # the artifact itself loads (and, guard on, its trial is cached by hash)
        assert m.profile == case.split("/")[0]
    door = trust.check_artifact

    def check_then_swap(*a, **kw):
        checked = door(*a, **kw)
        target.write_bytes(flipped(target))  # after the hashes were checked, before any runtime reads
        return checked

    monkeypatch.setattr(trust, "check_artifact", check_then_swap)
    with pytest.raises(ModelLoadError, match=f"{CASES[case]} changed after the artifact was checked"):
        load(folder, crash_guard=crash_guard)


def test_load_verify_false_still_reads_edited_files(arts, other_onnx, tmp_path):
    """verify=False (development) skips the hash checks, and so does the runner's read."""
    folder = ra.copy_artifact(arts["jetson-orin"], tmp_path / "a")
    shutil.copyfile(other_onnx, folder / "model.onnx")
    x = ra.sample_inputs(1)[0]
    with load(folder, verify=False, crash_guard=False) as m:
        m.infer({"input": x})
    folder2 = ra.copy_artifact(arts["jetson-orin"], tmp_path / "b")
    (folder2 / "model.onnx").write_bytes(flipped(folder2 / "model.onnx"))
    with pytest.raises(ManifestError, match="sha256"):
        load(folder2)


@pytest.mark.parametrize("crash_guard", [False, True], ids=["guard-off", "guard-on"])
def test_a_racing_swap_never_runs_unhashed_bytes(arts, other_onnx, tmp_path, crash_guard):
    """The audit's race: a thread keeps swapping model.onnx between the artifact's model and another
    valid one; every load either refuses cleanly or runs the hashed model (its outputs, bit for bit)."""
    folder = ra.copy_artifact(arts["jetson-orin"], tmp_path / "a")
    mine, other = (folder / "model.onnx").read_bytes(), other_onnx.read_bytes()
    x = ra.sample_inputs(1, seed=5)[0]
    with load(folder, crash_guard=False) as m:
        want = m.infer({"input": x}, raw=True)["logits"]
    (tmp_path / "o.onnx").write_bytes(other)
    with load(ra.write_artifact(tmp_path / "o", "jetson-orin", [(tmp_path / "o.onnx", "model.onnx", "onnx-qdq", "model")],
                                [ra.TensorSpec("input", [1, 8, 8, 3], "float32", None, "NHWC")], ra.FLOAT_IO[1]),
              crash_guard=False) as m:
        assert not np.array_equal(m.infer({"input": x}, raw=True)["logits"], want)  # the swap is visible
    stop = threading.Event()

    def swapper():
        tmp = folder / ".swap"
        i = 0
        while not stop.is_set():
            tmp.write_bytes(other if i % 2 == 0 else mine)
            os.replace(tmp, folder / "model.onnx")
            i += 1

    t = threading.Thread(target=swapper, daemon=True)
    t.start()
    outcomes = {"ran the hashed model": 0, "refused": 0}
    try:
        for _ in range(60):
            try:
                with load(folder, crash_guard=crash_guard) as m:
                    got = m.infer({"input": x}, raw=True)["logits"]
            except ModelLoadError as exc:  # ManifestError (the door) or the runner's own check
                assert "sha256" in exc.message or "the manifest says" in exc.message, exc.message
                outcomes["refused"] += 1
                continue
            np.testing.assert_array_equal(got, want)  # never the other model's outputs
            outcomes["ran the hashed model"] += 1
    finally:
        stop.set()
        t.join()
    assert sum(outcomes.values()) == 60, outcomes

