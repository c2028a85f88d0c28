"""On-device benchmark: cold start, latency distribution, memory, and energy per inference.

``edge_sdk.benchmark(...)`` and ``edge-sdk bench`` return / print the same
:class:`~edge_sdk.bench.report.BenchReport`. See :mod:`edge_sdk.bench.runner` for what is
measured and in which order, :mod:`edge_sdk.power` for power, :mod:`edge_sdk.bench.gates`
for ``--fail-if`` and profile budgets.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Iterable

from edge_sdk import hostinfo

from . import environment
from .gates import budget_gates, evaluate, parse_gate
from .report import SCHEMA_VERSION, BenchReport, BenchResult, to_markdown
from .runner import BenchConfig, Progress, load_image, run_one
from .targets import expand


class EmulationWarning(UserWarning):
    """Issued by :func:`benchmark` when this process runs under user-mode emulation (e.g. qemu-user)."""


def benchmark(artifacts: str | Path | Iterable[str | Path], *, runs: int = 100, warmup: int = 10,
              duration_s: float | None = None, threads: int | None = None, strict: bool = False,
              power: str = "auto", idle_s: float = 0.0, profile: str | None = None,
              image: str | None = None, backend: str | None = None, device: str | None = None,
              fail_if: Iterable[str] = (), sample_interval_s: float = 0.02, verify: bool = True,
              progress: Progress | None = None, allow_external_delegates: Iterable[str] | None = None,
              trusted_keys: Iterable | None = None, crash_guard: bool | None = None, ops: bool = False,
              mode: str = "end-to-end") -> BenchReport:
    """Benchmark one or more artifacts on this device.

    Args:
        artifacts: Artifact folder(s), or ``convert`` output folder(s) holding several profiles.
        runs: Timed inferences (ignored with ``duration_s``).
        warmup: Untimed inferences after the cold one.
        duration_s: Time the loop for this many seconds instead of ``runs`` inferences.
        threads: CPU threads for the runtime.
        strict: Refuse a fallback from the profile's native accelerator.
        power: ``auto``, ``none``, ``rapl``, ``ina3221``, ``tegrastats``, ``nvml``, ``hwmon``
            or ``cmd:COMMAND`` (an external meter printing watts).
        idle_s: Idle-baseline seconds, reported and subtracted separately.
        profile: Pick this profile from a ``convert`` output folder (or pass it to ``load``).
        image: Time preprocessing of this image plus inference (end to end).
        backend: Force a backend (passed to ``load``).
        device: Force a device / delegate (passed to ``load``).
        fail_if: Gate expressions such as ``'p99_ms>20'``; failures are listed in the report
            (``report.gates_failed``) together with the profile's latency budget.
        sample_interval_s: Power / memory sampling period.
        verify: Hash-check artifacts when loading.
        progress: Progress callback ``(done, total, seconds, name)``.
        allow_external_delegates: Delegate libraries a profile chain may load (see ``edge_sdk.load``).
        trusted_keys: Public keys artifacts must be signed by (see ``edge_sdk.load``).
        crash_guard: Trial-load each model file in a child process first (see ``edge_sdk.load``;
            None: on unless turned off by ``EDGE_SDK_CRASH_GUARD=0`` or the config file), so an
            artifact that crashes the runtime is reported, not the end of the run.
        ops: Also profile each artifact per operator with its runtime's own profiler
            (``result.ops``; see :mod:`edge_sdk.bench.ops`).
        mode: ``end-to-end`` (default: ``Model.infer``, what an application waits for) or
            ``backend`` (the runtime call alone on inputs bound once, what vendors' tools time).

    Returns:
        The :class:`BenchReport` (results in argument order; skipped profiles with reasons).

    Raises:
        InputValidationError: a bad option or gate expression (checked before anything runs).
        ModelLoadError: an argument is not an artifact or ``convert`` output folder.
        DelegateUnavailableError: no given profile runs natively here (and none was picked).
    """
    if isinstance(artifacts, (str, Path)):
        artifacts = [artifacts]
    from edge_sdk.trust import Policy, check_artifact

    policy = Policy.resolve(allow_external_delegates, trusted_keys)
    cfg = BenchConfig(runs=runs, warmup=warmup, duration_s=duration_s, threads=threads, strict=strict,
                      power=power, idle_s=idle_s, image=image, backend=backend, device=device,
                      sample_interval_s=sample_interval_s, verify=verify, crash_guard=crash_guard,
                      allow_external_delegates=policy.allow_external_delegates,
                      trusted_keys=policy.trusted_keys, ops=ops, mode=mode).check()
    gates = [parse_gate(g) for g in fail_if]
    if image is not None:
        load_image(image)  # a bad --image fails now, not after the first artifact's measurements
    from edge_sdk.power import open_source

    src, _ = open_source(power)  # validate --power before the first load; reopened per artifact
    if src is not None:
        src.close()
    targets, skipped = expand(list(artifacts), profile,
                              lambda folder: check_artifact(folder, verify=verify, policy=policy))
    env = environment.collect()
    emulated = env["host"].get("emulation")
    if emulated:  # like a fallback: the numbers are real, but they are not the device's
        warnings.warn(f"timings are not the device's: {emulated}; latency, throughput, CPU time and energy "
                      "are the emulator's", EmulationWarning, stacklevel=2)
    results: list[BenchResult] = []
    checked: list[str] = [g.text for g in gates]
    failed: list[str] = []
    for target in targets:
        result = run_one(target, cfg, progress)
        results.append(result)
        own = budget_gates(target.profile) if target.profile else []
        checked += [g.text for g in own if g.text not in checked]
        failed += evaluate(gates + own, result.to_dict())
    env["temperatures_after_c"] = hostinfo.temperatures()
    return BenchReport(results, env, [s.to_dict() for s in skipped], checked, failed)


__all__ = ["SCHEMA_VERSION", "BenchConfig", "EmulationWarning", "BenchReport", "BenchResult", "benchmark", "to_markdown"]
