"""The two long-running fleet processes: the scheduler (``fleet serve``) and a device (``fleet join``).

A device is a Dask worker with one thread (one benchmark at a time, so two runs never share a
CPU), whose *resources* are its device tags: every built-in profile ``edge-sdk doctor`` says
this host runs natively, ``convert`` when the conversion stack is importable, and ``bench`` (one
slot). ``--profiles`` replaces the detected profiles (for tests and odd devices). When it joins,
a device stores its doctor facts in the scheduler's metadata (``edge_sdk_fleet/<name>``), which
``fleet status`` and the bench report's ``device`` blocks read.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any

from edge_sdk.errors import FleetError, InputValidationError

from .security import Address, security

#: The scheduler metadata key under which each device's facts are stored (then its name).
META_KEY = "edge_sdk_fleet"
#: The resource every device has exactly one of: a benchmark holds it for its whole run.
BENCH_SLOT = "bench"
#: The tag of devices that can run conversions.
CONVERT_TAG = "convert"
#: Import names the conversion stack needs (checked without importing them).
CONVERT_MODULES = ("tensorflow", "onnx", "onnxruntime", "onnx2tf", "tf2onnx", "openvino", "nncf")


def native_profiles() -> list[str]:
    """The built-in profiles this host runs natively (the probe ``edge-sdk doctor`` uses)."""
    from edge_sdk.doctor import _profiles

    return [row["profile"] for row in _profiles() if row["status"] == "native"]


def can_convert() -> bool:
    """True when every module of the conversion stack is importable here (nothing is imported)."""
    from edge_sdk._deps import available

    return all(available(m) for m in CONVERT_MODULES)


def device_facts(name: str, profiles: list[str], detected: bool) -> dict[str, Any]:
    """What a device tells the scheduler once when it joins (a compact ``doctor`` report)."""
    from edge_sdk import doctor, hostinfo
    from edge_sdk._version import __version__

    runtimes = doctor._runtimes()
    return {
        "name": name,
        "profiles": profiles,
        "profiles_detected": detected,
        "convert": CONVERT_TAG in profiles,
        "edge_sdk": __version__,
        "host": hostinfo.summary(),
        "accelerators": hostinfo.accelerator_hints(),
        "runtimes": {k: v.get("version") for k, v in runtimes.items() if isinstance(v, dict) and "version" in v},
    }


def _dask_require():
    from edge_sdk._deps import require

    return require("distributed", "the device fleet", extra="fleet")


def serve(addr: Address, tls_dir: str | None = None, *, dashboard_port: int = 8787, ready=None) -> None:
    """Run a fleet scheduler until interrupted.

    Args:
        addr: Where to listen (already checked by :func:`~edge_sdk.fleet.security.check_transport`).
        tls_dir: Certificates folder (mutual TLS), or None for plain TCP.
        dashboard_port: Dask's dashboard port (only when ``bokeh`` is installed; 0: none). It is plain
            HTTP, so it listens on loopback unless the scheduler does.
        ready: Called with the listening address once the scheduler is up.

    Raises:
        FleetError: the port is taken or the address cannot be bound.
    """
    _dask_require()
    from edge_sdk._deps import available

    sec = security(tls_dir, "scheduler")
    with_dashboard = bool(dashboard_port) and available("bokeh")

    async def main() -> None:
        from distributed import Scheduler

        kwargs: dict[str, Any] = dict(host=addr.host, port=addr.port, protocol=addr.scheme, security=sec,
                                      dashboard=with_dashboard)
        if with_dashboard:
            # the dashboard is plain HTTP: on loopback unless the scheduler itself is (ssh -L to view it)
            dash_host = addr.host if addr.loopback else "127.0.0.1"
            kwargs["dashboard_address"] = f"{Address('tcp', dash_host, dashboard_port).url[6:]}"
        try:
            sched = await Scheduler(**kwargs)
        except OSError as exc:
            raise FleetError(f"cannot listen on {addr.url}: {exc.strerror or exc}.",
                             "Pick another --port, or stop what holds it.") from None
        if ready:
            ready(sched.address, with_dashboard)
        await sched.finished()

    _run(main)


def join(addr: Address, tls_dir: str | None = None, *, name: str | None = None, profiles: list[str] | None = None,
         timeout_s: float = 30.0, ready=None) -> None:
    """Run this host as a fleet device until interrupted or the scheduler goes away.

    Args:
        addr: The scheduler (already checked by :func:`~edge_sdk.fleet.security.check_transport`).
        tls_dir: Certificates folder (mutual TLS), or None for plain TCP.
        name: The device's name in reports (default: the host name); unique in the fleet.
        profiles: Device tags replacing detection (``--profiles``); ``convert`` may be one of them.
        timeout_s: Give up when the scheduler cannot be reached for this long.
        ready: Called with (device name, tags) once joined.

    Raises:
        FleetError: the scheduler is unreachable, or the name is taken.
        ProfileError: a ``--profiles`` name is not a known profile.
    """
    _dask_require()
    name = name or socket.gethostname()
    detected = profiles is None
    if profiles is None:
        tags = native_profiles() + ([CONVERT_TAG] if can_convert() else [])
    else:
        from edge_sdk.profiles import resolve_profile

        tags = [CONVERT_TAG if p == CONVERT_TAG else resolve_profile(p).name for p in profiles]
    tags = list(dict.fromkeys(tags))
    facts = device_facts(name, tags, detected)
    from .tasks import sweep_work_folders

    sweep_work_folders()  # what a device killed mid-task here left behind
    sec = security(tls_dir, "worker")
    resources = {BENCH_SLOT: 1, **{t: 1 for t in tags}}

    async def main() -> None:
        from distributed import Worker

        kwargs: dict[str, Any] = dict(name=name, nthreads=1, resources=resources, security=sec,
                                      death_timeout=timeout_s, dashboard=False, memory_limit=0)
        if addr.loopback:
            kwargs["host"] = "127.0.0.1" if ":" not in addr.host else "::1"
        try:
            worker = await Worker(addr.url, **kwargs)
        except (OSError, asyncio.TimeoutError, TimeoutError) as exc:
            raise FleetError(f"cannot join the fleet at {addr.url}: {str(exc).rstrip('.') or type(exc).__name__}.",
                             "Is `edge-sdk fleet serve` running there, and do both sides use the same TLS "
                             "certificates (--tls)?") from None
        except (ValueError, RuntimeError) as exc:  # Dask wraps the scheduler's refusal ("name taken, NAME")
            cause = exc.__cause__ or exc
            if "name taken" in str(cause):
                raise FleetError(f"cannot join the fleet at {addr.url}: a device named '{name}' is already in it.",
                                 "Every device needs its own --name.") from None
            raise FleetError(f"cannot join the fleet at {addr.url}: {type(cause).__name__}: "
                             f"{str(cause).rstrip('.')}.",
                             "Is `edge-sdk fleet serve` running there, and do both sides use the same TLS "
                             "certificates (--tls)?") from None
        await worker.scheduler.set_metadata(keys=[META_KEY, name], value=facts)
        if ready:
            ready(name, tags)
        await worker.finished()

    _run(main)


def _run(main) -> None:
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)


def parse_profiles(text: str | None) -> list[str] | None:
    """``intel-cpu,arm-cpu`` -> a list (None when not given).

    Raises:
        InputValidationError: an empty list.
    """
    if text is None:
        return None
    items = [p.strip() for p in text.split(",") if p.strip()]
    if not items:
        raise InputValidationError("--profiles is empty.", "e.g. --profiles intel-cpu,convert")
    return items
