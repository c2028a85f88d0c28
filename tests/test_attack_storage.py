"""A full disk or an unwritable --out ends in a clear error, every profile attempted, nothing partial
(issue 43, finding 6: ``OSError 28`` and ``OSError 30`` were internal errors, exit 70, and with a
little space one profile was published and the others never attempted).

The faults are real: a tmpfs of a few KiB mounted for the test (``ENOSPC``), and a read-only
tmpfs (``EROFS``). Mounting needs root, which the CI machine has; where it is not allowed the
disk-full case cannot be made here and says so, and the read-only case uses a folder without
write permission instead (``EACCES``, the same code path).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import rt_artifacts as ra


def _mount(where: Path, options: str) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True)
    return r.returncode == 0


@pytest.fixture
def tiny(tmp_path) -> Path:
    return ra.build_float_onnx(tmp_path / "tiny.onnx", hw=32, channels=16, blocks=2)


@pytest.fixture
def mounts(tmp_path):
    made: list[Path] = []

    def mount(name: str, options: str) -> Path | None:
        where = tmp_path / name
        if not _mount(where, options):
            return None
        made.append(where)
        return where

    yield mount
    for where in made:
        subprocess.run(["umount", str(where)], capture_output=True)


def convert(cli, tiny: Path, out: Path, tmp_path: Path):
    return cli("convert", str(tiny), "--profile", "jetson", "--profile", "intel-cpu", "--calib", "random",
               "--out", str(out), env={"EDGE_SDK_CONFIG": str(tmp_path / "n.toml")}, timeout=600)


def test_a_full_disk_fails_each_profile_cleanly_and_attempts_every_one(cli, tiny, tmp_path, mounts):
    disk = mounts("full", "size=8k")
    if disk is None:
        pytest.skip("cannot mount a tmpfs here (needs root): a full disk cannot be made on this machine")
    out = disk / "out"
    r = convert(cli, tiny, out, tmp_path)
    assert r.returncode == 6, r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    err = r.stderr.split("error: ", 1)[1]
    for prof in ("jetson-orin", "intel-cpu"):  # both attempted, both named with the fault
        assert f"{prof}: could not write it: No space left on device (errno 28" in err, err
    assert "Nothing was published" in err
    left = [p.name for p in out.iterdir()] if out.exists() else []
    assert not [n for n in left if ".partial-" in n or n in ("jetson-orin", "intel-cpu")], left


def test_an_unwritable_out_is_an_input_error_before_any_work(cli, tiny, tmp_path, mounts):
    ro = mounts("ro", "ro,size=64k")
    if ro is not None:
        out, code = ro / "out", "errno 30"
    elif os.geteuid() != 0:
        ro = tmp_path / "locked"
        ro.mkdir()
        ro.chmod(0o555)
        out, code = ro / "out", "errno 13"
    else:  # pragma: no cover - root without mount: permissions do not bind root
        pytest.skip("root cannot mount here, and permissions do not stop root")
    r = convert(cli, tiny, out, tmp_path)
    assert r.returncode == 3, r.stderr
    assert f"Cannot write into the output folder {out}" in r.stderr and code in r.stderr, r.stderr
    assert "converting" not in r.stderr  # refused before any work
