"""A real fleet on loopback: `edge-sdk fleet serve` and two `fleet join` devices as subprocesses
(one tagged intel-cpu, one arm-cpu), benching a quick-start-like `convert` output folder with
`bench --fleet`; a device killed mid-run; mutual TLS with `fleet certs`."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

import edge_sdk.fleet
from fleet_helpers import EXE, Fleet, quickstart_folder
from rt_artifacts import tflite_artifacts

FAST = ["--runs", "20", "--warmup", "2", "--power", "none"]


@pytest.fixture(scope="module")
def qs(tmp_path_factory):
    return quickstart_folder(tflite_artifacts(tmp_path_factory), tmp_path_factory.mktemp("fleet") / "quickstart-out")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    f = Fleet(tmp_path_factory.mktemp("fleet_procs"))
    try:
        f.serve()
        f.join("nuc", "intel-cpu")
        f.join("pi", "arm-cpu")
        yield f
    finally:
        f.stop()


def run(*args, timeout=300):
    import subprocess

    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=timeout)


def test_status_lists_devices(fleet):
    r = run("fleet", "status", fleet.address, "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    by_name = {d["name"]: d for d in data["devices"]}
    assert set(by_name) == {"nuc", "pi"}
    assert by_name["nuc"]["profiles"] == ["intel-cpu"] and by_name["pi"]["profiles"] == ["arm-cpu"]
    assert by_name["nuc"]["busy"] is False and by_name["nuc"]["profiles_detected"] is False
    assert by_name["pi"]["edge_sdk"] == edge_sdk.__version__ and by_name["pi"]["host"]["machine"]
    assert by_name["pi"]["runtimes"]["onnxruntime"]
    text = run("fleet", "status", fleet.address)
    assert text.returncode == 0 and "nuc" in text.stdout and "idle" in text.stdout


def test_join_with_a_taken_name_is_one_line(fleet):
    r = run("fleet", "join", fleet.address, "--name", "nuc", "--profiles", "intel-cpu", "--timeout", "10", timeout=60)
    assert r.returncode == 10 and "a device named 'nuc' is already in it" in r.stderr
    assert "Traceback" not in r.stderr


def test_bench_fleet_one_report_right_rows(fleet, qs, tmp_path):
    j, md = tmp_path / "r.json", tmp_path / "r.md"
    r = run("bench", str(qs), "--fleet", fleet.address, *FAST, "--json-out", str(j), "--markdown", str(md))
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(j.read_text())
    assert data["schema_version"] == 1 and data["tool"] == "edge-sdk bench --fleet" and data["failed"] == []
    rows = {res["name"]: res for res in data["results"]}
    assert set(rows) == {"quickstart-out/intel-cpu@nuc", "quickstart-out/arm-cpu@pi"}
    intel, arm = rows["quickstart-out/intel-cpu@nuc"], rows["quickstart-out/arm-cpu@pi"]
    assert intel["device"]["name"] == "nuc" and intel["device"]["profiles"] == ["intel-cpu"]
    assert arm["device"]["name"] == "pi" and arm["device"]["profiles"] == ["arm-cpu"]
    assert intel["profile"] == "intel-cpu" and intel["backend"] == "openvino/CPU"
    assert arm["profile"] == "arm-cpu" and arm["backend"].startswith("litert/")
    for res in (intel, arm):  # the local schema, measured on the device with the options given
        assert res["runs"] == 20 and res["warmup"] == 2 and res["latency_ms"]["count"] == 20
        assert res["device"]["attempt"] == 1 and res["device"]["host"]["machine"] and res["device"]["edge_sdk"]
    assert {s["name"] for s in data["skipped"]} == {f"quickstart-out/{p}" for p in ("intel-npu", "jetson-orin", "coral-edgetpu")}
    assert all("no device in the fleet is tagged" in s["reason"] for s in data["skipped"])
    assert "Fleet: tcp://127.0.0.1" in md.read_text() and "quickstart-out/arm-cpu@pi" in md.read_text()
    assert "-> nuc (attempt 1)" in r.stderr and "-> pi (attempt 1)" in r.stderr


def test_python_api_and_devices_by_name(fleet, qs):
    report = edge_sdk.fleet.bench(qs, fleet.address, devices="pi", runs=5, warmup=0, power="none")
    assert [r.name for r in report.results] == ["quickstart-out/arm-cpu@pi"]
    assert report.results[0].device["name"] == "pi" and report.to_dict()["results"][0]["device"]["name"] == "pi"
    with pytest.raises(edge_sdk.errors.InputValidationError, match="no device named"):
        edge_sdk.fleet.bench(qs, fleet.address, devices="nope", runs=5)


def test_image_and_ops_travel_to_the_device(fleet, qs, tmp_path):
    """--image (sent with the artifact) and --ops run on the device like a local bench."""
    j = tmp_path / "r.json"
    img = Path(__file__).resolve().parents[1] / "examples" / "digits" / "val" / "0000.png"
    r = run("bench", str(qs / "intel-cpu"), "--fleet", fleet.address, *FAST, "--image", str(img), "--ops",
            "--json-out", str(j))
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(j.read_text())["results"]
    assert row["end_to_end"] is True and row["device"]["name"] == "nuc"
    assert row["ops"] and row["ops"].get("rows") is not None
    bad = run("bench", str(qs / "intel-cpu"), "--fleet", fleet.address, "--image", str(tmp_path / "none.png"))
    assert bad.returncode == 3 and "--image" in bad.stderr


def test_gate_failure_on_a_device_exits_9_with_report(fleet, qs, tmp_path):
    j = tmp_path / "r.json"
    r = run("bench", str(qs / "intel-cpu"), "--fleet", fleet.address, *FAST, "--fail-if", "p50_ms>0", "--json-out", str(j))
    assert r.returncode == 9, r.stderr
    data = json.loads(j.read_text())
    assert data["gates"]["failed"] and data["gates"]["failed"][0].startswith("intel-cpu@nuc: p50_ms")


def test_tampered_artifact_refused_before_sending(fleet, qs, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(qs / "intel-cpu", bad)
    (bad / "model.bin").write_bytes(b"\x00" + (bad / "model.bin").read_bytes()[1:])
    r = run("bench", str(bad), "--fleet", fleet.address, *FAST)
    assert r.returncode == 4 and "sha256" in r.stderr and "Traceback" not in r.stderr


def test_killed_device_fails_and_is_retried_on_another(tmp_path, qs):
    f = Fleet(tmp_path)
    try:
        f.serve()
        f.join("nuc-a", "intel-cpu")
        f.join("nuc-b", "intel-cpu")
        events: list[str] = []
        out: dict = {}

        def go():
            try:
                out["report"] = edge_sdk.fleet.bench(qs / "intel-cpu", f.address, devices="one", duration_s=5.0,
                                                     warmup=2, power="none", progress=events.append)
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                out["error"] = exc

        t = threading.Thread(target=go)
        t.start()
        deadline = time.monotonic() + 60
        while not any("(attempt 1)" in e for e in events):
            assert time.monotonic() < deadline and t.is_alive(), (events, out)
            time.sleep(0.1)
        first = next(e for e in events if "(attempt 1)" in e).split("-> ")[1].split(" ")[0]
        time.sleep(2.0)  # the bench child is inside its 5 s timed loop
        f.kill(first)
        t.join(timeout=120)
        assert not t.is_alive() and "error" not in out, out
        report = out["report"]
        other = ({"nuc-a", "nuc-b"} - {first}).pop()
        (failed,) = report.failed
        assert failed["device"]["name"] == first and failed["retried"] is True and failed["attempt"] == 1
        assert "left the fleet during the run" in failed["reason"]
        (row,) = report.results  # nothing counted twice
        assert row.device["name"] == other and row.device["attempt"] == 2 and row.name == f"intel-cpu@{other}"
        assert row.latency_ms["count"] > 0 and report.to_dict()["failed"] == [failed]
    finally:
        f.stop()


def test_killed_device_with_devices_all_is_a_failed_row_and_exit_10(tmp_path, qs):
    f = Fleet(tmp_path)
    try:
        f.serve()
        f.join("nuc-a", "intel-cpu")
        import subprocess

        j = tmp_path / "r.json"
        # A run far longer than the test: the device is killed while it runs, whatever the load
        # (with 5 s, a busy CI host's status polls took long enough for the run to end first).
        proc = subprocess.Popen([EXE, "bench", str(qs / "intel-cpu"), "--fleet", f.address, "--duration", "60",
                                 "--power", "none", "--json-out", str(j)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        time.sleep(1.0)
        deadline = time.monotonic() + 30
        while True:  # wait until the device runs it
            st = run("fleet", "status", f.address, "--json")
            if json.loads(st.stdout)["devices"][0]["busy"]:
                break
            assert time.monotonic() < deadline, st.stdout
            time.sleep(0.3)
        time.sleep(1.5)
        f.kill("nuc-a")
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 10, err
        assert "left the fleet during the run" in err and "Traceback" not in err
        data = json.loads(j.read_text())
        assert data["results"] == [] and data["failed"][0]["device"]["name"] == "nuc-a"
        assert data["failed"][0]["retried"] is False
    finally:
        f.stop()


def test_tls_round_trip_with_fleet_certs(tmp_path, qs):
    tls = tmp_path / "tls"
    r = run("fleet", "certs", str(tls))
    assert r.returncode == 0, r.stderr
    f = Fleet(tmp_path, tls=tls)
    try:
        f.serve()
        assert "tls://127.0.0.1" in f.log("scheduler")
        f.join("nuc", "intel-cpu")
        st = run("fleet", "status", f.address, "--tls", str(tls), "--json")
        assert st.returncode == 0, st.stderr
        assert [d["name"] for d in json.loads(st.stdout)["devices"]] == ["nuc"]
        assert json.loads(st.stdout)["scheduler"].startswith("tls://")
        j = tmp_path / "r.json"
        b = run("bench", str(qs / "intel-cpu"), "--fleet", f.address, "--tls", str(tls), *FAST, "--json-out", str(j))
        assert b.returncode == 0, b.stderr
        (row,) = json.loads(j.read_text())["results"]
        assert row["device"]["name"] == "nuc" and row["device"]["address"].startswith("tls://")
        # no certificates: refused before connecting; another CA's certificates: no connection
        plain = run("fleet", "status", f.address)
        assert plain.returncode == 3 and "no certificates" in plain.stderr
        other = tmp_path / "other"
        assert run("fleet", "certs", str(other)).returncode == 0
        wrong = run("fleet", "status", f.address, "--tls", str(other), "--timeout", "3")
        assert wrong.returncode == 10 and "cannot reach" in wrong.stderr and "Traceback" not in wrong.stderr
    finally:
        f.stop()


DIGITS = Path(__file__).resolve().parents[1] / "examples" / "digits"


def _model_hashes(folder: Path) -> dict[str, str]:
    data = json.loads((folder / "manifest.json").read_text())
    return {f["path"]: f["sha256"] for f in data["artifacts"]}


def test_convert_fleet_matches_local_convert(fleet, tmp_path):
    """The bundled model through `convert --fleet` on a `convert` device: the same model files as locally."""
    fleet.join("builder", "convert")
    common = ["--profile", "intel-cpu", "--calib", str(DIGITS / "calib"), "--val", str(DIGITS / "val"),
              "--preprocess", str(DIGITS / "preprocess.json")]
    r = run("convert", str(DIGITS / "digits_cnn.onnx"), *common, "--out", str(tmp_path / "fleet"), "--fleet",
            fleet.address, "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    (prof,) = summary["profiles"]
    assert prof["published"] and prof["gate"] == "passed" and prof["folder"] == str(tmp_path / "fleet" / "intel-cpu")
    assert "converted on fleet device 'builder'" in prof["warnings"] and summary["fleet_failed"] == []
    assert "intel-cpu -> builder (attempt 1)" in r.stderr
    loc = run("convert", str(DIGITS / "digits_cnn.onnx"), *common, "--out", str(tmp_path / "local"))
    assert loc.returncode == 0, loc.stderr
    remote, local = _model_hashes(tmp_path / "fleet" / "intel-cpu"), _model_hashes(tmp_path / "local" / "intel-cpu")
    assert remote == local and {"model.xml", "model.bin"} <= set(remote)
    v = run("verify", str(tmp_path / "fleet" / "intel-cpu"))  # the gathered folder loads like a local one
    assert v.returncode == 0, v.stdout + v.stderr
    again = run("convert", str(DIGITS / "digits_cnn.onnx"), *common, "--out", str(tmp_path / "fleet"), "--fleet",
                fleet.address)
    assert again.returncode == 3 and "already exists" in again.stderr


def test_convert_fleet_needs_a_convert_device_and_no_metric(tmp_path, qs):
    f = Fleet(tmp_path)
    try:
        f.serve()
        f.join("nuc", "intel-cpu")
        r = run("convert", str(DIGITS / "digits_cnn.onnx"), "--profile", "intel-cpu", "--calib", "random",
                "--out", str(tmp_path / "o"), "--fleet", f.address)
        assert r.returncode == 10 and "no device in the fleet is tagged 'convert'" in r.stderr
        m = run("convert", str(DIGITS / "digits_cnn.onnx"), "--profile", "intel-cpu", "--calib", "random",
                "--out", str(tmp_path / "o"), "--fleet", f.address, "--metric", "x.py:f")
        assert m.returncode == 3 and "--metric is not supported with --fleet" in m.stderr
        assert not (tmp_path / "o").exists()
    finally:
        f.stop()


def test_join_without_profiles_uses_doctors_probe(tmp_path):
    """No --profiles: the tags are the profiles `edge-sdk doctor` says run natively here (+ convert)."""
    doc = run("doctor", "--json")
    assert doc.returncode == 0, doc.stderr
    native = sorted(p["profile"] for p in json.loads(doc.stdout)["profiles"] if p["status"] == "native")
    from edge_sdk.fleet.node import can_convert

    f = Fleet(tmp_path)
    try:
        f.serve()
        f._start("auto", ["fleet", "join", f.address, "--name", "auto"], "as 'auto'")
        st = run("fleet", "status", f.address, "--json")
        (dev,) = json.loads(st.stdout)["devices"]
        assert dev["profiles"] == sorted(native + (["convert"] if can_convert() else []))
        assert dev["profiles_detected"] is True
    finally:
        f.stop()


def test_device_policy_requires_signed_artifacts(tmp_path, qs):
    """A device whose config file trusts a key refuses unsigned artifacts from any client (a failed row)."""
    import shutil

    assert run("keygen", "--out", str(tmp_path / "owner")).returncode == 0
    cfg = tmp_path / "device.toml"
    cfg.write_text(f'[trust]\ntrusted_keys = ["{tmp_path / "owner.pub"}"]\n')
    f = Fleet(tmp_path)
    try:
        f.serve()
        f.join("locked", "intel-cpu", env={"EDGE_SDK_CONFIG": str(cfg)})
        j = tmp_path / "r.json"
        r = run("bench", str(qs / "intel-cpu"), "--fleet", f.address, *FAST, "--json-out", str(j))
        assert r.returncode == 10, r.stderr
        (failed,) = json.loads(j.read_text())["failed"]
        assert failed["device"]["name"] == "locked" and failed["reason"].startswith("refused on the device:")
        assert "sign" in failed["reason"].lower()
        signed = tmp_path / "signed"
        shutil.copytree(qs / "intel-cpu", signed)
        assert run("sign", str(signed), "--key", str(tmp_path / "owner.key")).returncode == 0
        ok = run("bench", str(signed), "--fleet", f.address, *FAST, "--json-out", str(j))
        assert ok.returncode == 0, ok.stderr
        assert [r["device"]["name"] for r in json.loads(j.read_text())["results"]] == ["locked"]
    finally:
        f.stop()
