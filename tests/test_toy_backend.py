"""A new device is one room (#16): a backend and a profile defined only in tests/toy_backend/ (a runner
class with its descriptor, and a TOML) appear in `profiles list`, `doctor`, the `--backend` choices of
`run` and `bench`, and load -> infer round-trips through the facade, the crash guard's child included."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import rt_artifacts as ra
from edge_sdk.cli import main
from edge_sdk.manifest import TensorSpec

TOY = Path(__file__).resolve().parent / "toy_backend"


@pytest.fixture
def toy(monkeypatch, tmp_path):
    from edge_sdk import backends, profiles

    monkeypatch.syspath_prepend(str(TOY))
    monkeypatch.setenv("EDGE_SDK_PLUGINS", "toy_runner")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TOY), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("EDGE_SDK_PROFILE_PATH", str(TOY))
    monkeypatch.setenv("EDGE_SDK_VERIFIED_CACHE", str(tmp_path / "verified"))
    profiles._builtin_all.cache_clear()
    yield
    backends.unregister_backend("toy")
    backends._plugins_loaded.discard("toy_runner")
    sys.modules.pop("toy_runner", None)
    monkeypatch.delenv("EDGE_SDK_PROFILE_PATH")
    profiles._builtin_all.cache_clear()


def toy_artifact(folder: Path, tmp_path: Path, k: int = 6, n: int = 3):
    rng = np.random.default_rng(0)
    w, b = rng.normal(size=(k, n)).astype(np.float32), rng.normal(size=n).astype(np.float32)
    src = tmp_path / "toy.npz"
    np.savez(src, w=w, b=b)
    ra.write_artifact(folder, "toy-npu", [(src, "model.npz", "toy-npz", "model")],
                      [TensorSpec("x", [1, k], "float32")], [TensorSpec("y", [1, n], "float32")])
    return folder, w, b


def test_unknown_until_registered(monkeypatch):
    from edge_sdk.backends import backend_names
    from edge_sdk.profiles import resolve_profile
    from edge_sdk.errors import ProfileError

    monkeypatch.delenv("EDGE_SDK_PLUGINS", raising=False)
    assert "toy" not in backend_names()
    with pytest.raises(ProfileError, match="artifact.formats.*'toy-npz'"):
        resolve_profile(str(TOY / "toy-npu.toml"))


def test_toy_profile_and_backend_everywhere(toy, capsys):
    assert main(["profiles", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert "toy-npu" in rows and "intel-cpu" in rows

    assert main(["doctor", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["backends"]["toy"]["formats"] == ["toy-npz"] and rep["backends"]["toy"]["toy_npu"] is False
    row = next(r for r in rep["profiles"] if r["profile"] == "toy-npu")
    assert row["status"] == "fallback" and row["would_run_on"] == "toy/cpu"

    os.environ["TOY_NPU_PRESENT"] = "1"
    try:
        assert main(["doctor", "--json"]) == 0
        row = next(r for r in json.loads(capsys.readouterr().out)["profiles"] if r["profile"] == "toy-npu")
        assert row["status"] == "native" and row["would_run_on"] == "toy/TOYNPU"
    finally:
        del os.environ["TOY_NPU_PRESENT"]

    for command in ("run", "bench"):
        assert main([command, "--help"]) == 0
        assert "toy" in capsys.readouterr().out.split("--backend", 1)[1].split("\n  --", 1)[0]


def test_load_infer_round_trip_with_the_crash_guard(toy, tmp_path):
    import edge_sdk

    folder, w, b = toy_artifact(tmp_path / "toy-art", tmp_path)
    x = np.random.default_rng(1).normal(size=(1, w.shape[0])).astype(np.float32)
    with pytest.warns(edge_sdk.FallbackWarning):
        model = edge_sdk.load(folder)  # the crash guard trial-loads it in a child process first
    with model:
        r = model.infer({"x": x})
        np.testing.assert_allclose(r["y"], x @ w + b, rtol=1e-6)
        assert r.backend == "toy/cpu" and r.fallback
        assert model.details["toy"] == f"{w.shape[0]}x{w.shape[1]} matrix"
        with pytest.raises(edge_sdk.InputValidationError, match="shape"):
            model.infer({"x": np.zeros((1, w.shape[0] + 1), np.float32)})
    assert list((tmp_path / "verified").iterdir()), "the crash guard's child did not record the trial load"


def test_cli_run_with_backend_choice(toy, tmp_path, capsys):
    folder, w, b = toy_artifact(tmp_path / "toy-art", tmp_path)
    x = np.ones((1, w.shape[0]), np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(folder), "--input", str(tmp_path / "x.npy"), "--backend", "toy", "--device", "cpu",
                 "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["backend"] == "toy/cpu" and rep["fallback"] is False


def test_corrupt_toy_model_is_a_model_load_error(toy, tmp_path):
    import edge_sdk

    folder, _, _ = toy_artifact(tmp_path / "toy-art", tmp_path)
    (folder / "model.npz").write_bytes(b"not a zip")
    with pytest.raises(edge_sdk.ManifestError):  # the sha256 no longer matches: tampering caught first
        edge_sdk.load(folder)


def test_builtin_descriptors_match_their_runners():
    from edge_sdk.backends import backends, cpu_accelerators
    from edge_sdk.runtimes.probe import StepStatus

    for name, desc in backends().items():
        runner = desc.runner_class()
        assert runner.backend == name and tuple(runner.formats) == desc.formats, name
        assert isinstance(desc.probe_step(desc.default_accelerator), StepStatus)
    assert {"xnnpack", "CPU", "CPUExecutionProvider"} <= cpu_accelerators()


def test_a_plugin_that_cannot_be_imported_is_a_clear_error_every_time(monkeypatch, cli):
    from edge_sdk.backends import backend_names
    from edge_sdk.errors import InputValidationError

    monkeypatch.setenv("EDGE_SDK_PLUGINS", "no_such_edge_plugin")
    for _ in range(2):  # not only on the first read of the registry
        with pytest.raises(InputValidationError, match="no_such_edge_plugin"):
            backend_names()
    r = cli("doctor")
    assert r.returncode == 3 and "EDGE_SDK_PLUGINS" in r.stderr and "Traceback" not in r.stderr


def test_a_profile_path_file_repeating_a_builtin_name_is_reported_and_skipped(tmp_path, monkeypatch):
    from edge_sdk import profiles

    (tmp_path / "mine.toml").write_text((profiles._builtin_root() / "intel-cpu.toml").read_text())
    monkeypatch.setenv("EDGE_SDK_PROFILE_PATH", str(tmp_path))
    profiles._builtin_all.cache_clear()
    try:
        errors = profiles.builtin_profile_errors()
        assert "already defined by built-in profile intel-cpu.toml" in errors[str(tmp_path / "mine.toml")].message
        assert profiles.resolve_profile("intel-cpu").source == "built-in profile intel-cpu.toml"
    finally:
        monkeypatch.delenv("EDGE_SDK_PROFILE_PATH")
        profiles._builtin_all.cache_clear()


def test_a_broken_plugin_or_probe_is_a_message_not_a_traceback(tmp_path, monkeypatch, cli):
    import dataclasses

    from edge_sdk.backends import get_backend, register_backend, unregister_backend

    (tmp_path / "broken_plugin.py").write_text("raise RuntimeError('half-installed SDK')\n")
    r = cli("doctor", env={"EDGE_SDK_PLUGINS": "broken_plugin", "PYTHONPATH": str(tmp_path)})
    assert r.returncode == 3 and "RuntimeError: half-installed SDK" in r.stderr and "Traceback" not in r.stderr

    def boom(accelerator):
        raise OSError("driver gone")

    register_backend(dataclasses.replace(get_backend("onnxruntime"), name="toyboom", probe=boom))
    try:
        st = get_backend("toyboom").probe_step("CPUExecutionProvider")
        assert not st.available and "OSError: driver gone" in st.reason
    finally:
        unregister_backend("toyboom")
