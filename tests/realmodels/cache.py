"""Each real model's matrix result, cached outside the clone and keyed by everything that decides it.

A case (one model converted for its profiles and judged by gate and task, ``matrix.run_case``) is
written here as it finishes, with its artifacts, so an interrupted matrix resumes where it stopped
and an unchanged model is never converted twice. The key (:func:`case_key`) covers:

- the model file's sha256 and every pinned practice file's (the data is made from them by code);
- every source file of the installed ``edge_sdk`` package (``edge_sdk``, ``edge_sdk.converters``,
  ``edge_sdk.runtimes``, the device profiles) and of ``tests/realmodels/`` (data, tasks, matrices,
  pins; not the test modules' assertions nor the workers' scheduler: :data:`NOT_DECIDING`);
- the name and version of every installed distribution;
- this CPU's ISA flags (int8 kernels, and so gate figures and what recovery finds, differ by ISA);
- the case itself (name, model, profiles, sample counts, convert arguments).

Any change to what converts or judges changes the key, and the case runs again. Where:
``$EDGE_SDK_MATRIX_CACHE`` (default ``~/.cache/edge-sdk-practice/results``); ``off`` turns it off
(every case converts, into the run's own folder). Old entries are never read again once the key
moves; delete the folder to reclaim the space.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
#: Files whose bytes are part of the key (sources, profiles, package data the converters read).
SOURCE_SUFFIXES = (".py", ".toml", ".json", ".txt", ".cfg")


def cache_dir() -> Path | None:
    """The cache folder, or None where ``$EDGE_SDK_MATRIX_CACHE`` is ``off``."""
    env = os.environ.get("EDGE_SDK_MATRIX_CACHE", "")
    if env.lower() in ("off", "0", "no", "false"):
        return None
    return Path(env) if env else Path.home() / ".cache" / "edge-sdk-practice" / "results"


#: tests/realmodels files that decide no result: the tests' assertions, the scheduler of the
#: matrices' workers, the host's ISA check (every other file there - data, tasks, matrices, the
#: practice set's pins, this key - is part of the key).
NOT_DECIDING = ("test_*.py", "background.py", "hostisa.py")


def _tree_digest(roots: list[Path], skip: tuple[str, ...] = ()) -> dict[str, str]:
    """sha256 of every source file under ``roots`` (``__pycache__``, hidden folders and names
    matching ``skip`` left out), by path relative to its root."""
    out = {}
    for root in roots:
        for p in sorted(root.rglob("*")):
            rel = p.relative_to(root)
            if not p.is_file() or p.suffix not in SOURCE_SUFFIXES or any(
                    part == "__pycache__" or part.startswith(".") for part in rel.parts) or any(
                    p.match(pattern) for pattern in skip):
                continue
            out[f"{root.name}/{rel.as_posix()}"] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def package_roots() -> list[Path]:
    """The folders the installed ``edge_sdk`` package is read from (an editable install maps
    ``converters/`` and ``runtimes/`` into it), and its device profiles."""
    import edge_sdk
    import edge_sdk.converters
    import edge_sdk.runtimes

    roots = [Path(p) for mod in (edge_sdk, edge_sdk.converters, edge_sdk.runtimes) for p in mod.__path__]
    profiles = [Path(edge_sdk.__file__).parent / "device_profiles", HERE.parents[1] / "device_profiles"]
    roots += [p for p in profiles if p.is_dir()]
    unique: list[Path] = []
    for r in (r.resolve() for r in roots):
        if r not in unique and not any(r.is_relative_to(u) for u in unique):
            unique = [u for u in unique if not u.is_relative_to(r)] + [r]
    return unique


def distributions() -> dict[str, str]:
    """Every installed distribution's version, by normalised name."""
    from importlib import metadata

    return {(d.metadata["Name"] or "?").lower().replace("_", "-"): d.version for d in metadata.distributions()}


def cpu_flags() -> list[str]:
    from edge_sdk import hostinfo

    return sorted(set(hostinfo.cpu_flags()))


@functools.lru_cache(maxsize=None)
def environment_parts() -> dict[str, Any]:
    """What every case's key shares: code, dependencies, CPU (computed once per process)."""
    from practice import MEMBERS

    return {"package": _tree_digest(package_roots()), "realmodels": _tree_digest([HERE], NOT_DECIDING),
            "distributions": distributions(), "cpu_flags": cpu_flags(),
            "pinned": {name: m.sha256 for name, m in sorted(MEMBERS.items())}}


def case_parts(case: Any) -> dict[str, Any]:
    """What one case adds to the key: its model's bytes and how it is converted and judged."""
    from practice import fetch

    model = fetch(case.model)
    return {"case": case.name, "model": case.model, "model_sha256": hashlib.sha256(model.read_bytes()).hexdigest(),
            "profiles": list(case.profiles), "n_calib": case.n_calib, "n_val": case.n_val,
            "convert_args": json.dumps(case.convert_args, sort_keys=True, default=str), "stream": case.stream}


def key_of(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def case_key(case: Any, extra: dict[str, Any] | None = None) -> str:
    """The cache key of ``case`` on this installation and CPU (``extra``: what else decides it)."""
    return key_of({**environment_parts(), **case_parts(case), **(extra or {})})


def cached(name: str, key: str, run: Callable[[Path], dict[str, Any]], fallback_root: Path,
           say: Callable[[str], None] = print) -> dict[str, Any]:
    """The result of ``run(root)`` for ``name`` under ``key``: read from the cache when a finished
    entry is there, else run into a fresh entry and written when it finishes (an entry without its
    result, from an interrupted run, is removed and run again). Without a cache, ``run`` converts
    under ``fallback_root``."""
    base = cache_dir()
    if base is None:
        return {**run(fallback_root), "cached": False}
    entry = base / f"{name}-{key}"
    done = entry / "result.json"
    if done.is_file():
        say(f"{name}: from the cache ({entry})")
        return {**json.loads(done.read_text()), "cached": True}
    if entry.exists():
        shutil.rmtree(entry)
    root = entry / "root"
    root.mkdir(parents=True)
    t0 = time.time()
    result = run(root)
    tmp = entry / "result.part"
    tmp.write_text(json.dumps({**result, "key": key}, default=str))
    tmp.replace(done)
    say(f"{name}: converted and judged in {time.time() - t0:.0f} s, cached ({entry})")
    return {**result, "key": key, "cached": False}
