"""An artifact never decides that a native library gets loaded (issue 13, finding 1).

The audit edited a manifest so that its profile's runtime chain asked for
``external:/path/evil.so`` and recomputed ``profile.sha256``: ``edge-sdk run`` loaded the library
(its constructor ran), a multi-profile folder's availability probe loaded it before any check,
and ``edge-sdk verify`` said OK. Here a real shared library whose constructor writes a marker
file is built with ``cc``; every path must refuse the artifact and leave the marker absent.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import edge_sdk
from edge_sdk.errors import InputValidationError, ManifestError, ProfileError
from edge_sdk.strictjson import dumps_canonical

import rt_artifacts as ra

EVIL_C = r"""
#include <stdio.h>
__attribute__((constructor)) static void evil(void) {
    FILE *f = fopen(MARKER, "w");
    if (f) { fputs("the library ran\n", f); fclose(f); }
}
"""


@pytest.fixture(scope="module")
def arts(tmp_path_factory):
    return ra.tflite_artifacts(tmp_path_factory)


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_SDK_CONFIG", str(tmp_path / "no-config.toml"))
    monkeypatch.setenv("EDGE_SDK_VERIFIED_CACHE", str(tmp_path / "verified"))


@pytest.fixture
def evil(tmp_path):
    """(library path, marker path): a real .so whose constructor writes the marker when loaded."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:  # pragma: no cover - the CI image has a C compiler
        pytest.skip("no C compiler to build the test library")
    marker = tmp_path / "marker-evil-ran"
    lib = tmp_path / "lib" / "evil.so"
    lib.parent.mkdir()
    (tmp_path / "evil.c").write_text(EVIL_C)
    subprocess.run([cc, "-shared", "-fPIC", f'-DMARKER="{marker}"', "-o", str(lib), str(tmp_path / "evil.c")],
                   check=True, capture_output=True)
    return lib, marker


def evil_artifact(src: Path, dst: Path, lib: Path, name: str = "my-board") -> Path:
    """A copy of ``src`` whose profile chain asks for ``external:<lib>`` first, sha256 recomputed,
    for any host architecture (so the old multi-profile probe would have reached it)."""
    folder = ra.copy_artifact(src, dst)
    m = json.loads((folder / "manifest.json").read_text())
    spec = m["profile"]["spec"]
    spec["name"] = name
    spec["host"]["arch"] = []
    spec["runtime"]["chain"] = [{"backend": "litert", "accelerator": f"external:{lib}", "format": "tflite-int8",
                                 "native": True},
                                {"backend": "litert", "accelerator": "xnnpack", "format": "tflite-int8", "native": False}]
    m["profile"] = {"name": name, "spec": spec, "sha256": hashlib.sha256(dumps_canonical(spec)).hexdigest()}
    (folder / "manifest.json").write_text(json.dumps(m, indent=2))
    return folder


def test_load_refuses_and_loads_nothing(arts, tmp_path, evil):
    lib, marker = evil
    folder = evil_artifact(arts["arm-cpu"], tmp_path / "a", lib)
    with pytest.raises(ManifestError, match=r"asks to load the native library .*evil\.so.*not allowed"):
        edge_sdk.load(folder)
    with pytest.raises(ManifestError, match="not allowed"):
        edge_sdk.load(folder, verify=False)  # the policy is not a hash check: it holds without one
    assert not marker.exists()


def test_cli_run_and_verify_refuse_and_load_nothing(arts, tmp_path, evil, cli):
    lib, marker = evil
    folder = evil_artifact(arts["arm-cpu"], tmp_path / "a", lib)
    x = tmp_path / "x.npy"
    np.save(x, ra.sample_inputs(1)[0])
    env = {"EDGE_SDK_CONFIG": str(tmp_path / "no-config.toml")}
    for args in (["run", str(folder), "--input", str(x)], ["verify", str(folder)], ["verify", str(folder), "--no-load"]):
        r = cli(*args, env=env)
        assert r.returncode == 4, (args, r.stdout, r.stderr)
        assert "not allowed" in r.stderr and "Traceback" not in r.stderr
    assert not marker.exists()


def test_multi_profile_folder_checks_before_probing(arts, tmp_path, evil, cli):
    """A `convert` output folder: the evil profile folder is refused before its chain is probed;
    load picks a checked profile and says why the other was refused; verify and bench name it."""
    lib, marker = evil
    out = tmp_path / "out"
    evil_artifact(arts["arm-cpu"], out / "my-board", lib)
    ra.copy_artifact(arts["jetson-orin"], out / "jetson-orin")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with edge_sdk.load(out) as m:
            assert m.profile == "jetson-orin"
            assert any("my-board" in n and "refused" in n and "not allowed" in n for n in m.selection.notes)
    env = {"EDGE_SDK_CONFIG": str(tmp_path / "no-config.toml")}
    r = cli("verify", str(out), env=env)
    assert r.returncode == 4 and "my-board: FAILED" in r.stdout and "jetson-orin: OK" in r.stdout, r.stdout + r.stderr
    r = cli("bench", str(out), "--profile", "jetson", "--runs", "2", "--warmup", "0", "--power", "none", env=env)
    assert r.returncode == 0, r.stderr
    assert not marker.exists()


def test_bench_names_a_refused_profile_folder(arts, tmp_path, evil, cli):
    lib, marker = evil
    out = tmp_path / "out"
    evil_artifact(arts["arm-cpu"], out / "my-board", lib)
    ra.copy_artifact(arts["intel-cpu"], out / "intel-cpu")
    r = cli("bench", str(out), "--runs", "2", "--warmup", "0", "--power", "none",
            env={"EDGE_SDK_CONFIG": str(tmp_path / "no-config.toml")})
    assert "REFUSED out/my-board: refused:" in r.stdout and "not allowed" in r.stdout, r.stdout + r.stderr
    assert r.returncode == 4 and "failed their checks" in r.stderr
    assert not marker.exists()


def test_probe_never_opens_a_library(evil):
    from edge_sdk.runtimes.probe import probe_step

    lib, marker = evil
    assert probe_step("litert", f"external:{lib}").available
    assert not probe_step("litert", "external:/nonexistent/lib.so").available
    assert not marker.exists()


ALLOWED = """
import sys, warnings
warnings.simplefilter("ignore")
import edge_sdk
with edge_sdk.load(sys.argv[1], allow_external_delegates=[sys.argv[2]]) as m:
    print(m.backend, "|", m.selection.skipped[0])
"""


def test_allowed_by_the_caller_it_is_loaded(arts, tmp_path, evil):
    """The other side: when the caller allows the library, it is loaded (so the marker does work).
    It is no real delegate, so LiteRT refuses it after loading and the run falls back, reported."""
    lib, marker = evil
    folder = evil_artifact(arts["arm-cpu"], tmp_path / "a", lib)
    r = subprocess.run([sys.executable, "-c", ALLOWED, str(folder), str(lib)], capture_output=True, text=True,
                       timeout=300, env={**__import__("os").environ, "EDGE_SDK_CONFIG": str(tmp_path / "none.toml")})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("litert/xnnpack |") and "evil.so" in r.stdout
    assert marker.exists()


def test_user_config_file_allows_a_library(arts, tmp_path, evil, monkeypatch):
    lib, marker = evil
    folder = evil_artifact(arts["arm-cpu"], tmp_path / "a", lib)
    from edge_sdk.trust import check_artifact

    with pytest.raises(ManifestError):
        check_artifact(folder)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[trust]\nallow_external_delegates = ["{lib}"]\n')
    monkeypatch.setenv("EDGE_SDK_CONFIG", str(cfg))
    assert check_artifact(folder).profile.name == "my-board"  # the owner's file allows it
    cfg.write_text('[trust]\nallow_external_delegates = ["lib/evil.so"]\n')
    with pytest.raises(InputValidationError, match="not an absolute path"):
        check_artifact(folder)
    cfg.write_text("[trust]\nallow_everything = true\n")
    with pytest.raises(InputValidationError, match="unknown key"):
        check_artifact(folder)
    assert not marker.exists()


def test_a_relative_external_delegate_is_not_a_profile(arts):
    from edge_sdk.profiles import parse_profile

    spec = edge_sdk.resolve_profile("arm-cpu").to_dict()
    spec["runtime"]["chain"][0]["accelerator"] = "external:evil.so"
    with pytest.raises(ProfileError, match="absolute library path"):
        parse_profile(spec, "test")
