"""The practice and wider conversion matrices, each in its own process, started as the test session
starts so that they convert while the rest of the suite runs (``tests/conftest.py`` starts them and
moves their tests to the end of the session; the tests' ``results`` fixtures wait for them).

Each matrix is the same code the docs are generated with (``matrix.run_all``, ``run_pipeline``);
only where it runs changes. Recovery's default budget counts CPU seconds, which sharing the
machine with the unit tests moves far less than wall time (``converters/recovery``, ``Loop``).

Only the cases the selected tests read are converted (``-k nudenet_yolov8`` converts that model
alone: ``conftest.py`` gives every real-model test its cases as keywords), and each case's result
comes from, or goes into, the cache outside the clone (``cache.py``) as it finishes.

    python tests/realmodels/background.py practice|wider ROOT OUT.json [CASE,CASE,...]
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: Which test module reads which matrix.
MODULES = {"test_practice.py": "practice", "test_wider.py": "wider"}

_jobs: dict[str, dict[str, Any]] = {}


def start(names: dict[str, set[str] | None] | set[str] | list[str], base: Path | None = None) -> None:
    """Start the matrices in ``names`` (once per session) in their own processes, each converting
    under ``base/<name>`` (pytest's session temp folder; a new temp folder without one). ``names``
    maps a matrix to the cases to convert (None: every case)."""
    wanted = names if isinstance(names, dict) else dict.fromkeys(names)
    for name in sorted(set(wanted) - set(_jobs)):
        if base is not None:
            work = Path(base) / name
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = Path(tempfile.mkdtemp(prefix=f"edge-sdk-{name}-"))
        log = open(work / "log.txt", "wb")  # noqa: SIM115 - closed when the job is collected
        cases = wanted[name]
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), name, str(work / "root"),
                                 str(work / "out.json"), ",".join(sorted(cases)) if cases else ""], stdout=log, stderr=subprocess.STDOUT,
                                cwd=str(HERE.parents[1]), env={**os.environ, "PYTHONUNBUFFERED": "1"})
        _jobs[name] = {"proc": proc, "work": work, "log": log, "started": time.time()}


def result(name: str) -> dict[str, Any]:
    """Wait for the matrix ``name`` (starting it if nobody did) and return what it wrote.

    Raises:
        RuntimeError: the matrix process failed; the message ends with its log's tail.
    """
    start([name])
    job = _jobs[name]
    if "data" in job:
        return job["data"]
    rc = job["proc"].wait()
    job["log"].close()
    out = job["work"] / "out.json"
    if rc != 0 or not out.is_file():
        tail = (job["work"] / "log.txt").read_text(errors="replace")[-6000:]
        raise RuntimeError(f"the {name} matrix process exited with {rc} after "
                           f"{time.time() - job['started']:.0f} s; its log ends:\n{tail}")
    job["data"] = json.loads(out.read_text())
    return job["data"]


@atexit.register
def _stop() -> None:
    """A session that ends early (interrupted, -x) leaves no matrix converting behind it."""
    for job in _jobs.values():
        if "proc" in job and job["proc"].poll() is None:
            job["proc"].terminate()
            try:
                job["proc"].wait(30)
            except subprocess.TimeoutExpired:
                job["proc"].kill()


def _run(name: str, root: Path, out: Path, only: set[str] | None = None) -> None:
    sys.path.insert(0, str(HERE))
    import matrix

    t0 = time.time()
    if name == "practice":
        cases = matrix.run_all([c for c in matrix.CASES if not only or c.name in only], root)
        data = {"cases": cases}
        if not only or matrix.MEL_CASE.name in only:
            data["pipeline"] = matrix.run_pipeline_cached(root)
    else:
        import wider

        data = {"cases": matrix.run_all([c for c in wider.CASES if not only or c.name in only], root)}
    data["seconds"] = round(time.time() - t0, 1)
    tmp = out.with_suffix(".part")
    tmp.write_text(json.dumps(data, default=str))
    tmp.replace(out)
    print(f"{name} matrix done in {data['seconds']} s", flush=True)


if __name__ == "__main__":
    _run(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]),
         set(filter(None, sys.argv[4].split(","))) if len(sys.argv) > 4 else None)
