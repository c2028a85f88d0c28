"""``edge-sdk verify``: the checks ``load`` runs, without loading anything into this process.

Each artifact folder passes :func:`edge_sdk.trust.check_artifact` (the very function ``load``
calls), then - unless ``load_check=False`` - the runtime step ``load`` would pick here is
trial-loaded by the crash guard in a child process: load, I/O contract against the manifest,
one inference on zeros. So ``verify`` refuses what ``load`` refuses, and a file that would crash
the runtime is reported, not run here. Where no runtime of the artifact's chain is installed,
the trial is skipped and the report says so (the static checks still ran).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edge_sdk.errors import DelegateUnavailableError, EdgeSDKError, MissingDependencyError, ModelLoadError
from edge_sdk.manifest import artifact_path, find_profile_folders, is_artifact_folder

from .base import RunnerConfig
from .sandbox import CrashGuard
from .select import open_runner, step_name


def _trial(checked) -> str:
    """Trial-load the step ``load`` would pick, in a child process; returns what happened."""
    from edge_sdk import typed
    from edge_sdk.manifest import format_io

    manifest, folder = checked.manifest, checked.folder
    guard = CrashGuard(cache_dir=None)  # verify always runs the trial: it is the point of asking

    def make_config(step) -> RunnerConfig:
        from .select import BACKENDS

        art = BACKENDS.get(step.backend).model_artifact(manifest, step)
        files = {a.role: folder / a.path for a in manifest.artifacts if a.role != "model"}
        return RunnerConfig(model_path=folder / art.path, accelerator=step.accelerator, num_threads=1, files=files,
                            backend_options=dict(manifest.backend_options), model_sha256=art.sha256,
                            file_sha256={a.path: a.sha256 for a in manifest.artifacts})

    def hook(step, config):
        ins, outs = format_io(manifest, step.format)
        guard.check(step.backend, config, {"inputs": typed.to_dict(ins), "outputs": typed.to_dict(outs)})

    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, sel = open_runner(folder, manifest, checked.profile, backend=None, device=None, strict=False,
                                 make_config=make_config, guard=hook, activate=False)
    except (DelegateUnavailableError, MissingDependencyError) as exc:
        return f"not trial-loaded: no runtime of its chain can run here ({exc.message})"
    return f"trial-loaded in a child process on {step_name(sel.step)}: loads, matches the manifest's I/O, runs"


def verify_one(path: str | Path, *, policy, load_check: bool = True, allow_unpublished: bool = False) -> dict[str, Any]:
    """Verify one artifact folder.

    Returns:
        The report (``artifact``, ``valid``, ``profile``, ``files``, ``signed_by``, ``accuracy_gate``, ``load``).

    Raises:
        EdgeSDKError: what ``load`` would raise for it (``ManifestError``, ``ModelLoadError`` ...).
    """
    from edge_sdk.trust import check_artifact

    checked = check_artifact(path, verify=True, policy=policy, allow_unpublished=allow_unpublished)
    m = checked.manifest
    return {"artifact": str(path), "valid": True, "profile": m.profile.name, "files": [a.path for a in m.artifacts],
            "signed_by": checked.signed_by, "signature_present": checked.signature_present,
            "accuracy_gate": (m.accuracy or {}).get("gate", "unknown"),
            "load": _trial(checked) if load_check else "not trial-loaded (--no-load)"}


def verify_paths(path: str | Path, *, policy, load_check: bool = True,
                 allow_unpublished: bool = False) -> tuple[list[dict[str, Any]], EdgeSDKError | None]:
    """Verify an artifact folder, or every profile folder of a ``convert`` output folder.

    Returns:
        (one report per folder - failed ones with ``valid: false`` and ``error`` - , the first error).

    Raises:
        ModelLoadError: ``path`` is neither kind of folder.
    """
    path = artifact_path(path)
    if is_artifact_folder(path) or path.name == "manifest.json" or not path.is_dir():
        return [verify_one(path, policy=policy, load_check=load_check, allow_unpublished=allow_unpublished)], None
    folders = find_profile_folders(path)
    if not folders:
        raise ModelLoadError(f"{path} is neither an artifact folder (no manifest.json) nor a convert output folder.",
                             "Pass the folder `edge-sdk convert` wrote, or one of its profile subfolders.")
    reports, first = [], None
    for _name, folder in folders.items():
        try:
            reports.append(verify_one(folder, policy=policy, load_check=load_check, allow_unpublished=allow_unpublished))
        except EdgeSDKError as exc:
            first = first or exc
            reports.append({"artifact": str(folder), "valid": False, "error": exc.message, "hint": exc.hint})
    return reports, first
