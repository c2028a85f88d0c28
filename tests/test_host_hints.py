"""Device presence comes from the profiles' [host] hints (#16): device_globs, usb_ids and release_files,
read under EDGE_SDK_SYSFS_ROOT; the Edge TPU probe and doctor use them, not ids hard-coded in the probe."""

from __future__ import annotations

import json

import pytest

from edge_sdk import hostinfo
from edge_sdk.cli import main
from edge_sdk.runtimes import probe


@pytest.fixture
def fake_root(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_SDK_SYSFS_ROOT", str(tmp_path))
    return tmp_path


def usb_device(root, name: str, vid: str, pid: str):
    d = root / "sys/bus/usb/devices" / name
    d.mkdir(parents=True)
    (d / "idVendor").write_text(vid + "\n")
    (d / "idProduct").write_text(pid + "\n")


def test_hints_found_under_the_sysfs_root(fake_root):
    assert hostinfo.device_hints_found(["/dev/apex_*"], ["1a6e:089a"], ["/etc/nv_tegra_release"]) == []
    (fake_root / "dev").mkdir()
    (fake_root / "dev/apex_0").write_text("")
    usb_device(fake_root, "1-1", "1A6E", "089a")
    (fake_root / "etc").mkdir()
    (fake_root / "etc/nv_tegra_release").write_text("# R36 (release)\n")
    found = hostinfo.device_hints_found(["/dev/apex_*"], ["1a6e:089a", "18d1:9302"], ["/etc/nv_tegra_release"])
    assert found == ["/dev/apex_0", "USB 1a6e:089a", "/etc/nv_tegra_release"]


def test_edgetpu_presence_uses_the_coral_profile_hints(fake_root):
    looked, found = probe.accelerator_presence("litert", "edgetpu")
    assert "/dev/apex_*" in looked and "USB 1a6e:089a" in looked and found == []
    usb_device(fake_root, "2-1", "18d1", "9302")
    assert probe.accelerator_presence("litert", "edgetpu")[1] == ["USB 18d1:9302"]


def test_edgetpu_probe_reports_what_it_looked_for(fake_root, monkeypatch):
    monkeypatch.setattr(probe, "edgetpu_library", lambda: ("libedgetpu.so.1", "libedgetpu.so.1 loads"))  # no Coral runtime here
    st = probe.probe_step("litert", "edgetpu")
    assert not st.available and "/dev/apex_*" in st.reason and "USB 1a6e:089a" in st.reason
    (fake_root / "dev").mkdir()
    (fake_root / "dev/apex_0").write_text("")
    st = probe.probe_step("litert", "edgetpu")
    assert st.available and "/dev/apex_0" in st.reason


def test_doctor_lists_hints_per_profile(fake_root, capsys):
    (fake_root / "dev/accel").mkdir(parents=True)
    (fake_root / "dev/accel/accel0").write_text("")
    assert main(["doctor", "--json"]) == 0
    devices = json.loads(capsys.readouterr().out)["accelerators"]["devices"]
    assert devices["intel-npu"] == ["/dev/accel/accel0"] and devices["coral-edgetpu"] == []
