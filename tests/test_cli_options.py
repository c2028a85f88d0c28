"""Shared CLI option groups (#16): `run` and `bench` declare --profile/--backend/--device/--strict/--threads
once, --backend's choices come from the backend registry, --json is a flag everywhere and --json-out FILE
writes the report; the debug flag travels in the click context, not module state."""

from __future__ import annotations

import json

import pytest

import rt_artifacts as ra
from edge_sdk.cli import main


@pytest.fixture(scope="session")
def arts(tmp_path_factory):
    return ra.onnx_artifacts(tmp_path_factory)


@pytest.mark.parametrize("command", ["run", "bench"])
def test_threads_below_one_is_refused_the_same_way(command, arts, npy, capsys):
    args = [command, str(arts["intel-cpu"]), "--threads", "0"] + (["--input", str(npy)] if command == "run" else [])
    assert main(args) == 2
    assert "--threads" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["run", "bench"])
def test_backend_choices_come_from_the_registry(command, arts, npy, capsys):
    from edge_sdk.runtimes.select import BACKENDS

    args = [command, str(arts["intel-cpu"]), "--backend", "nosuch"] + (["--input", str(npy)] if command == "run" else [])
    assert main(args) == 2
    err = capsys.readouterr().err
    for name in BACKENDS.names():
        assert name in err
    # a backend registered later (a plugin) is a valid choice without an edit to the CLI
    import dataclasses

    from edge_sdk.backends import get_backend, register_backend, unregister_backend

    register_backend(dataclasses.replace(get_backend("onnxruntime"), name="toyrt"))
    try:
        assert main([command, "--help"]) == 0
        assert "toyrt" in capsys.readouterr().out
    finally:
        unregister_backend("toyrt")


def test_run_json_flag_and_json_out_file(arts, npy, tmp_path, capsys):
    out = tmp_path / "run.json"
    assert main(["run", str(arts["intel-cpu"]), "--input", str(npy), "--json", "--json-out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    written = json.loads(out.read_text())
    assert printed == written and written["backend"] == "openvino/CPU"


def test_bench_json_flag_prints_and_json_out_writes(arts, tmp_path, capsys):
    out = tmp_path / "b.json"
    assert main(["bench", str(arts["intel-cpu"]), "--runs", "3", "--warmup", "0", "--power", "none",
                 "--json", "--json-out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["results"][0]["latency_ms"]["p50"] == json.loads(out.read_text())["results"][0]["latency_ms"]["p50"]


@pytest.mark.parametrize("legacy", ["report.json", "-"])
def test_old_bench_json_file_form_gets_a_hint(arts, tmp_path, capsys, legacy):
    assert main(["bench", str(arts["intel-cpu"]), "--runs", "3", "--json", str(tmp_path / legacy) if legacy != "-" else "-"]) == 3
    err = capsys.readouterr().err
    assert "--json-out FILE" in err and not (tmp_path / legacy).exists()


def test_unwritable_json_out_fails_before_running(arts, npy, tmp_path, capsys):
    assert main(["run", str(arts["intel-cpu"]), "--input", str(npy), "--json-out", str(tmp_path / "nodir" / "r.json")]) == 3
    assert "--json-out" in capsys.readouterr().err


def test_debug_flag_travels_in_the_click_context(tmp_path, capsys):
    missing = str(tmp_path / "nothing-here")
    assert main(["run", missing, "--input", missing]) != 0
    assert "Traceback" not in capsys.readouterr().err
    assert main(["--debug", "run", missing, "--input", missing]) != 0
    assert "Traceback" in capsys.readouterr().err
    import edge_sdk.cli as cli_mod

    assert not hasattr(cli_mod, "_STATE")
