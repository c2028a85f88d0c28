"""Which artifacts to benchmark: artifact folders as given, or profiles of a ``convert`` output.

An ARTIFACT argument is either an artifact folder (it holds ``manifest.json``) or a
``convert`` output folder holding one artifact folder per profile. For the latter,
``--profile`` picks one; otherwise every profile this host runs *natively* is benchmarked
and the others are reported as skipped with the reason, because numbers from a fallback
(ONNX Runtime on the CPU standing in for TensorRT) would be mistaken for the device's.
"Natively" is decided by :func:`edge_sdk.runtimes.probe.native_status`, exactly as ``load`` and
``edge-sdk doctor`` decide it, and each target's profile (budget, power sensors) is the one embedded
in its manifest (:func:`edge_sdk.runtimes.select.artifact_profile`), the one ``load`` runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edge_sdk.errors import DelegateUnavailableError, EdgeSDKError, InputValidationError, ModelLoadError
from edge_sdk.manifest import MANIFEST_NAME, artifact_path, find_profile_folders, is_artifact_folder
from edge_sdk.profiles import Profile, resolve_profile
from edge_sdk.runtimes.probe import native_status
from edge_sdk.runtimes.select import artifact_profile


@dataclass(frozen=True)
class Target:
    """One artifact folder to benchmark."""

    name: str
    path: Path
    profile: Profile | None
    #: ``--profile`` as given, passed on to ``load`` (only for a single artifact folder).
    load_profile: str | None = None


@dataclass(frozen=True)
class Skipped:
    """A profile folder not benchmarked: not this device (``refused`` False), or failed its checks."""

    name: str
    path: str
    reason: str
    refused: bool = False

    def to_dict(self) -> dict:
        return {"name": self.name, "path": self.path, "reason": self.reason, "refused": self.refused}


def expand(paths: list[str | Path], profile: str | None = None, check=None) -> tuple[list[Target], list[Skipped]]:
    """Turn ARTIFACT arguments into targets and skips.

    Every profile folder of a ``convert`` output folder passes the trust check (``check``, the
    one ``load`` runs) before its chain is probed; one that fails is skipped as *refused*, with
    the reason (a corrupt or tampered folder is named as such, not as "not this device").

    Args:
        paths: Artifact folders or ``convert`` output folders.
        profile: Pick this profile from ``convert`` output folders (name, alias or .toml).
        check: ``folder -> CheckedArtifact`` (default: :func:`edge_sdk.trust.check_artifact`).

    Returns:
        (targets to run, skipped profiles with reasons; refused ones have ``refused`` set).

    Raises:
        ModelLoadError: a path is neither kind of folder, or an artifact folder given directly fails its check.
        InputValidationError: ``profile`` is not in a ``convert`` output folder.
        DelegateUnavailableError: nothing at all can run natively here.
    """
    if not paths:
        raise InputValidationError("No artifact given.", "Pass an artifact folder or a `convert` output folder.")
    wanted = resolve_profile(profile) if profile else None
    targets: list[Target] = []
    skipped: list[Skipped] = []
    for raw in paths:
        path = artifact_path(raw)
        if is_artifact_folder(path):
            targets.append(Target(path.name, path, artifact_profile(path, check), profile))
            continue
        folders = find_profile_folders(path)
        if not folders:
            raise ModelLoadError(
                f"{path} is not an artifact folder (no {MANIFEST_NAME}) nor a `convert` output folder.",
                "Pass the folder written by `edge-sdk convert`, or one profile subfolder of it.")
        if wanted is not None:
            hit = folders.get(wanted.name)
            if hit is None:
                raise InputValidationError(
                    f"{path} holds no artifact for profile '{wanted.name}'.",
                    f"Profiles in it: {', '.join(sorted(folders))}.")
            targets.append(Target(f"{path.name}/{wanted.name}", hit, artifact_profile(hit, check)))
            continue
        for name, folder in folders.items():
            try:
                prof = artifact_profile(folder, check)
            except EdgeSDKError as exc:
                skipped.append(Skipped(f"{path.name}/{name}", str(folder), f"refused: {exc.message}", refused=True))
                continue
            why = native_status(prof).why_not()
            if why is None:
                targets.append(Target(f"{path.name}/{name}", folder, prof))
            else:
                skipped.append(Skipped(f"{path.name}/{name}", str(folder), why))
    if not targets:
        raise DelegateUnavailableError(
            "No profile in " + ", ".join(str(p) for p in paths) + " runs natively on this host: "
            + "; ".join(f"{s.name}: {s.reason}" for s in skipped),
            "Pass --profile NAME to benchmark one anyway (the report then says which backend really ran).")
    return targets, skipped
