"""``edge-sdk run``: one input through the facade, outputs summary, timings, backend, exit codes."""

from __future__ import annotations

import json

import numpy as np
import pytest

import rt_artifacts as ra


@pytest.fixture(scope="session")
def arts(tmp_path_factory):
    return ra.onnx_artifacts(tmp_path_factory)


def test_run_npy_text(cli, arts, npy):
    r = cli("run", str(arts["intel-cpu"]), "--input", str(npy))
    assert r.returncode == 0, r.stderr
    assert "ran on openvino/CPU (delegate: CPU)" in r.stdout
    assert "#1: class" in r.stdout and "timings (ms):" in r.stdout


def test_run_json_matches_the_library(cli, arts, npy):
    import edge_sdk

    r = cli("run", str(arts["intel-cpu"]), "--input", str(npy), "--json", "--top-k", "2")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["backend"] == "openvino/CPU" and rep["fallback"] is False
    with edge_sdk.load(arts["intel-cpu"]) as m:
        logits = m.infer(np.load(npy)).outputs["logits"][0]
    out = rep["outputs"][0]
    assert out["name"] == "logits" and out["shape"] == [1, 4]
    assert [t["index"] for t in out["top_k"]] == list(np.argsort(-logits)[:2])
    assert set(rep["timings_ms"]) == {"preprocess", "quantize", "inference", "dequantize", "total"}


def test_run_fallback_is_reported_and_strict_exits_5(cli, arts, npy):
    r = cli("run", str(arts["jetson-orin"]), "--input", str(npy))
    assert r.returncode == 0, r.stderr
    assert "[FALLBACK]" in r.stdout and "warning:" in r.stderr
    r = cli("run", str(arts["jetson-orin"]), "--input", str(npy), "--strict")
    assert r.returncode == 5
    assert r.stderr.startswith("error: strict:") and "hint:" in r.stderr and "Traceback" not in r.stderr


def test_run_wrong_shape_exits_3(cli, arts, tmp_path):
    p = tmp_path / "bad.npy"
    np.save(p, np.zeros((1, 3, 8, 8), np.float32))
    r = cli("run", str(arts["intel-cpu"]), "--input", str(p))
    assert r.returncode == 3
    assert "expected shape [1, 8, 8, 3], got [1, 3, 8, 8]" in r.stderr and "Traceback" not in r.stderr


def test_run_npz_and_image(cli, arts, tmp_path):
    from PIL import Image

    z = tmp_path / "x.npz"
    np.savez(z, input=ra.sample_inputs(1)[0])
    assert cli("run", str(arts["intel-cpu"]), "--input", str(z)).returncode == 0
    np.savez(z, wrong=ra.sample_inputs(1)[0], other=ra.sample_inputs(1)[0])
    r = cli("run", str(arts["intel-cpu"]), "--input", str(z))
    assert r.returncode == 3 and "missing ['input']" in r.stderr
    img = tmp_path / "cat.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (20, 30, 3), dtype=np.uint8)).save(img)
    r = cli("run", str(arts["intel-cpu"]), "--input", str(img), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["timings_ms"]["preprocess"] > 0


def test_run_tampered_exits_4(cli, arts, npy, tmp_path):
    folder = ra.copy_artifact(arts["intel-cpu"], tmp_path / "a")
    data = bytearray((folder / "model.bin").read_bytes())
    data[0] ^= 1
    (folder / "model.bin").write_bytes(bytes(data))
    r = cli("run", str(folder), "--input", str(npy))
    assert r.returncode == 4 and "sha256" in r.stderr


def test_run_missing_input_file(cli, arts, tmp_path):
    r = cli("run", str(arts["intel-cpu"]), "--input", str(tmp_path / "nope.npy"))
    assert r.returncode != 0 and "Traceback" not in r.stderr


# ------------------------------------------------------------------ examples/device_app.py
def device_app(*args):
    import subprocess
    import sys

    from conftest import REPO

    return subprocess.run([sys.executable, str(REPO / "examples" / "device_app.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def test_device_app_loops_and_skips_bad_inputs(arts, npy, tmp_path):
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((1, 3, 8, 8), np.float32))
    r = device_app(arts["intel-cpu"], npy, bad, npy, "--strict")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("top-3") == 2 and "on CPU" in r.stdout
    assert "skipping" in r.stderr and "expected shape" in r.stderr and "done: 2 ok, 1 skipped" in r.stderr


def test_device_app_strict_refuses_and_fallback_is_logged(arts, npy):
    r = device_app(arts["jetson-orin"], npy, "--strict")
    assert r.returncode == 5 and "accelerator unavailable" in r.stderr
    r = device_app(arts["jetson-orin"], npy, "--strict", "--allow-fallback")
    assert r.returncode == 0, r.stderr
    assert "FALLBACK" in r.stderr and "CPUExecutionProvider" in r.stdout


def test_device_app_refuses_a_tampered_artifact(arts, npy, tmp_path):
    folder = ra.copy_artifact(arts["intel-cpu"], tmp_path / "a")
    (folder / "model.xml").write_text((folder / "model.xml").read_text().replace("<net", "<net ", 1))
    r = device_app(folder, npy)
    assert r.returncode == 4 and "cannot load" in r.stderr
