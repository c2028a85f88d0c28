"""Where a profile comes from (#16): built-in profiles load one file at a time, and an artifact's
profile is the one embedded in its manifest, for load, bench and doctor alike.
"""

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from edge_sdk import doctor, profiles
from edge_sdk.bench import benchmark
from edge_sdk.bench.targets import expand
from edge_sdk.cli import main
from edge_sdk.errors import ProfileError
from edge_sdk.manifest import ProfileRef, read_manifest, write_manifest
from edge_sdk.profiles import BudgetSpec, PowerSpec, builtin_profile_errors, builtin_profiles, resolve_profile
from edge_sdk.runtimes.probe import StepStatus, native_status
from edge_sdk.runtimes.select import artifact_profile
from rt_artifacts import copy_artifact, onnx_artifacts

BUILTIN_DIR = Path(profiles.__file__).resolve().parents[1] / "device_profiles"


@pytest.fixture
def profile_dir(tmp_path, monkeypatch):
    """A copy of the built-in profile folder that the built-in loader reads instead."""
    root = tmp_path / "device_profiles"
    shutil.copytree(BUILTIN_DIR, root)
    monkeypatch.setattr(profiles, "_builtin_root", lambda: root)
    profiles._builtin_all.cache_clear()
    yield root
    monkeypatch.undo()
    profiles._builtin_all.cache_clear()


def _break(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_one_broken_profile_does_not_hide_the_others(profile_dir, capsys):
    _break(profile_dir / "arm-cpu.toml", '"tflite-int8"', '"tflite-int9"')
    profs = builtin_profiles()
    assert set(profs) == {"jetson-orin", "intel-cpu", "intel-npu", "coral-edgetpu"}
    err = builtin_profile_errors()["arm-cpu.toml"]
    assert isinstance(err, ProfileError)
    assert "arm-cpu.toml" in err.message and "artifact.formats[0]" in err.message and "tflite-int9" in err.message
    assert "'tflite-int8'" in err.hint and "'onnx-qdq'" in err.hint  # the allowed values

    # the others still resolve, by name and alias; the broken one says why, not "unknown"
    assert resolve_profile("jetson").name == "jetson-orin"
    for name in ("arm-cpu", "arm"):
        with pytest.raises(ProfileError, match="arm-cpu.toml: key 'artifact.formats") as exc:
            resolve_profile(name)
        assert "tflite-int8" in exc.value.hint

    assert main(["profiles", "list", "--json"]) == 0
    out = capsys.readouterr()
    assert {row["name"] for row in json.loads(out.out)} == set(profs)
    assert "warning: skipped built-in profile arm-cpu.toml" in out.err and "allowed values" in out.err

    report = doctor.collect()
    assert [p["profile"] for p in report["profiles"]] == sorted(profs)
    assert [e["file"] for e in report["profile_errors"]] == ["arm-cpu.toml"]
    assert "arm-cpu.toml" in doctor.render(report) and "could not be loaded" in doctor.render(report)


def test_bad_toml_and_duplicate_name_are_per_file(profile_dir):
    (profile_dir / "zz-broken.toml").write_text("name = \n")
    shutil.copyfile(profile_dir / "intel-cpu.toml", profile_dir / "zz-copy.toml")
    profs = builtin_profiles()
    assert {"jetson-orin", "intel-cpu", "intel-npu", "coral-edgetpu", "arm-cpu"} == set(profs)
    errors = builtin_profile_errors()
    assert set(errors) == {"zz-broken.toml", "zz-copy.toml"}
    assert "invalid TOML" in errors["zz-broken.toml"].message
    assert "already defined" in errors["zz-copy.toml"].message
    assert profs["intel-cpu"].source.endswith("intel-cpu.toml")  # the first one is kept


def test_load_profile_folder_reports_without_raising(tmp_path):
    shutil.copytree(BUILTIN_DIR, tmp_path / "p")
    _break(tmp_path / "p" / "intel-npu.toml", "batch_size = 1", "batch_size = 0")
    good, bad = profiles.load_profile_folder(tmp_path / "p")
    assert "intel-npu" not in good and len(good) == 4
    assert "artifact.batch_size" in bad["intel-npu.toml"].message


# ------------------------------------------------------------------ native here: one decision
class _Step:
    def __init__(self, backend, accelerator, native):
        self.backend, self.accelerator, self.native, self.format = backend, accelerator, native, "onnx-qdq"


def _fake_profile(chain, arch=()):
    ns = type("NS", (), {})
    p = ns()
    p.name = "toy"
    p.runtime = ns()
    p.runtime.chain = chain
    p.host = ns()
    p.host.arch = list(arch)
    return p


@pytest.mark.parametrize("avail,arch_ok,status", [
    ({"a"}, True, "native"),
    ({"a"}, False, "emulated"),
    ({"c"}, True, "fallback"),  # the native 'b' comes after the fallback: load would run 'c'
    ({"b", "c"}, True, "fallback"),
    (set(), True, "unavailable"),
])
def test_native_status_is_what_load_would_run(monkeypatch, avail, arch_ok, status):
    from edge_sdk.runtimes import probe

    monkeypatch.setattr(probe, "probe_step", lambda b, a: StepStatus(a in avail, f"{a} {'ok' if a in avail else 'missing'}"))
    monkeypatch.setattr(probe.hostinfo, "machine", lambda: "x86_64")
    chain = [_Step("x", "a", True), _Step("x", "c", False), _Step("x", "b", True)]
    ns = native_status(_fake_profile(chain, () if arch_ok else ("aarch64",)))
    assert ns.status == status and ns.native == (status == "native")
    assert [st.available for _, st in ns.probes] == [a in avail for a in "acb"]
    why = ns.why_not()
    if status == "native":
        assert why is None
    elif status == "emulated":
        assert "not a 'toy' device" in why and "aarch64" in why
    elif status == "fallback":
        assert why.startswith("only the fallback x/c runs here") and "x/a: a missing" in why
    else:
        assert why.startswith("nothing in its runtime chain") and "x/b: b missing" in why


# ------------------------------------------------------------------ the artifact's own profile
@pytest.fixture(scope="module")
def arts(tmp_path_factory):
    return onnx_artifacts(tmp_path_factory)


def _embed(folder: Path, profile) -> None:
    """Rewrite the folder's manifest to embed ``profile`` (as `convert` would have with that profile)."""
    m = read_manifest(folder)
    write_manifest(folder, dataclasses.replace(m, profile=ProfileRef(profile.name, profile.sha256, profile.to_dict())))


def test_bench_uses_the_embedded_profile_not_the_builtin(arts, tmp_path):
    out = tmp_path / "out"
    folder = copy_artifact(arts["intel-cpu"], out / "intel-cpu")
    builtin = builtin_profiles()["intel-cpu"]
    assert builtin.budget.p50_ms is None
    embedded = dataclasses.replace(builtin, budget=BudgetSpec(p50_ms=1e-6), power=PowerSpec(sensors=["hwmon"]))
    assert embedded.sha256 != builtin.sha256
    _embed(folder, embedded)

    assert artifact_profile(folder) == embedded
    for args in (([folder], None), ([out], None), ([out], "intel")):  # artifact folder, convert folder, --profile pick
        targets, _ = expand(*args)
        assert [t.profile for t in targets] == [embedded]

    rep = benchmark(folder, runs=5, warmup=1, power="none")
    assert rep.results[0].profile == "intel-cpu"
    assert any("budget of profile 'intel-cpu'" in g for g in rep.gates_checked)
    # the embedded budget failed (the built-in profile has none)
    assert any("p50_ms = " in g and "(gate 'p50_ms>1e-06 (budget of profile 'intel-cpu')')" in g for g in rep.gates_failed)
