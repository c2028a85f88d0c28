"""The real-model matrix cache (tests/realmodels/cache.py): a case's key moves with everything that
decides its result - a converter's source, a dependency's version, the CPU's flags, the model - and
with nothing else, so an unchanged model is never converted twice and a changed one always is."""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "realmodels"))

import cache  # noqa: E402
import practice  # noqa: E402


@dataclass
class _Case:
    name: str = "toy"
    model: str = "toy.onnx"
    profiles: list = field(default_factory=lambda: ["intel-cpu"])
    n_calib: int = 10
    n_val: int = 40
    convert_args: dict = field(default_factory=dict)
    stream: str | None = None


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A copy of the installed package's sources, a model file, and the key's other inputs, each
    under the test's control."""
    roots = []
    for root in cache.package_roots():
        copy = tmp_path / "pkg" / root.name
        shutil.copytree(root, copy, ignore=shutil.ignore_patterns("__pycache__"))
        roots.append(copy)
    here = tmp_path / "realmodels"
    shutil.copytree(cache.HERE, here, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(cache, "HERE", here)
    model = tmp_path / "toy.onnx"
    model.write_bytes(b"model bytes v1")
    state = {"roots": roots, "here": here, "model": model, "dists": {"onnxruntime": "1.23.0", "numpy": "1.26.4"},
             "flags": ["avx", "avx2", "fma", "sse4_2"]}
    monkeypatch.setattr(cache, "package_roots", lambda: state["roots"])
    monkeypatch.setattr(cache, "distributions", lambda: dict(state["dists"]))
    monkeypatch.setattr(cache, "cpu_flags", lambda: list(state["flags"]))
    monkeypatch.setattr(practice, "fetch", lambda name: state["model"])
    cache.environment_parts.cache_clear()
    yield state
    cache.environment_parts.cache_clear()


def _key() -> str:
    cache.environment_parts.cache_clear()
    return cache.case_key(_Case())


def test_the_key_is_stable_when_nothing_that_decides_it_changes(env):
    first = _key()
    assert _key() == first
    # bytecode, a touched timestamp and a hidden editor file decide nothing
    converter = next(r for r in env["roots"] if r.name == "converters")
    (converter / "__pycache__").mkdir(exist_ok=True)
    (converter / "__pycache__" / "pipeline.cpython-311.pyc").write_bytes(b"\0")
    (converter / "pipeline.py").touch()
    (converter / ".pipeline.py.swp").write_bytes(b"x")
    assert _key() == first


def test_a_one_character_change_to_a_converter_module_changes_the_key(env):
    first = _key()
    converter = next(r for r in env["roots"] if r.name == "converters") / "pipeline.py"
    text = converter.read_text()
    converter.write_text(text + " ")
    assert _key() != first
    converter.write_text(text)
    assert _key() == first  # the same bytes again: the same key (the cached result is found again)


def test_a_device_profile_or_a_runtime_change_changes_the_key(env):
    first = _key()
    profile = next(p for r in env["roots"] for p in sorted(r.glob("*.toml")))
    profile.write_text(profile.read_text().replace("=", " = ", 1))
    second = _key()
    assert second != first
    runtime = next(r for r in env["roots"] if r.name == "runtimes") / "facade.py"
    runtime.write_text(runtime.read_text() + "#")
    assert _key() not in (first, second)


def test_what_makes_or_judges_the_data_changes_the_key_and_the_assertions_do_not(env):
    """tests/realmodels: the data, the task checks and the matrix decide a result; the test modules'
    assertions, the workers' scheduler and the ISA check do not (changing them converts nothing again)."""
    first = _key()
    for name in ("test_wider.py", "test_practice.py", "background.py", "hostisa.py"):
        f = env["here"] / name
        f.write_text(f.read_text() + "\n# another assertion\n")
    assert _key() == first
    tasks = env["here"] / "tasks.py"
    tasks.write_text(tasks.read_text().replace("0.05", "0.06", 1))
    assert _key() != first


def test_a_dependency_version_changes_the_key(env):
    first = _key()
    env["dists"]["onnxruntime"] = "1.23.1"
    assert _key() != first
    env["dists"]["onnxruntime"] = "1.23.0"
    env["dists"]["scikit-learn"] = "1.5.0"  # a new distribution installed
    assert _key() != first


def test_the_cpu_flags_change_the_key(env):
    first = _key()
    env["flags"] = env["flags"] + ["avx512f", "avx512_vnni"]
    assert _key() != first


def test_the_model_changes_the_key(env):
    first = _key()
    env["model"].write_bytes(b"model bytes v2")
    assert _key() != first


def test_how_the_case_is_converted_changes_the_key(env):
    first = _key()
    assert cache.case_key(_Case(n_val=80)) != first
    assert cache.case_key(_Case(convert_args={"input_shapes": ["x:1,3,48,320"]})) != first
    assert cache.case_key(_Case(profiles=["intel-cpu", "arm-cpu"])) != first


def test_an_interrupted_entry_runs_again_and_a_finished_one_is_read_back(env, tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_SDK_MATRIX_CACHE", str(tmp_path / "results"))
    runs = []

    def run(root: Path) -> dict:
        runs.append(root)
        (root / "toy").mkdir(parents=True, exist_ok=True)
        return {"case": "toy", "work": str(root / "toy"), "rows": [{"status": "published"}]}

    key = _key()
    entry = tmp_path / "results" / f"toy-{key}"
    (entry / "root" / "toy").mkdir(parents=True)  # what a run stopped halfway leaves: no result.json
    first = cache.cached("toy", key, run, tmp_path / "fallback", say=lambda s: None)
    assert len(runs) == 1 and first["cached"] is False and (entry / "result.json").is_file()
    again = cache.cached("toy", key, run, tmp_path / "fallback", say=lambda s: None)
    assert len(runs) == 1 and again["cached"] is True and again["rows"] == first["rows"]
    assert Path(again["work"]).is_dir()
    monkeypatch.setenv("EDGE_SDK_MATRIX_CACHE", "off")
    cache.cached("toy", key, run, tmp_path / "fallback", say=lambda s: None)
    assert runs[-1] == tmp_path / "fallback"
