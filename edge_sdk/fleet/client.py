"""The workstation side: connect to a fleet, list its devices, bench artifacts across them.

:func:`bench` plans one task per (artifact folder, device): the devices whose tags include the
artifact's profile (``devices="all"``), the least busy one of them (``"one"``), or the named ones.
Each task is pinned to its device (Dask never moves it), so a device that leaves mid-run is
seen here: its row becomes a *failed* row with the reason, and with ``devices="one"`` the
artifact is benched again on the next device of that tag under a new task key. A result is
taken only from a finished task, so nothing is counted twice.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from edge_sdk.bench.report import BenchReport, BenchResult, to_markdown
from edge_sdk.errors import EdgeSDKError, InputValidationError

from .node import BENCH_SLOT, META_KEY, FleetError, _dask_require
from .security import Address, check_transport, parse_address, security

RESULT_FIELDS = set(BenchResult.__dataclass_fields__)


@dataclass
class FleetResult(BenchResult):
    """A local bench result plus the ``device`` it ran on (name, address, tags, host, versions)."""

    device: dict[str, Any] = field(default_factory=dict)


@dataclass
class FleetReport(BenchReport):
    """One report for the whole fleet: a result per device x artifact, and the failed rows.

    ``to_dict()`` is the local report's schema (``tool`` is ``edge-sdk bench --fleet``; every
    result has a ``device`` block) plus ``failed``: ``[{"name", "artifact", "profile", "device",
    "reason", "attempt", "retried"}]``.
    """

    failed: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["tool"] = "edge-sdk bench --fleet"
        data["failed"] = self.failed
        return data

    def to_markdown(self) -> str:
        """The local table (a column per device x artifact), fleet header and failed rows."""
        body = to_markdown(self).splitlines()[4:]
        fl = self.environment.get("fleet", {})
        lines = [f"## edge-sdk bench --fleet ({self.created_at})", "",
                 f"Fleet: {fl.get('scheduler')}, {len(fl.get('devices', []))} device(s): "
                 + ", ".join(f"{d['name']} ({', '.join(d['profiles']) or 'no tags'})" for d in fl.get("devices", [])),
                 ""]
        lines += body
        for f in self.failed:
            again = " (retried on another device)" if f.get("retried") else ""
            lines.append(f"- **FAILED** {f['name']} on {f['device'].get('name')}: {f['reason']}{again}")
        return "\n".join(lines)

    def write_markdown(self, path):
        from edge_sdk.fsutil import atomic_write_bytes

        path = Path(path)
        atomic_write_bytes(path, (self.to_markdown() + "\n").encode())
        return path


def connect(address: str | Address, tls: str | None = None, insecure: bool = False, timeout_s: float = 10.0):
    """A ``distributed.Client`` for the fleet at ``address`` (checked: no plain TCP off loopback).

    ``address`` is a string as typed, or an :class:`Address` already passed through ``check_transport``.

    Raises:
        MissingDependencyError: the ``fleet`` extra is not installed.
        InputValidationError: a malformed or refused address.
        FleetError: the scheduler cannot be reached.
    """
    _dask_require()
    addr = address if isinstance(address, Address) else check_transport(parse_address(address, tls=bool(tls)), tls,
                                                                         insecure, "client")
    from distributed import Client

    try:
        return Client(addr.url, security=security(tls, "client"), timeout=timeout_s, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise FleetError(f"cannot reach the fleet scheduler at {addr.url}: {str(exc).rstrip('.') or type(exc).__name__}.",
                         "Is `edge-sdk fleet serve` running there, and is --tls the same CA's certificates?") from None


def list_devices(client) -> list[dict[str, Any]]:
    """The fleet's devices: name, address, tags, busy, running task count and the facts they joined with."""
    info = client.scheduler_info(n_workers=-1)["workers"]
    facts = client.get_metadata([META_KEY], default={}) or {}
    processing = client.processing()
    out = []
    for waddr, w in sorted(info.items(), key=lambda kv: str(kv[1].get("name"))):
        name = str(w.get("name"))
        tags = sorted(k for k in (w.get("resources") or {}) if k != BENCH_SLOT)
        running = len(processing.get(waddr, ()))
        f = facts.get(name, {})
        out.append({"name": name, "address": waddr, "profiles": tags, "busy": running > 0, "tasks": running,
                    "edge_sdk": f.get("edge_sdk"), "host": f.get("host", {}), "runtimes": f.get("runtimes", {}),
                    "profiles_detected": f.get("profiles_detected")})
    return out


def status(address: str, tls: str | None = None, insecure: bool = False, timeout_s: float = 10.0) -> dict[str, Any]:
    """``edge-sdk fleet status``: the scheduler address and every device (see :func:`devices`)."""
    client = connect(address, tls, insecure, timeout_s)
    try:
        return {"scheduler": client.scheduler.address, "devices": list_devices(client)}
    finally:
        client.close()


devices = list_devices  # the public name (edge_sdk.fleet.devices)


@dataclass
class _Job:
    name: str
    folder: Path
    profile: str
    candidates: list[dict]          # devices still to try (first: the current one)
    attempt: int = 1
    future: Any = None
    retry: bool = False


def bench_cli_args(*, runs: int = 100, warmup: int = 10, duration_s: float | None = None, threads: int | None = None,
                   strict: bool = False, power: str = "auto", idle_s: float = 0.0, backend: str | None = None,
                   device: str | None = None, fail_if: Iterable[str] = (), sample_interval_s: float = 0.02,
                   verify: bool = True, crash_guard: bool | None = None, ops: bool = False) -> list[str]:
    """The ``edge-sdk bench`` options a device runs with (the same as a local bench's)."""
    args = ["--runs", str(runs), "--warmup", str(warmup), "--power", power,
            "--interval-ms", repr(sample_interval_s * 1000.0), "--idle", repr(idle_s)]
    if duration_s is not None:
        args += ["--duration", repr(duration_s)]
    if threads is not None:
        args += ["--threads", str(threads)]
    if strict:
        args.append("--strict")
    if backend:
        args += ["--backend", backend]
    if device:
        args += ["--device", device]
    for g in fail_if:
        args += ["--fail-if", g]
    if not verify:
        args.append("--no-verify")
    if crash_guard is False:
        args.append("--no-crash-guard")
    if ops:
        args.append("--ops")
    return args


def _targets(artifacts: list[str | Path], profile: str | None, verify: bool, keys) -> tuple[list[tuple[str, Path, str]], list[dict]]:
    """(name, folder, profile name) per artifact folder, after the local trust check; refused ones skipped."""
    from edge_sdk.errors import ModelLoadError
    from edge_sdk.manifest import artifact_path, find_profile_folders, is_artifact_folder
    from edge_sdk.profiles import resolve_profile
    from edge_sdk.runtimes.select import artifact_profile
    from edge_sdk.trust import Policy, check_artifact

    policy = Policy.resolve(None, keys)

    def check(folder):
        return check_artifact(folder, verify=verify, policy=policy)

    wanted = resolve_profile(profile).name if profile else None
    out: list[tuple[str, Path, str]] = []
    skipped: list[dict] = []
    for raw in artifacts:
        path = artifact_path(raw)
        if is_artifact_folder(path):
            out.append((path.name, path, wanted or artifact_profile(path, check).name))
            continue
        folders = find_profile_folders(path)
        if not folders:
            raise ModelLoadError(f"{path} is not an artifact folder nor a `convert` output folder.",
                                 "Pass the folder written by `edge-sdk convert`, or one profile subfolder of it.")
        if wanted is not None:
            if wanted not in folders:
                raise InputValidationError(f"{path} holds no artifact for profile '{wanted}'.",
                                           f"Profiles in it: {', '.join(sorted(folders))}.")
            folders = {wanted: folders[wanted]}
        for name, folder in folders.items():
            try:
                prof = artifact_profile(folder, check).name
            except EdgeSDKError as exc:
                skipped.append({"name": f"{path.name}/{name}", "path": str(folder), "reason": f"refused: {exc.message}",
                                "refused": True})
                continue
            out.append((f"{path.name}/{name}", folder, prof))
    return out, skipped


def _parse_devices(devices_opt: str | Iterable[str]) -> tuple[str, set[str] | None]:
    if isinstance(devices_opt, str):
        if devices_opt in ("all", "one"):
            return devices_opt, None
        names = {d.strip() for d in devices_opt.split(",") if d.strip()}
    else:
        names = {str(d) for d in devices_opt}
    if not names:
        raise InputValidationError("--devices is empty.", "all, one, or device names separated by commas.")
    return "all", names


def bench(artifacts: str | Path | Iterable[str | Path], address: str, *, devices: str | Iterable[str] = "all",
          tls: str | None = None, insecure: bool = False, profile: str | None = None, runs: int = 100,
          warmup: int = 10, duration_s: float | None = None, threads: int | None = None, strict: bool = False,
          power: str = "auto", idle_s: float = 0.0, backend: str | None = None, device: str | None = None,
          fail_if: Iterable[str] = (), sample_interval_s: float = 0.02, verify: bool = True,
          crash_guard: bool | None = None, trusted_keys: Iterable | None = None, image: str | None = None,
          ops: bool = False,
          timeout_s: float = 10.0, task_timeout_s: float | None = 3600.0, progress=None) -> FleetReport:
    """Benchmark artifacts on the devices of a fleet; one report with a row per device x artifact.

    Args:
        artifacts: Artifact folder(s) or ``convert`` output folder(s) (every profile folder goes to
            the devices tagged with its profile).
        address: The scheduler (``HOST:PORT``, ``tls://HOST:PORT``).
        devices: ``all`` (every matching device), ``one`` (one matching device per artifact; a
            device lost mid-run is replaced by the next of that tag), or device names.
        tls: Certificates folder (``edge-sdk fleet certs``) for mutual TLS.
        insecure: Allow plain TCP to a non-loopback address (prints a warning).
        profile: Pick this profile from ``convert`` output folders.
        runs, warmup, duration_s, threads, strict, power, idle_s, backend, device, fail_if,
        sample_interval_s, verify, crash_guard: As for :func:`edge_sdk.benchmark`; each device runs
            ``edge-sdk bench`` with them in a fresh process.
        trusted_keys: Public key files a signature is required by (checked here and on the device).
        image: Time preprocessing of this image plus inference (sent to the devices with the artifact).
        ops: Also profile per operator on each device (``result.ops``, as ``bench --ops``).
        timeout_s: Connecting to the scheduler.
        task_timeout_s: One device's bench of one artifact.
        progress: Called with one line of text per event (task sent, finished, failed).

    Returns:
        The :class:`FleetReport`.

    Raises:
        InputValidationError, ModelLoadError: bad options or artifacts (before anything is sent).
        FleetError: the scheduler is unreachable, or no device of the fleet has any artifact's profile.
    """
    from edge_sdk.bench.gates import parse_gate

    if isinstance(artifacts, (str, Path)):
        artifacts = [artifacts]
    _dask_require()
    addr = check_transport(parse_address(address, tls=bool(tls)), tls, insecure, "client")
    fail_if = list(fail_if)
    for g in fail_if:
        parse_gate(g)
    mode, names = _parse_devices(devices)
    image_payload = None
    if image is not None:
        from edge_sdk.bench.runner import load_image

        from .tasks import pack_path

        load_image(image)  # a bad --image fails here, before anything is sent
        image_payload = pack_path(image)
    key_bytes = [Path(k).read_bytes() if isinstance(k, (str, Path)) else k for k in (trusted_keys or [])]
    targets, skipped = _targets(list(artifacts), profile, verify, key_bytes or None)
    cli_args = bench_cli_args(runs=runs, warmup=warmup, duration_s=duration_s, threads=threads, strict=strict,
                              power=power, idle_s=idle_s, backend=backend, device=device, fail_if=fail_if,
                              sample_interval_s=sample_interval_s, verify=verify, crash_guard=crash_guard,
                              ops=ops)
    say = progress or (lambda line: None)
    client = connect(addr, tls, insecure, timeout_s)
    try:
        fleet = list_devices(client)
        if names:
            unknown = names - {d["name"] for d in fleet}
            if unknown:
                raise InputValidationError(f"no device named {', '.join(sorted(unknown))} in the fleet.",
                                           "Devices: " + (", ".join(d["name"] for d in fleet) or "none joined"))
        jobs: list[_Job] = []
        load = {d["address"]: d["tasks"] for d in fleet}  # spread --devices one over the devices of a tag
        for name, folder, prof in targets:
            cands = [d for d in fleet if prof in d["profiles"] and (names is None or d["name"] in names)]
            if not cands:
                skipped.append({"name": name, "path": str(folder), "refused": False,
                                "reason": f"no device in the fleet is tagged '{prof}'"})
                continue
            cands.sort(key=lambda d: load[d["address"]])
            if mode == "one":
                load[cands[0]["address"]] += 1
                jobs.append(_Job(name, folder, prof, cands, retry=True))
            else:
                jobs += [_Job(name, folder, prof, [d]) for d in cands]
        if not jobs:
            raise FleetError("no device in the fleet runs any of these artifacts: "
                             + "; ".join(f"{s['name']}: {s['reason']}" for s in skipped),
                             "Join a device tagged with the profile (`edge-sdk fleet join ADDRESS`), "
                             "or check `edge-sdk fleet status`.")
        payloads = {str(j.folder): None for j in jobs}
        from .tasks import bench_task, pack_folder

        for key in payloads:
            payloads[key] = pack_folder(key)
        results, gates_failed, gates_checked = [], [], list(fail_if)
        warnings: list[str] = []

        def submit(job: _Job) -> None:
            dev = job.candidates[0]
            data = place(client, payloads[str(job.folder)], dev)
            job.future = client.submit(bench_task, data, cli_args, key_bytes or None,
                                       task_timeout_s, image_payload, key=f"edge-sdk-bench-{uuid.uuid4().hex}",
                                       workers=[dev["address"]], allow_other_workers=False,
                                       resources={BENCH_SLOT: 1, job.profile: 1}, pure=False, retries=0)

        def take(job: _Job, dev: dict, out: dict) -> None:
            _take(job, dev, out, results, gates_failed, gates_checked, warnings)

        failed = drive(client, jobs, submit, take, say)
        results.sort(key=lambda r: r.name)
        env = {"fleet": {"scheduler": client.scheduler.address, "devices": fleet, "devices_option": devices
                         if isinstance(devices, str) else list(devices)},
               "host": {}, "warnings": warnings}
        return FleetReport(results, env, skipped, gates_checked, gates_failed, failed=failed)
    finally:
        client.close()


def place(client, payload: dict[str, Any], dev: dict[str, Any]):
    """Send a payload straight to the device that will use it (not kept in the scheduler's task graph)."""
    return client.scatter([payload], workers=[dev["address"]], hash=False)[0]


def drive(client, jobs: list[_Job], submit, take, say) -> list[dict[str, Any]]:
    """Run jobs to the end: each pinned to its first candidate device; returns the failed rows.

    ``submit(job)`` sets ``job.future`` for ``job.candidates[0]``; ``take(job, device, out)`` records
    a task's ``{"ok": True, ...}`` result. A task that returns ``{"ok": False, "reason"}``, errs,
    or whose device leaves the fleet becomes a failed row; a job with ``retry`` set is then
    submitted again (new key) to its next candidate.
    """
    failed: list[dict[str, Any]] = []

    def send(job: _Job) -> None:
        say(f"{job.name} -> {job.candidates[0]['name']} (attempt {job.attempt})")
        try:
            submit(job)
        except (OSError, TimeoutError, ValueError) as exc:  # e.g. the device left while the data was sent
            job.future = None
            fail(job, f"could not send the task to device '{job.candidates[0]['name']}': {type(exc).__name__}: {exc}")

    def fail(job: _Job, reason: str) -> None:
        dev = job.candidates.pop(0)
        again = job.retry and bool(job.candidates)
        failed.append({"name": f"{job.name}@{dev['name']}", "artifact": str(job.folder), "profile": job.profile,
                       "device": {k: dev[k] for k in ("name", "address", "profiles")}, "reason": reason,
                       "attempt": job.attempt, "retried": again})
        say(f"{job.name} on {dev['name']}: FAILED: {reason}")
        if again:
            job.attempt += 1
            send(job)
        else:
            job.future = None

    for job in jobs:
        send(job)
    pending = [j for j in jobs if j.future is not None]
    while pending:
        time.sleep(0.2)
        alive = set(client.scheduler_info(n_workers=-1)["workers"])
        for job in list(pending):
            fut, dev = job.future, job.candidates[0]
            if fut.status == "finished":
                out = fut.result()
                if out["ok"]:
                    take(job, dev, out)
                    say(f"{job.name} on {dev['name']}: done")
                    job.future = None
                else:
                    fail(job, out["reason"])
            elif dev["address"] not in alive or (fut.status in ("error", "cancelled") and _leaves(client, dev["address"])):
                # checked before "error": a lost device also loses its inputs, and the scheduler can
                # cancel its task a moment before the worker list says it left
                fut.cancel()
                fail(job, f"device '{dev['name']}' left the fleet during the run (worker lost: killed, "
                          "crashed or disconnected)")
            elif fut.status in ("error", "cancelled"):
                exc = fut.exception() if fut.status == "error" else None
                fail(job, f"the task failed on the device: {type(exc).__name__}: {exc}" if exc
                     else "the task was cancelled")
            if job.future is None:
                pending.remove(job)
    return failed


#: How long a task that failed or was cancelled waits for its device to leave the worker list.
LEAVE_GRACE_S = 3.0


def _leaves(client, address: str, grace_s: float = LEAVE_GRACE_S) -> bool:
    """Whether ``address`` is gone from the scheduler's workers now or within ``grace_s``: a killed
    worker's task is cancelled (its scattered inputs are lost) as the scheduler removes the worker,
    and the client can see the cancellation before the worker list changes."""
    deadline = time.monotonic() + grace_s
    while True:
        if address not in set(client.scheduler_info(n_workers=-1)["workers"]):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


def _take(job: _Job, dev: dict, out: dict, results: list, gates_failed: list, gates_checked: list,
          warnings: list) -> None:
    report = out["report"]
    device = dict(out["device"])
    env = report.get("environment", {})
    device.update({"host": env.get("host", {}), "edge_sdk": report.get("edge_sdk"),
                   "runtime_versions": env.get("runtime_versions"), "attempt": job.attempt,
                   "temperatures_c": env.get("temperatures_c")})
    label = f"{job.name}@{device['name']}"
    for r in report.get("results", []):
        row = {k: v for k, v in r.items() if k in RESULT_FIELDS}
        row["name"] = label
        row["artifact"] = str(job.folder)
        results.append(FleetResult(**row, device=device))
    gates = report.get("gates", {})
    gates_checked += [g for g in gates.get("checked", []) if g not in gates_checked]
    own = {f"{r.get('name')}: " for r in report.get("results", [])}
    for g in gates.get("failed", []):
        g = next((g[len(p):] for p in own if g.startswith(p)), g)
        gates_failed.append(f"{label}: {g}")
    warnings += [f"{label}: {w}" for w in out.get("warnings", [])]
