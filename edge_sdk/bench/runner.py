"""Run the benchmark of one artifact: load, cold inference, warm-up, timed loop, memory, power.

The order matters for honest numbers: load time is file-to-ready (the hash check included
unless ``verify=False``); the first inference is timed on its own (it pays lazy allocations
and kernel selection); warm-up runs are not recorded; the idle baseline is taken with the
model loaded but doing nothing; then the timed loop runs between two synchronous power
samples, so energy covers exactly that loop.
Every latency is the wall time of one ``model.infer`` call (``perf_counter_ns``), what an
application calling the SDK waits; the backend's own ``timings['inference']`` is kept
beside it as ``inference_ms``.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from edge_sdk.errors import InputValidationError
from edge_sdk.power import PowerMonitor
from edge_sdk.power.sampler import Sampler

from .report import BenchResult
from .stats import summarize
from .targets import Target

#: At most this many per-run latencies go into the report (statistics always use all of them).
MAX_SAMPLES = 20_000

#: progress(done, total or None, seconds elapsed, label); total is None in --duration mode.
Progress = Callable[[int, "int | None", float, str], None]


@dataclass(frozen=True)
class BenchConfig:
    """How to run the benchmark (built by ``edge_sdk.benchmark`` and the CLI).

    Attributes:
        runs: Timed inferences (ignored when ``duration_s`` is set).
        warmup: Untimed inferences after the first (cold) one.
        duration_s: Run the timed loop for this many seconds instead of ``runs`` times.
        threads: CPU threads for the runtime (None: its default).
        strict: Refuse a fallback from the profile's native accelerator (passed to ``load``).
        power: ``auto``, ``none``, a source name or ``cmd:COMMAND``.
        idle_s: Seconds of idle baseline before the timed loop (0: none).
        image: An image file: time ``preprocess`` + ``infer`` end to end instead of ``infer``.
        backend: Force a backend (passed to ``load``).
        device: Force a device / delegate (passed to ``load``).
        sample_interval_s: Power and memory sampling period.
        seed: Seed of the random input feed.
        verify: Hash-check the artifact when loading.
        crash_guard: Trial-load the model in a child process first (None: the default of ``load``).
        allow_external_delegates: Delegate libraries a chain may load (passed to ``load``).
        trusted_keys: Keys the manifest must be signed by (passed to ``load``).
        ops: Also take a per-operator profile (a separate profiling session after the timed loop).
        mode: ``end-to-end`` (``Model.infer``: what an application waits for) or ``backend`` (the
            runtime's own call on inputs bound once, what vendors' tools time; see ``backend_mode``).
    """

    runs: int = 100
    warmup: int = 10
    duration_s: float | None = None
    threads: int | None = None
    strict: bool = False
    power: str = "auto"
    idle_s: float = 0.0
    image: str | None = None
    backend: str | None = None
    device: str | None = None
    sample_interval_s: float = 0.02
    seed: int = 0
    verify: bool = True
    crash_guard: bool | None = None
    allow_external_delegates: tuple[str, ...] = ()
    trusted_keys: tuple = ()
    ops: bool = False
    mode: str = "end-to-end"

    def check(self) -> "BenchConfig":
        """Raises InputValidationError naming the first bad option."""
        bad = [("--runs", self.runs < 1 and self.duration_s is None, "at least 1"),
               ("--warmup", self.warmup < 0, "0 or more"),
               ("--duration", self.duration_s is not None and self.duration_s <= 0, "more than 0 seconds"),
               ("--threads", self.threads is not None and self.threads < 1, "at least 1"),
               ("--idle", self.idle_s < 0, "0 or more seconds"),
               ("--interval-ms", not 0.001 <= self.sample_interval_s <= 10.0, "between 1 ms and 10 s"),
               ("--mode", self.mode not in ("end-to-end", "backend"), "end-to-end or backend"),
               ("--mode backend", self.mode == "backend" and self.image is not None,
                "without --image (backend mode times the runtime call alone, no preprocessing)")]
        for opt, is_bad, want in bad:
            if is_bad:
                raise InputValidationError(f"{opt} must be {want}.", f"Check the value given to {opt}.")
        return self


# ----------------------------------------------------------------------------- memory
def _status_kb(field: str) -> float | None:
    # Our own process: always the real /proc (EDGE_SDK_SYSFS_ROOT is for host facts).
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


def rss_mb() -> float | None:
    """Current resident set size of this process in MB (None where /proc is missing)."""
    kb = _status_kb("VmRSS")
    return kb / 1024.0 if kb is not None else None


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) so the next peak is this artifact's own."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float | None:
    kb = _status_kb("VmHWM")
    if kb is None:  # no /proc (macOS): the lifetime peak, in bytes on macOS
        raw = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return raw / (1 << 20) if os.uname().sysname == "Darwin" else raw / 1024.0
    return kb / 1024.0


# ----------------------------------------------------------------------------- inputs
_INT_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "int32": (-1000, 1000),
               "int64": (-1000, 1000)}


def make_feed(inputs: list[Any], seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs matching the model's static input specs (the same for every run).

    Wide integer inputs that are not quantized tensors (token ids, masks, a sample rate) are fed
    zeros: a random id can fall outside an embedding table, and 0 is a valid index of any.
    """
    rng = np.random.default_rng(seed)
    feed = {}
    for spec in inputs:
        dtype = str(spec.dtype)
        if dtype in ("int16", "int32", "int64") and getattr(spec, "quantization", None) is None:
            feed[spec.name] = np.zeros(spec.shape, dtype)
        elif dtype in _INT_RANGES:
            lo, hi = _INT_RANGES[dtype]
            feed[spec.name] = rng.integers(lo, hi, size=spec.shape, endpoint=True).astype(dtype)
        elif dtype == "bool":
            feed[spec.name] = rng.integers(0, 1, size=spec.shape, endpoint=True).astype(bool)
        else:
            feed[spec.name] = rng.random(spec.shape, dtype=np.float32).astype(dtype)
    return feed


def load_image(path: str) -> np.ndarray:
    """Decode the ``--image`` file once (RGB uint8), so the timed loop measures preprocessing, not I/O.

    Raises:
        InputValidationError: the file is missing or not an image PIL can read.
    """
    from PIL import Image, UnidentifiedImageError

    from edge_sdk.arrayfile import regular_file

    try:
        regular_file(Path(path), what="--image", error=InputValidationError)  # a FIFO would block the reader
        with Image.open(path) as img:
            return np.asarray(img.convert("RGB"))
    except (OSError, UnidentifiedImageError, ValueError, Image.DecompressionBombError) as exc:
        raise InputValidationError(f"--image {path}: cannot read it as an image ({exc}).",
                                   "Pass a JPEG/PNG/BMP file the model's preprocessing can take.") from None


def _details(model: Any) -> dict[str, Any]:
    """The runner's ``details`` (precision actually used ...), wherever the facade keeps them."""
    for obj in (model, getattr(model, "runner", None), getattr(model, "_runner", None)):
        d = getattr(obj, "details", None)
        if isinstance(d, dict):
            return d
    return {}


# ----------------------------------------------------------------------------- one artifact
def run_one(target: Target, cfg: BenchConfig, progress: Progress | None = None) -> BenchResult:
    """Benchmark one artifact folder.

    Args:
        target: What to run (see :mod:`edge_sdk.bench.targets`).
        cfg: How to run it.
        progress: Called during the timed loop (the CLI draws a progress bar with it).

    Returns:
        The measured :class:`BenchResult`.

    Raises:
        EdgeSDKError: from ``load`` / ``infer`` (bad artifact, strict fallback ...).
    """
    from edge_sdk import load

    preferred = list(target.profile.power.sensors) if target.profile else []
    monitor = PowerMonitor(cfg.power, preferred, cfg.sample_interval_s)
    mem = Sampler(lambda: rss_mb() or 0.0, cfg.sample_interval_s, "edge-sdk-rss")
    try:
        peak_reset = reset_peak_rss()
        mem.start()
        t = time.perf_counter_ns()
        model = load(target.path, profile=target.load_profile, backend=cfg.backend, device=cfg.device,
                     strict=cfg.strict, num_threads=cfg.threads, verify=cfg.verify, crash_guard=cfg.crash_guard,
                     allow_external_delegates=list(cfg.allow_external_delegates), trusted_keys=list(cfg.trusted_keys))
        load_ms = (time.perf_counter_ns() - t) / 1e6
        try:
            result = _measure(model, target, cfg, model.manifest, monitor, mem, load_ms, progress)
            # Without the reset, VmHWM is the whole process's peak (earlier artifacts included).
            result.runtime["peak_rss_scope"] = "this artifact" if peak_reset else "process lifetime"
            if cfg.ops:  # after the timed loop: the profiler's own cost never touches those numbers
                from .ops import profile

                result.ops = profile(model, runs=max(5, min(cfg.runs, 50)), p50_ms=result.latency_ms["p50"]).to_dict()
            return result
        finally:
            model.close()
    finally:
        mem.stop()
        monitor.close()


def _call_under_test(model, manifest, cfg, image):
    """What one timed call is: ``(once, stream pairs, stepping)``.

    ``infer_image`` on the decoded image (end to end), one ``Model.stream().step`` for a streamed
    artifact (the state fed back included), ``infer`` on a seeded feed, or in backend mode the
    runtime's own call on inputs bound once.
    """
    feed = make_feed(model.inputs, cfg.seed)
    streams = [f"{s.output} -> {s.input}" for s in getattr(manifest, "streams", None) or []]
    if cfg.mode == "backend":
        from .backend_mode import bound_call

        return bound_call(model), streams, False
    if image is not None:  # decoded once: we time resize/normalize + inference, not file I/O
        return (lambda: model.infer_image(image)), streams, False
    if streams:
        stepper = model.stream()
        states = {s.input for s in manifest.streams}
        step_feed = {k: v for k, v in feed.items() if k not in states}
        return (lambda: stepper.step(step_feed)), streams, True
    return (lambda: model.infer(feed)), streams, False


@dataclass
class _Loop:
    """What the timed loop measured."""

    lat: list[float]
    backend_ms: list[float]
    last: Any
    wall_s: float
    cpu_s: float
    marks: tuple


def _timed_loop(once, cfg, monitor, progress, name: str) -> _Loop:
    """Run ``once`` for ``cfg.runs`` calls (or ``cfg.duration_s``), each timed alone, power sampled over exactly the loop."""
    lat: list[float] = []
    backend_ms: list[float] = []
    total = None if cfg.duration_s else cfg.runs
    monitor.start()
    w0 = monitor.mark()
    cpu0 = time.process_time()  # all threads of this process, ns resolution (os.times ticks at 10 ms)
    start = time.perf_counter_ns()
    deadline = start + int(cfg.duration_s * 1e9) if cfg.duration_s else None
    next_report = start
    res = None
    while True:
        t = time.perf_counter_ns()
        res = once()
        now = time.perf_counter_ns()
        lat.append((now - t) / 1e6)
        if isinstance(getattr(res, "timings", None), dict) and "inference" in res.timings:
            backend_ms.append(float(res.timings["inference"]))
        if progress and now >= next_report:
            progress(len(lat), total, (now - start) / 1e9, name)
            next_report = now + 200_000_000  # at most five updates a second
        if (deadline is not None and now >= deadline) or (deadline is None and len(lat) >= cfg.runs):
            break
    end = time.perf_counter_ns()
    cpu1 = time.process_time()
    w1 = monitor.mark()
    monitor.stop()
    if progress:
        progress(len(lat), len(lat), (end - start) / 1e9, name)
    return _Loop(lat, backend_ms, res, (end - start) / 1e9, cpu1 - cpu0, (w0, w1))


def _measure(model, target, cfg, manifest, monitor, mem, load_ms, progress) -> BenchResult:
    """Cold call, warm-up, idle baseline, the timed loop, then one :class:`BenchResult`."""
    rss_loaded = rss_mb()
    image = load_image(cfg.image) if cfg.image else None
    once, streams, stepping = _call_under_test(model, manifest, cfg, image)
    t = time.perf_counter_ns()
    res = once()
    first_ms = (time.perf_counter_ns() - t) / 1e6
    for _ in range(cfg.warmup):
        once()
    monitor.measure_idle(cfg.idle_s)
    rss_warm = rss_mb()
    loop = _timed_loop(once, cfg, monitor, progress, target.name)
    res = loop.last if loop.last is not None else res
    lat, wall_s, cpu_s = loop.lat, loop.wall_s, loop.cpu_s
    rss_end = rss_mb()
    mem.mark()
    peaks = [v for _, v in mem.samples if v] + [v for v in (peak_rss_mb(),) if v]
    stride = max(1, -(-len(lat) // MAX_SAMPLES))  # long --duration runs: keep the JSON a sane size
    details = _details(model)
    art_precision = next((a.precision for a in manifest.artifacts if a.role == "model"), None)
    return BenchResult(
        name=target.name, artifact=str(target.path),
        profile=target.profile.name if target.profile else manifest.profile.name,
        backend=getattr(res, "backend", None) or getattr(model, "backend", None),
        delegate=getattr(res, "delegate", None) or getattr(model, "delegate", None),
        precision=str(details.get("inference_precision") or art_precision or "") or None,
        threads=cfg.threads or details.get("num_threads"),
        runs=len(lat), warmup=cfg.warmup, load_ms=load_ms, first_inference_ms=first_ms,
        latency_ms=summarize(lat),
        inference_ms=summarize(loop.backend_ms) if len(loop.backend_ms) == len(lat) else None,
        throughput_ips=len(lat) / wall_s if wall_s > 0 else 0.0,
        peak_rss_mb=max(peaks) if peaks else None,
        rss_growth_mb=(rss_end - rss_warm) if rss_end is not None and rss_warm is not None else None,
        rss_after_load_mb=rss_loaded,
        cpu_time_s=cpu_s, cpu_utilization=cpu_s / wall_s if wall_s > 0 else 0.0, wall_s=wall_s,
        power=monitor.result(*loop.marks, len(lat)), end_to_end=image is not None, mode=cfg.mode,
        fallback=bool(getattr(res, "fallback", False) or getattr(model, "fallback", False)),
        runtime={"details": {k: v for k, v in details.items() if isinstance(v, (str, int, float, bool, list))},
                 "model_sha256": getattr(res, "model_sha256", None),
                 **({"stream": {"state": streams, "timed": "one step of Model.stream(), the state fed back from "
                                                          "the previous step's outputs"}} if stepping else {})},
        samples_ms=[round(v, 6) for v in lat[::stride]], samples_stride=stride,
    )
