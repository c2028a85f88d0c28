"""Bad user input is a clear one-line error before native code (issue 13, findings 4, 5, 7).

Profiles (binary, FIFO, path-like names, NaN or out-of-range thresholds), preprocessing specs
(``scale=1/0``, zero std), calibration data with NaN/Inf (the TFLite quantizer segfaulted on one
+Inf), power meters printing impossible readings, report paths that cannot be written, and a
``convert`` output folder holding a corrupt profile.
"""

from __future__ import annotations

import json
import math
import os
import threading

import numpy as np
import pytest

from edge_sdk import preprocess as pp
from edge_sdk.errors import CalibrationError, InputValidationError, ProfileError
from edge_sdk.manifest import TensorSpec
from edge_sdk.profiles import load_profile_file, parse_profile, resolve_profile

import rt_artifacts as ra


@pytest.fixture(scope="module")
def arts(tmp_path_factory):
    return ra.onnx_artifacts(tmp_path_factory)


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_SDK_CONFIG", str(tmp_path / "no-config.toml"))
    monkeypatch.setenv("EDGE_SDK_VERIFIED_CACHE", str(tmp_path / "verified"))


def arm_spec() -> dict:
    return resolve_profile("arm-cpu").to_dict()


# ----------------------------------------------------------------------------- profiles
@pytest.mark.parametrize("name", ["../../victim", "", "a/b", ".hidden", "x" * 65, "a\\b", "with space", "é"])
def test_profile_name_is_an_identifier_never_a_path(name):
    with pytest.raises(ProfileError, match="invalid profile name"):
        parse_profile(dict(arm_spec(), name=name), "test")


def test_profile_aliases_are_identifiers_too():
    with pytest.raises(ProfileError, match=r"aliases\[0\]"):
        parse_profile(dict(arm_spec(), aliases=["../x"]), "test")


@pytest.mark.parametrize("key, value, phrase", [
    ("min_cosine", math.nan, "finite"),
    ("min_cosine", -0.5, "between 0 and 1"),
    ("min_cosine", 1.5, "between 0 and 1"),
    ("min_top1_agreement", -1.0, "between 0 and 1"),
    ("min_sqnr_db", -10.0, "0 or more"),
    ("min_sqnr_db", math.inf, "finite"),
    ("holdout_fraction", 0.0, "between 0 and 1"),
])
def test_nan_negative_or_out_of_range_thresholds_refused(key, value, phrase):
    spec = arm_spec()
    spec["accuracy"][key] = value
    with pytest.raises(ProfileError, match=phrase):
        parse_profile(spec, "test")


def test_a_decision_band_that_leaves_nothing_decided_is_refused():
    """scores.decision_band 0.5 or more passes the generic [0, 1] check but leaves no sample decided:
    the decisions of flags and classifiers would silently go unjudged."""
    spec = arm_spec()
    spec["accuracy"]["scores"] = {"decision_band": 0.5}
    with pytest.raises(ProfileError, match="decision_band': must be below 0.5"):
        parse_profile(spec, "test")
    spec["accuracy"]["scores"] = {"decision_band": 0.2}
    assert parse_profile(spec, "test").accuracy.scores.decision_band == 0.2


def test_nested_threshold_tables_are_checked_generically():
    """Per-output-kind gate tables are held to the same rules as the top-level thresholds."""
    spec = arm_spec()
    nested = [k for k, v in spec["accuracy"].items() if isinstance(v, dict)]
    assert nested, "AccuracySpec has per-output-kind tables"
    table = spec["accuracy"][nested[0]]
    key = next(k for k, v in table.items() if isinstance(v, float) and "threshold" not in k)
    table[key] = math.nan
    with pytest.raises(ProfileError, match=f"accuracy.{nested[0]}.{key}"):
        parse_profile(spec, "test")


def test_nan_anywhere_and_a_bad_budget_refused():
    spec = arm_spec()
    spec["budget"] = {"p99_ms": -1.0}
    with pytest.raises(ProfileError, match="budget.p99_ms"):
        parse_profile(spec, "test")
    spec = arm_spec()
    spec["budget"] = {"p50_ms": math.nan}
    with pytest.raises(ProfileError, match="finite"):
        parse_profile(spec, "test")


@pytest.mark.parametrize("value", ["nan", "-inf", "-0.5"])
def test_profile_toml_nan_or_negative_threshold_is_refused(tmp_path, value):
    """TOML allows nan and inf; a NaN or negative gate threshold silently turned the gate off."""
    from importlib import resources

    text = resources.files("edge_sdk.device_profiles").joinpath("arm-cpu.toml").read_text()
    assert "\nmin_cosine = " in text
    p = tmp_path / "custom.toml"
    p.write_text("\n".join(f"min_cosine = {value}" if line.startswith("min_cosine =") else line
                           for line in text.splitlines()))
    with pytest.raises(ProfileError, match="accuracy.min_cosine"):
        load_profile_file(p)


@pytest.mark.parametrize("content", [b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", b"name = \"x\"\x00\n", b"\xff" * 100])
def test_binary_profile_is_a_profile_error(tmp_path, content, cli):
    p = tmp_path / "bin.toml"
    p.write_bytes(content)
    with pytest.raises(ProfileError, match="not a text file"):
        load_profile_file(p)
    r = cli("profiles", "validate", str(p))
    assert r.returncode == 2 and "Traceback" not in r.stderr and "not a text file" in r.stderr


def test_fifo_profile_does_not_hang(tmp_path):
    p = tmp_path / "fifo.toml"
    os.mkfifo(p)
    done: list = []
    t = threading.Thread(target=lambda: done.append(_catch(lambda: load_profile_file(p))), daemon=True)
    t.start()
    t.join(10)
    assert done and isinstance(done[0], ProfileError) and "FIFO" in done[0].message


def _catch(fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001
        return exc


# ----------------------------------------------------------------------------- preprocessing
@pytest.mark.parametrize("text, phrase", [
    ("scale=1/0", "divides by zero"),
    ("scale=0", "above 0"),
    ("scale=-1/255", "above 0"),
    ("scale=nan", "above 0"),
    ("std=0", "'std'"),
    ("std=0.2:nan:0.2", "'std'"),
    ("mean=inf", "'mean'"),
    ("mean=0.1:0.2", "1 or 3 values"),
    ("size=0x224", "'size'"),
    ("pad_value=300", "'pad_value'"),
])
def test_bad_preprocess_specs(text, phrase):
    with pytest.raises(InputValidationError, match=phrase):
        pp.parse(text)


def test_cli_convert_preprocess_divide_by_zero_is_exit_3(arts, tmp_path, cli):
    r = cli("convert", str(arts["float_onnx"]), "--profile", "jetson", "--calib", "random",
            "--preprocess", "scale=1/0", "--out", str(tmp_path / "out"))
    assert r.returncode == 3 and "divides by zero" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "out" / "jetson-orin").exists()


# ----------------------------------------------------------------------------- calibration data
def test_non_finite_calibration_data_named_with_file_array_and_index(tmp_path):
    from edge_sdk.converters.calibration import load_calibration

    inputs = [TensorSpec("input", [1, 8, 8, 3], "float32")]
    x = np.random.default_rng(0).random((12, 8, 8, 3), dtype=np.float32)
    x[7, 1, 2, 0] = np.inf
    x[9, 0, 0, 0] = np.nan
    np.save(tmp_path / "calib.npy", x)
    with pytest.raises(CalibrationError, match=r"calib\.npy: array 'input' holds 2 non-finite value\(s\) "
                                               r"\(inf at index \[7, 1, 2, 0\], sample 7\)"):
        load_calibration(tmp_path / "calib.npy", inputs, {"input": [1, 8, 8, 3]}, holdout_fraction=0.2)
    good = x.copy()
    good[~np.isfinite(good)] = 0
    np.save(tmp_path / "good.npy", good)
    np.savez(tmp_path / "val.npz", input=x)  # validation data is checked the same way
    with pytest.raises(CalibrationError, match=r"val\.npz: array 'input'"):
        load_calibration(tmp_path / "good.npy", inputs, {"input": [1, 8, 8, 3]}, holdout_fraction=0.2,
                         validation=tmp_path / "val.npz")
    folder = tmp_path / "npyfolder"
    folder.mkdir()
    np.save(folder / "input.npy", x)
    with pytest.raises(CalibrationError, match=r"npyfolder/input\.npy: array 'input'"):
        load_calibration(folder, inputs, {"input": [1, 8, 8, 3]}, holdout_fraction=0.2)


def test_inf_in_calibration_is_exit_6_for_tflite_not_a_segfault(arts, tmp_path, cli):
    """The audit: one +Inf segfaulted `convert` for the TFLite profiles inside the MLIR quantizer."""
    x = np.random.default_rng(1).random((20, 8, 8, 3), dtype=np.float32)
    x[7, 1, 2, 0] = np.inf
    np.save(tmp_path / "calib.npy", x)
    r = cli("convert", str(arts["float_onnx"]), "--profile", "arm", "--calib", str(tmp_path / "calib.npy"),
            "--out", str(tmp_path / "out"))
    assert r.returncode == 6, r.stderr
    assert "non-finite" in r.stderr and "index [7, 1, 2, 0]" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # nothing half-written


# ----------------------------------------------------------------------------- power and reports
def test_negative_and_non_finite_power_readings_are_discarded_and_counted(tmp_path):
    from edge_sdk.power import PowerMonitor

    script = tmp_path / "meter.sh"
    state = tmp_path / "n"
    state.write_text("0")
    # Readings cycle 4.0, -5, 6.0, nan: two of every four are impossible.
    script.write_text(f"#!/bin/sh\nn=$(cat {state}); echo $((n+1)) > {state}\n"
                      "case $((n % 4)) in 0) echo 4.0;; 1) echo -5;; 2) echo 6.0;; *) echo 1e999;; esac\n")
    script.chmod(0o755)
    mon = PowerMonitor(f"cmd:{script}", interval_s=0.02)
    mon.start()
    t0 = mon.mark()
    import time

    time.sleep(0.5)
    t1 = mon.mark()
    mon.stop()
    block = mon.result(t0, t1, 10)
    mon.close()
    assert block["available"] and block["discarded_readings"] >= 4, block
    assert 4.0 <= block["avg_w"] <= 6.0 and block["energy_j"] > 0
    assert "negative or not finite" in block["warning_discarded"]


def test_only_negative_readings_mean_no_measurement(arts, tmp_path, cli):
    r = cli("bench", str(arts["jetson-orin"]), "--runs", "30", "--warmup", "0", "--power", "cmd:echo -5",
            "--json-out", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stderr
    power = json.loads((tmp_path / "r.json").read_text())["results"][0]["power"]
    assert power["available"] is False and power["avg_w"] is None and power["energy_j"] is None
    assert power["discarded_readings"] >= 2 and "negative or not finite" in power["reason"]


@pytest.mark.parametrize("opt", ["--json-out", "--markdown", "--plot"])
def test_unwritable_report_path_fails_before_the_run(arts, tmp_path, cli, opt):
    (tmp_path / "a-file").write_text("x")
    for bad in (str(tmp_path / "missing" / "r.out"), str(tmp_path / "a-file" / "r.out"), str(tmp_path)):
        r = cli("bench", str(arts["jetson-orin"]), "--runs", "5", opt, bad)
        assert r.returncode == 3, (bad, r.stderr)
        assert opt in r.stderr and "| p50" not in r.stdout and "Traceback" not in r.stderr


def test_bench_names_a_corrupt_profile_folder(arts, tmp_path, cli):
    out = tmp_path / "out"
    ra.copy_artifact(arts["intel-cpu"], out / "intel-cpu")
    ra.copy_artifact(arts["jetson-orin"], out / "jetson-orin")
    f = out / "jetson-orin" / "model.onnx"
    f.write_bytes(f.read_bytes()[:-1] + b"\x00")
    r = cli("bench", str(out), "--runs", "5", "--warmup", "0", "--power", "none", "--json-out", str(tmp_path / "r.json"))
    assert r.returncode == 4 and "failed their checks" in r.stderr, r.stderr
    assert "REFUSED out/jetson-orin" in r.stdout and "sha256" in r.stdout
    rep = json.loads((tmp_path / "r.json").read_text())
    assert [s["refused"] for s in rep["skipped"] if s["name"] == "out/jetson-orin"] == [True]
    assert [r_["name"] for r_ in rep["results"]] == ["out/intel-cpu"]  # the good one was still measured
