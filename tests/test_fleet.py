"""The fleet without a running fleet: addresses and the loopback rule, certificates, the worker's
unpacking checks, user mistakes as one-line errors with exit codes, and lazy Dask imports."""

from __future__ import annotations

import hashlib
import stat
import subprocess
import sys

import pytest

from edge_sdk.cli import main
from edge_sdk.errors import FleetError, InputValidationError, MissingDependencyError, ModelLoadError
from edge_sdk.fleet.security import check_transport, make_certs, parse_address
from edge_sdk.fleet.tasks import pack_folder, unpack_folder


@pytest.mark.parametrize("text, want", [
    ("127.0.0.1:8786", ("tcp", "127.0.0.1", 8786, True)),
    ("localhost", ("tcp", "localhost", 8786, True)),
    ("tcp://[::1]:9000", ("tcp", "::1", 9000, True)),
    ("tls://fleet.example:8786", ("tls", "fleet.example", 8786, False)),
    ("10.0.0.5:1234", ("tcp", "10.0.0.5", 1234, False)),
    ("127.3.4.5:1", ("tcp", "127.3.4.5", 1, True)),
])
def test_parse_address(text, want):
    a = parse_address(text)
    assert (a.scheme, a.host, a.port, a.loopback) == want


@pytest.mark.parametrize("text", ["http://x:1", "x:notaport", "x:70000", ":8786", ""])
def test_parse_address_rejects(text):
    with pytest.raises(InputValidationError):
        parse_address(text)


def test_plain_tcp_off_loopback_refused_unless_insecure(capsys, tmp_path):
    with pytest.raises(InputValidationError, match="refusing plain TCP on 10.0.0.5"):
        check_transport(parse_address("10.0.0.5:8786"), None, False, "client")
    a = check_transport(parse_address("10.0.0.5:8786"), None, True, "client")
    assert a.url == "tcp://10.0.0.5:8786" and "warning: plain TCP on 10.0.0.5" in capsys.readouterr().err
    assert check_transport(parse_address("[::1]:1"), None, False, "client").url == "tcp://[::1]:1"
    with pytest.raises(InputValidationError, match="no certificates"):
        check_transport(parse_address("tls://10.0.0.5:8786"), None, False, "client")
    with pytest.raises(InputValidationError, match="missing"):
        check_transport(parse_address("10.0.0.5:8786"), str(tmp_path), False, "client")


@pytest.mark.parametrize("argv", [
    ["fleet", "serve", "--host", "0.0.0.0", "--port", "1"],
    ["fleet", "join", "192.0.2.1:8786", "--profiles", "intel-cpu"],
    ["fleet", "status", "192.0.2.1:8786"],
    ["bench", ".", "--fleet", "192.0.2.1:8786"],
])
def test_cli_refuses_plain_non_loopback(argv, capsys):
    assert main(argv) == InputValidationError.exit_code
    err = capsys.readouterr().err
    assert "refusing plain TCP on" in err and "fleet certs" in err and "Traceback" not in err


def test_unreachable_scheduler_is_one_line_exit_10(capsys):
    from fleet_helpers import free_port

    assert main(["fleet", "status", f"127.0.0.1:{free_port()}", "--timeout", "1"]) == FleetError.exit_code == 10
    err = capsys.readouterr().err
    assert "cannot reach the fleet scheduler" in err and "Traceback" not in err


def test_insecure_warns_then_fails_to_connect(capsys):
    assert main(["fleet", "status", "192.0.2.1:9", "--insecure", "--timeout", "1"]) == 10
    err = capsys.readouterr().err
    assert "warning: plain TCP on 192.0.2.1" in err and "cannot reach" in err


def test_fleet_options_need_fleet(capsys):
    assert main(["bench", ".", "--devices", "one"]) == 3
    assert "only apply with --fleet" in capsys.readouterr().err


def test_make_certs(tmp_path):
    from cryptography import x509

    files = make_certs(tmp_path / "tls", ["fleet.example", "10.1.2.3"])
    assert set(files) == {f"{n}.{e}" for n in ("ca", "scheduler", "worker", "client") for e in ("pem", "key")}
    for name, path in files.items():
        mode = stat.S_IMODE((tmp_path / "tls" / name).stat().st_mode)
        assert mode == (0o600 if name.endswith(".key") else 0o644), name
    ca = x509.load_pem_x509_certificate((tmp_path / "tls" / "ca.pem").read_bytes())
    sched = x509.load_pem_x509_certificate((tmp_path / "tls" / "scheduler.pem").read_bytes())
    assert sched.issuer == ca.subject
    sched.verify_directly_issued_by(ca)
    sans = sched.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "fleet.example" in sans.get_values_for_type(x509.DNSName)
    assert {str(i) for i in sans.get_values_for_type(x509.IPAddress)} >= {"10.1.2.3", "127.0.0.1", "::1"}
    with pytest.raises(InputValidationError, match="already holds"):
        make_certs(tmp_path / "tls")


def test_unpack_checks_hashes_and_paths(tmp_path):
    src = tmp_path / "art"
    (src / "sub").mkdir(parents=True)
    (src / "manifest.json").write_bytes(b"{}")
    (src / "sub" / "m.bin").write_bytes(b"\x00" * 10)
    payload = pack_folder(src)
    assert payload["sha256"]["sub/m.bin"] == hashlib.sha256(b"\x00" * 10).hexdigest()
    out = unpack_folder(payload, tmp_path / "ok")
    assert (out / "sub" / "m.bin").read_bytes() == b"\x00" * 10
    bad = dict(payload, files=dict(payload["files"], **{"sub/m.bin": b"\x01" * 10}))
    with pytest.raises(ModelLoadError, match="damaged in transit"):
        unpack_folder(bad, tmp_path / "bad")
    evil = {"files": {"../x": b""}, "sha256": {"../x": hashlib.sha256(b"").hexdigest()}}
    with pytest.raises(ModelLoadError, match="unsafe path"):
        unpack_folder(evil, tmp_path / "evil")
    (src / "link").symlink_to(src / "manifest.json")
    with pytest.raises(ModelLoadError, match="symbolic link"):
        pack_folder(src)


BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('distributed', 'dask'):
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
from edge_sdk.cli import main
sys.exit(main({argv!r}))
"""


def test_missing_extra_names_fleet(tmp_path):
    r = subprocess.run([sys.executable, "-c", BLOCK.format(argv=["fleet", "status", "127.0.0.1:1"])],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == MissingDependencyError.exit_code, r.stderr
    assert 'pip install "edge-sdk[fleet]"' in r.stderr and "Traceback" not in r.stderr


def test_importing_edge_sdk_does_not_import_dask():
    code = ("import sys, edge_sdk, edge_sdk.fleet, edge_sdk.cli\n"
            "try:\n    edge_sdk.cli.cli.main(['fleet', '--help'], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed', 'tensorflow'))\n"
            "assert not bad, bad\nprint('clean')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "clean" in r.stdout, r.stdout + r.stderr


def test_a_device_killed_mid_task_leaves_no_work_folder_behind(tmp_path):
    """A task's work folder is named after its device process; the next device process on that
    host removes the folders of processes that are gone (``finally`` never ran in a killed one),
    and leaves a live process's folder and names it did not make alone."""
    import os

    from edge_sdk.fleet.tasks import sweep_work_folders

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone = tmp_path / f"edge-sdk-fleet-bench-{dead.pid}-abc123"
    gone_convert = tmp_path / f"edge-sdk-fleet-convert-{dead.pid}-x_y9"
    live = tmp_path / f"edge-sdk-fleet-bench-{os.getpid()}-def456"
    other = tmp_path / "edge-sdk-fleet-somebody-elses"
    for folder in (gone, gone_convert, live, other):
        (folder / "in").mkdir(parents=True)
        (folder / "in" / "model.onnx").write_bytes(b"x")
    removed = sweep_work_folders(tmp_path)
    assert sorted(removed) == sorted([gone, gone_convert])
    assert not gone.exists() and not gone_convert.exists() and live.is_dir() and other.is_dir()


def test_a_failed_task_whose_device_leaves_moments_later_counts_as_a_lost_device():
    """The scheduler cancels a killed worker's task (its scattered inputs are lost) as it removes the
    worker, and the client can see the cancellation before the worker list changes: the device is
    given a short grace to leave before the failure is put down to the task itself."""
    from edge_sdk.fleet.client import _leaves

    class Client:
        def __init__(self, present_for: int):
            self.calls, self.present_for = 0, present_for

        def scheduler_info(self, n_workers=-1):
            self.calls += 1
            return {"workers": {"tcp://a:1": {}} if self.calls <= self.present_for else {}}

    leaving = Client(present_for=3)
    assert _leaves(leaving, "tcp://a:1", grace_s=5.0) and leaving.calls == 4
    staying = Client(present_for=10 ** 6)
    assert not _leaves(staying, "tcp://a:1", grace_s=0.3) and staying.calls >= 2
