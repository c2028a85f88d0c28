"""No input crashes the host process (issue 13): the audit's damaged-model corpora, the crash guard.

Every corpus case is a real artifact whose model file has one damaged byte *and* a manifest
updated to match (the hash check passes, as for an attacker who edits both). A host process
loads each case with ``edge_sdk.load`` and runs it; a host that dies is counted and restarted.
Before this work, 98 of 320 flips in the first 160 bytes of the coral .tflite killed the host
(SIGSEGV/SIGBUS) and 5 raised ``MemoryError``; now every case loads or is refused with an
``EdgeSDKError``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest

import edge_sdk
from edge_sdk.errors import ModelLoadError

import hardening_corpus as hc
import rt_artifacts as ra


@pytest.fixture(scope="module")
def arts(tmp_path_factory):
    return ra.tflite_artifacts(tmp_path_factory)


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """No user config file, a private verified-models cache."""
    monkeypatch.setenv("EDGE_SDK_CONFIG", str(tmp_path / "no-config.toml"))
    monkeypatch.setenv("EDGE_SDK_VERIFIED_CACHE", str(tmp_path / "verified"))
    monkeypatch.delenv("EDGE_SDK_CRASH_GUARD", raising=False)


def host_env(tmp_path) -> dict:
    return {"EDGE_SDK_CONFIG": str(tmp_path / "no-config.toml"), "EDGE_SDK_VERIFIED_CACHE": str(tmp_path / "host-cache")}


def assert_clean(run: hc.HostRun) -> None:
    assert run.host_crashes == 0, f"{run.summary()}; crashed on {run.crashed_on[:5]}"
    assert not run.other, f"refusals that are not EdgeSDKError: {run.other[:5]}"
    assert sum(run.outcomes.values()) == run.cases


def test_tflite_header_flips_never_crash_the_host(arts, tmp_path):
    """320 single-byte flips in the first 160 bytes (160 per TFLite artifact), hashes updated."""
    cases = (hc.byte_flips(arts["coral-edgetpu"], tmp_path / "c", "model.tflite", 160, seed=13, span=160)
             + hc.byte_flips(arts["arm-cpu"], tmp_path / "a", "model.tflite", 160, seed=14, span=160))
    run = hc.run_host(cases, host_env(tmp_path))
    assert_clean(run)
    assert run.cases >= 300
    # The damage is real: most flips of the header make the file invalid (the rest hit padding or names).
    assert run.outcomes["REFUSED"] >= 200, run.summary()


def test_onnx_and_openvino_flips_never_crash_the_host(arts, tmp_path):
    cases = (hc.byte_flips(arts["jetson-orin"], tmp_path / "o", "model.onnx", 100, seed=21)
             + hc.byte_flips(arts["intel-cpu"], tmp_path / "x", "model.xml", 60, seed=22)
             + hc.byte_flips(arts["intel-cpu"], tmp_path / "b", "model.bin", 40, seed=23))
    run = hc.run_host(cases, host_env(tmp_path))
    assert_clean(run)
    assert run.outcomes["REFUSED"] >= 80, run.summary()


def crashing_tflite(src, dst):
    """A well-formed .tflite that LiteRT 2.1 segfaults on (:func:`hardening_corpus.crash_conv2d`)."""
    folder = ra.copy_artifact(src, dst)
    (folder / "model.tflite").write_bytes(hc.crash_conv2d((folder / "model.tflite").read_bytes()))
    hc.rehash(folder, "model.tflite")
    return folder


RAW_LITERT = """
import sys, numpy as np
from ai_edge_litert.interpreter import Interpreter
it = Interpreter(model_path=sys.argv[1]); it.allocate_tensors()
d = it.get_input_details()[0]; it.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"])); it.invoke()
"""


def test_guard_turns_a_native_crash_into_model_load_error(arts, tmp_path):
    folder = crashing_tflite(arts["coral-edgetpu"], tmp_path / "crash")
    # The file really kills a process that loads it without the guard.
    raw = subprocess.run([sys.executable, "-c", RAW_LITERT, str(folder / "model.tflite")], capture_output=True, timeout=120)
    assert raw.returncode == -signal.SIGSEGV
    from edge_sdk.runtimes.litert import LiteRTRunner

    LiteRTRunner.validate_container(folder / "model.tflite", {})  # well-formed: the pre-check cannot see it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ModelLoadError, match=r"crashed the litert runtime in a trial load \(SIGSEGV\)"):
            edge_sdk.load(folder)
        with pytest.raises(ModelLoadError, match="SIGSEGV"):
            edge_sdk.load(folder, verify=False)  # unverified files are trialled every time
    assert not list((tmp_path / "verified").glob("*.json"))  # a failed trial is never cached


def test_cli_run_verify_and_bench_survive_a_crashing_model(arts, tmp_path, cli):
    folder = crashing_tflite(arts["coral-edgetpu"], tmp_path / "crash")
    x = tmp_path / "x.npy"
    np.save(x, np.zeros([1, 8, 8, 3], np.float32))
    env = host_env(tmp_path)
    for args in (["run", str(folder), "--input", str(x)], ["verify", str(folder)],
                 ["bench", str(folder), "--runs", "3", "--warmup", "0", "--power", "none"]):
        r = cli(*args, env=env, timeout=300)
        assert r.returncode == 4, (args, r.stdout, r.stderr)
        assert "crashed the litert runtime" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_verified_cache_makes_later_loads_free(arts, tmp_path):
    cache = tmp_path / "verified"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with edge_sdk.load(arts["arm-cpu"]) as m:
            assert m.details["crash_guard"] == "trial"
        assert len(list(cache.glob("*.json"))) == 1
        t = time.perf_counter()
        with edge_sdk.load(arts["arm-cpu"]) as m:
            assert m.details["crash_guard"] == "cached"
        assert time.perf_counter() - t < 1.0
        # Unverified files are never vouched for by the cache, and the caller may opt out.
        with edge_sdk.load(arts["arm-cpu"], verify=False) as m:
            assert m.details["crash_guard"] == "trial"
        with edge_sdk.load(arts["arm-cpu"], crash_guard=False) as m:
            assert m.details["crash_guard"] == "off"
        with edge_sdk.load(arts["arm-cpu"], verified_cache=tmp_path / "other") as m:
            assert m.details["crash_guard"] == "trial"  # another cache knows nothing yet
    assert len(list(cache.glob("*.json"))) == 1


def test_crash_guard_env_opt_out(arts, monkeypatch):
    monkeypatch.setenv("EDGE_SDK_CRASH_GUARD", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with edge_sdk.load(arts["jetson-orin"]) as m:
            assert m.details["crash_guard"] == "off"


def test_cache_key_covers_every_file_and_the_io_contract(arts, tmp_path):
    """An IR whose .bin changed is a different model: a passed trial of the old one does not cover it."""
    from edge_sdk.runtimes.base import RunnerConfig
    from edge_sdk.runtimes.sandbox import CrashGuard

    guard = CrashGuard(tmp_path / "c")
    cfg = RunnerConfig(arts["intel-cpu"] / "model.xml", "CPU", model_sha256="a", file_sha256={"model.xml": "a", "model.bin": "b"})
    other_bin = RunnerConfig(arts["intel-cpu"] / "model.xml", "CPU", model_sha256="a", file_sha256={"model.xml": "a", "model.bin": "c"})
    io = {"inputs": [{"name": "input", "shape": [1, 8, 8, 3]}]}
    keys = {guard.cache_key("openvino", cfg, io), guard.cache_key("openvino", other_bin, io),
            guard.cache_key("openvino", cfg, {"inputs": [{"name": "input", "shape": [1, 8, 8, 4]}]}),
            guard.cache_key("onnxruntime", cfg, io)}
    assert len(keys) == 4


def test_litert_close_while_other_threads_infer(arts):
    """close() from one thread while others infer: a clean ModelLoadError, never AttributeError."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = edge_sdk.load(arts["arm-cpu"])
    x = ra.sample_inputs(1, seed=3)[0]
    errors: list[BaseException] = []
    started = threading.Barrier(5)

    def worker():
        started.wait()
        try:
            for _ in range(100_000):
                model.infer(x)
        except BaseException as exc:  # noqa: BLE001 - collected and checked below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    started.wait()
    time.sleep(0.05)
    model.close()
    for t in threads:
        t.join(30)
    assert len(errors) == 4 and all(type(e) is ModelLoadError and "closed" in e.message for e in errors), errors
