"""``edge-sdk convert ... --fleet`` (``edge_sdk.fleet.convert``): farm (model x profile) conversions to devices tagged ``convert``.

The model and the data files are sent once per task (bytes + sha256, re-hashed on the device);
each device runs ``edge-sdk convert MODEL --profile P`` in a fresh process with the same options,
and the published artifact folder comes back (bytes + sha256 again) and is published here with
the same atomic staging as a local run (:func:`edge_sdk.fsutil.staging_dir`), so ``out/<profile>``
is either the old folder or the complete new one. The summary is the local ``ConvertSummary``
(each profile also says which ``device`` made it).
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any, Iterable

from edge_sdk.errors import ConversionError, InputValidationError

from .client import _Job, connect, drive, list_devices, place
from .node import BENCH_SLOT, CONVERT_TAG, FleetError, _dask_require
from .security import check_transport, parse_address


def convert(model: str | Path, profiles: str | Iterable[str], out: str | Path, address: str, *, tls: str | None = None,
            insecure: bool = False, calib: str | None = None, validation: str | None = None,
            calib_count: int | None = None, input_shapes: Iterable[str] = (), preprocess: str | None = None,
            outputs: Iterable[str] = (), recover: str = "mixed", recover_budget: float | None = None,
            float_nodes: Iterable[str] = (), calib_method: str | None = None, allow_accuracy_drop: bool = False,
            force: bool = False, timeout_s: float = 10.0, task_timeout_s: float | None = 7200.0, progress=None):
    """Convert ``model`` for each profile on the fleet's ``convert`` devices; publish into ``out/<profile>/``.

    Args:
        model: Source model file or SavedModel folder (sent to the devices).
        profiles: Built-in profile names or aliases (a custom .toml is not sent: use its name on a device).
        out: Local output folder.
        address, tls, insecure: The fleet (see :func:`edge_sdk.fleet.bench`).
        calib, validation: Data paths (file or folder, sent) or ``"random"``.
        preprocess: A spec string, or a path to a ``.json`` spec (sent).
        calib_count, input_shapes, outputs, recover, recover_budget, float_nodes, calib_method,
        allow_accuracy_drop, force: As for :func:`edge_sdk.convert`.
        timeout_s: Connecting to the scheduler.
        task_timeout_s: One conversion on one device.
        progress: Called with one line per event.

    Returns:
        ``(ConvertSummary, failed rows)``: the local summary (each profile's ``warnings`` name the
        device) and the fleet's failed rows (a device lost, retried on another ``convert`` device).

    Raises:
        InputValidationError: a profile folder exists without ``force``, a bad option.
        FleetError: the scheduler is unreachable, or no device is tagged ``convert``.
    """
    from edge_sdk.converters.summary import ConvertSummary, FormatOutcome, ProfileSummary
    from edge_sdk.fsutil import staging_dir
    from edge_sdk.profiles import resolve_profile

    from .tasks import convert_task, pack_path, unpack_folder

    _dask_require()
    addr = check_transport(parse_address(address, tls=bool(tls)), tls, insecure, "client")
    names = [resolve_profile(p).name for p in ([profiles] if isinstance(profiles, str) else profiles)]
    if not names:
        raise InputValidationError("No --profile given.", "e.g. --profile intel-cpu")
    out = Path(out)
    if not force:
        exist = [n for n in names if (out / n).exists()]
        if exist:
            raise InputValidationError(f"{out / exist[0]} already exists.", "Pass --force to replace it.")
    inputs: dict[str, Any] = {"model": pack_path(model)}
    args: list[str] = []
    for key, flag, value in (("calib", "--calib", calib), ("val", "--val", validation),
                             ("preprocess", "--preprocess", preprocess)):
        if value is None:
            continue
        if Path(value).exists():
            inputs[key] = pack_path(value)
            args += [flag, f"@{key}"]
        else:
            args += [flag, value]
    if calib_count is not None:
        args += ["--calib-count", str(calib_count)]
    for s in input_shapes:
        args += ["--input-shape", s]
    for o in outputs:
        args += ["--output", o]
    args += ["--recover", recover]
    if recover_budget is not None:
        args += ["--recover-budget", repr(recover_budget)]
    for f in float_nodes:
        args += ["--float-nodes", f]
    if calib_method:
        args += ["--calib-method", calib_method]
    if allow_accuracy_drop:
        args.append("--allow-accuracy-drop")
    say = progress or (lambda line: None)
    client = connect(addr, tls, insecure, timeout_s)
    try:
        fleet = list_devices(client)
        cands = sorted((d for d in fleet if CONVERT_TAG in d["profiles"]), key=lambda d: d["tasks"])
        if not cands:
            raise FleetError("no device in the fleet is tagged 'convert'.",
                             "Join a device with the conversion stack (pip install \"edge-sdk[all]\"), or "
                             "--profiles convert.")
        jobs = []
        for i, name in enumerate(names):  # spread the profiles over the devices, each with the others as fallbacks
            rot = cands[i % len(cands):] + cands[:i % len(cands)]
            jobs.append(_Job(name, Path(model), CONVERT_TAG, rot, retry=True))
        profiles_out: dict[str, ProfileSummary] = {}
        head: dict[str, Any] = {}

        def submit(job: _Job) -> None:
            dev = job.candidates[0]
            job.future = client.submit(convert_task, place(client, inputs, dev), job.name, args, task_timeout_s,
                                       key=f"edge-sdk-convert-{uuid.uuid4().hex}", workers=[dev["address"]],
                                       allow_other_workers=False, resources={BENCH_SLOT: 1, CONVERT_TAG: 1},
                                       pure=False, retries=0)

        def take(job: _Job, dev: dict, res: dict) -> None:
            summary = res.get("summary") or {}
            head.update({k: summary[k] for k in ("source", "source_format", "kinds") if k in summary})
            rows = [p for p in summary.get("profiles", []) if p.get("profile") == job.name]
            row = dict(rows[0]) if rows else {"profile": job.name, "folder": "", "published": False, "formats": [],
                                               "files": [], "gate": "not_run", "accuracy": {},
                                               "error": f"edge-sdk convert exited {res.get('rc')} on {dev['name']}"}
            final = out / job.name
            if res.get("folder"):
                with staging_dir(final, force=force) as tmp:
                    got = unpack_folder(res["folder"], tmp / "recv")
                    for item in got.iterdir():
                        item.rename(tmp / item.name)
                    shutil.rmtree(tmp / "recv")
                row["folder"] = str(final)
            else:
                row["folder"] = ""
            if row.get("rejected"):
                row["rejected"] = ""
                row.setdefault("warnings", []).append(f"the rejected candidate stayed on device '{dev['name']}' "
                                                      "(not sent back)")
            row.setdefault("warnings", []).append(f"converted on fleet device '{dev['name']}'")
            row["outcomes"] = [FormatOutcome(**o) for o in row.get("outcomes", [])]
            fields = ProfileSummary.__dataclass_fields__
            profiles_out[job.name] = ProfileSummary(**{k: v for k, v in row.items() if k in fields})

        failed = drive(client, jobs, submit, take, say)
    finally:
        client.close()
    for f in failed:
        if not f["retried"] and f["name"].rsplit("@", 1)[0] not in profiles_out:
            n = f["name"].rsplit("@", 1)[0]
            profiles_out[n] = ProfileSummary(n, "", False, [], [], "not_run", {}, error=f["reason"])
    summary = ConvertSummary(head.get("source", str(model)), head.get("source_format", ""), str(out),
                             [profiles_out[n] for n in names if n in profiles_out], head.get("kinds", []))
    return summary, failed


def raise_if_failed(summary, failed) -> None:
    """The local run's exit rule: ConversionError (exit 6) when a profile or format was not published."""
    bad = [p for p in summary.profiles if not p.published or any(o.status != "published" for o in p.outcomes)]
    if bad:
        raise ConversionError(f"{len(bad)} profile(s) not fully converted on the fleet: "
                              + "; ".join(f"{p.profile}: {p.error or p.gate}" for p in bad),
                              "See the table above; the published profiles are in the output folder.")
