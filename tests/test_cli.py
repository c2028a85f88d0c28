import json

from edge_sdk.cli import main
from edge_sdk.errors import (AccuracyGateError, ConversionError, DelegateUnavailableError, EdgeSDKError,
                             InputValidationError, ManifestError, ProfileError, exit_code_for)


def test_version(cli):
    r = cli("--version")
    assert r.returncode == 0 and "0.1.0" in r.stdout


def test_profiles_list_json_has_five(cli):
    r = cli("profiles", "list", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    names = {row["name"] for row in rows}
    assert {"jetson-orin", "intel-cpu", "intel-npu", "coral-edgetpu", "arm-cpu"} <= names
    jetson = next(row for row in rows if row["name"] == "jetson-orin")
    assert "jetson" in jetson["aliases"]


def test_profiles_show_alias_and_vpu_note(capsys):
    assert main(["profiles", "show", "vpu", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["name"] == "intel-npu"
    assert "MYRIAD" in out.err


def test_unknown_profile_is_one_line_no_traceback(cli):
    r = cli("profiles", "show", "tpu9000")
    assert r.returncode == ProfileError.exit_code
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith("error: Unknown profile 'tpu9000'")
    assert "hint:" in r.stderr


def test_debug_shows_traceback(cli):
    r = cli("--debug", "profiles", "show", "tpu9000")
    assert r.returncode == ProfileError.exit_code
    assert "Traceback" in r.stderr


def test_bad_profile_file_names_key(tmp_path, capsys):
    p = tmp_path / "x.toml"
    p.write_text('name="x"\ndescription="d"\nfoo=1\n')
    assert main(["profiles", "validate", str(p)]) == ProfileError.exit_code
    err = capsys.readouterr().err
    assert str(p) in err and "'foo'" in err


def test_doctor_json(cli):
    r = cli("doctor", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert set(rep) >= {"host", "runtimes", "accelerators", "power_sensors", "profiles"}
    statuses = {row["profile"]: row for row in rep["profiles"]}
    assert len(statuses) >= 5
    # This machine has no Jetson, Coral or NPU: those must not claim to run natively.
    for name in ("jetson-orin", "coral-edgetpu", "intel-npu"):
        assert statuses[name]["status"] in ("fallback", "unavailable"), statuses[name]
    assert rep["backends"]["onnxruntime"]["execution_providers"]


def test_verify_command(tmp_path, tmp_path_factory, capsys):
    import rt_artifacts as ra

    # A real artifact: verify runs load's checks, model containers included.
    ra.copy_artifact(ra.onnx_artifacts(tmp_path_factory)["jetson-orin"], tmp_path / "a")
    assert main(["verify", str(tmp_path / "a")]) == 0
    (tmp_path / "a" / "model.onnx").write_bytes(b"evil")
    assert main(["verify", str(tmp_path / "a")]) == ManifestError.exit_code
    assert "truncated or modified" in capsys.readouterr().err


def test_exit_codes_are_distinct_and_specific():
    codes = {cls: exit_code_for(cls("x")) for cls in (ProfileError, InputValidationError, ManifestError,
                                                     DelegateUnavailableError, ConversionError, EdgeSDKError)}
    assert len(set(codes.values())) == len(codes)
    assert exit_code_for(AccuracyGateError("x")) != exit_code_for(ConversionError("x"))
    assert exit_code_for(ValueError("bug")) == 70
