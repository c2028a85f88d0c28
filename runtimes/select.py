"""Which profile and which runtime step to run: walking the profile's runtime chain.

The manifest embeds the profile it was converted for; its ``runtime.chain`` lists steps
(backend, accelerator, artifact format) best first. :func:`open_runner` walks it, probing each
step (:func:`edge_sdk.runtimes.probe.probe_step`) and activating the first that really works.

* ``strict=True`` refuses to run a step that is not ``native`` (raises
  :class:`~edge_sdk.errors.DelegateUnavailableError` with what is missing and how to fix it).
* ``strict=False`` falls back along the chain and warns once (:class:`FallbackWarning`).
* An explicit ``backend=``/``device=`` is a choice, not a fallback: only matching steps are
  tried, nothing warns, and failure raises.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from edge_sdk.errors import DelegateUnavailableError, EdgeSDKError, InputValidationError, ModelLoadError
from edge_sdk.manifest import MANIFEST_NAME, Manifest, artifact_path, find_profile_folders, is_artifact_folder
from edge_sdk.profiles import Profile, RuntimeStep, resolve_profile
from edge_sdk.backends import backend_names, backends, cpu_accelerators, get_backend

from .base import FallbackWarning, Runner, RunnerConfig
from .probe import native_status, probe_step

if TYPE_CHECKING:  # pragma: no cover
    from edge_sdk.trust import CheckedArtifact

class RunnerRegistry:
    """backend name -> runner class, read from the backend descriptors (:mod:`edge_sdk.backends`).

    The runner module is imported only when that backend is used; a backend registered with
    :func:`edge_sdk.backends.register_backend` (a plugin) is here without an edit.
    """

    kind = "backend"

    def names(self) -> list[str]:
        """Registered backend names, sorted."""
        return backend_names()

    def __contains__(self, name: str) -> bool:
        return name in backends()

    def get(self, name: str) -> type[Runner]:
        """The runner class of backend ``name``.

        Raises:
            InputValidationError: unknown backend (the message lists the registered ones).
        """
        return get_backend(name).runner_class()


#: backend name -> runner class.
BACKENDS = RunnerRegistry()


@dataclass
class Selection:
    """How the facade chose what runs; tells the truth about fallbacks.

    Attributes:
        profile: The profile the artifact was converted for.
        step: The runtime step that runs.
        explicit: The caller chose backend/device.
        skipped: ``"backend/accelerator: reason (fix)"`` for each step passed over.
        notes: Other facts worth telling (which profile of a multi-profile folder was picked).
    """

    profile: str
    step: RuntimeStep
    explicit: bool = False
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def fallback(self) -> bool:
        """True when a preferred step was skipped (never for an explicit choice)."""
        return bool(self.skipped) and not self.explicit


def step_name(step: RuntimeStep) -> str:
    return f"{step.backend}/{step.accelerator}"


def manifest_profile(manifest: Manifest, where: str, verify: bool = True) -> Profile:
    """The profile embedded in the manifest, checked against its sha256 (see :func:`edge_sdk.trust.embedded_profile`)."""
    from edge_sdk.trust import embedded_profile

    return embedded_profile(manifest, where, verify)


def artifact_profile(folder: Path, check: Callable[[Path], CheckedArtifact] | None = None) -> Profile:
    """The profile an artifact folder runs with: the one embedded in its manifest, as ``load`` runs it.

    ``bench`` (budgets, power sensors), ``fleet`` and ``load`` read this one profile, never the
    installed built-in of the same name (which may differ from what the artifact was made for).

    Args:
        folder: The artifact folder.
        check: The trust check (``folder -> CheckedArtifact``); default: the checks ``load`` runs
            with the user config file's policy.

    Raises:
        EdgeSDKError: the artifact fails its checks (corrupt, tampered, unsigned, edited profile ...).
    """
    if check is None:
        from edge_sdk.trust import check_artifact

        check = check_artifact
    return check(folder).profile


def resolve_folder(path: str | Path, profile: str | None, strict: bool,
                   check: Callable[[Path], CheckedArtifact]) -> tuple[Path, list[str], CheckedArtifact | None]:
    """The artifact folder to load: ``path`` itself, or one profile folder of a ``convert`` output.

    In a ``convert`` output folder every profile folder passes ``check`` (manifest, hashes,
    signature, delegate policy) *before* its runtime chain is probed: probing may import a
    runtime, and nothing native runs for an artifact that has not been checked. A folder that
    fails is never picked; the notes say why.

    Args:
        path: Artifact folder, or a folder of per-profile artifact folders.
        profile: Profile name/alias to pick (None: the one this device runs natively).
        strict: Refuse to pick a profile that cannot run natively here.
        check: The trust check (:func:`edge_sdk.trust.check_artifact` with the caller's policy).

    Returns:
        (artifact folder, notes saying which profile was picked and why, its check result when
        it was already checked here, else None).

    Raises:
        ModelLoadError: nothing loadable at ``path``, the named profile is not in it, or every
            profile folder in it failed its check (``ManifestError`` with the first reason).
        DelegateUnavailableError: strict and no profile runs natively here.
    """
    path = artifact_path(path)
    if not path.exists():
        raise ModelLoadError(f"Artifact folder not found: {path}", "Pass the folder that `edge-sdk convert` wrote.")
    if is_artifact_folder(path) or path.name == MANIFEST_NAME:
        return path, [], None
    folders = find_profile_folders(path)
    if not folders:
        raise ModelLoadError(f"{path} is neither an artifact folder (no {MANIFEST_NAME}) nor a convert output folder.",
                             "Pass the folder `edge-sdk convert` wrote, or one of its profile subfolders.")
    if profile is not None:
        # A custom profile is known by the name its folder's manifest gives it; built-ins also by alias.
        name = profile if profile in folders else resolve_profile(profile).name
        if name not in folders:
            raise ModelLoadError(f"{path} holds no artifact for profile '{name}'.", f"Profiles present: {', '.join(folders)}")
        return folders[name], [f"profile '{name}' chosen by the caller"], None
    ranked, refused, checked = [], [], {}
    for name, folder in folders.items():
        try:
            checked[name] = check(folder)
        except EdgeSDKError as exc:
            refused.append((name, exc))
            continue
        ns = native_status(checked[name].profile)  # the same answer doctor and bench give
        if ns.native:
            ranked.append((ns.step.accelerator in cpu_accelerators(), name, folder, step_name(ns.step)))
    notes = [f"profile folder '{name}' in {path} was refused: {exc.message}" for name, exc in refused]
    if not checked:
        first = refused[0][1]
        if not isinstance(first, ModelLoadError):
            raise first  # a policy or setup problem (a bad key file, a missing extra), not the artifact's
        raise type(first)(f"No profile folder in {path} passed its checks: "
                          + "; ".join(f"{n}: {e.message}" for n, e in refused), first.hint)
    if ranked:
        ranked.sort()
        _, name, folder, step = ranked[0]
        return folder, [f"picked profile '{name}' from {path}: it runs natively here on {step} (others: "
                        f"{', '.join(n for n in folders if n != name) or 'none'})", *notes], checked[name]
    if strict:
        raise DelegateUnavailableError(f"No profile in {path} runs natively on this device ({', '.join(folders)})"
                                       + "".join(f"; {n}" for n in notes) + ".",
                                       "Pass profile=... (or --profile) to run one with the reported fallback, "
                                       "or run `edge-sdk doctor` to see what is missing.")
    name = sorted(checked)[0]
    return folders[name], [f"no profile in {path} runs natively here; using '{name}' with fallback", *notes], checked[name]


def candidate_steps(profile: Profile, manifest: Manifest, backend: str | None,
                    device: str | None) -> tuple[list[RuntimeStep], bool]:
    """The steps to try, in order, and whether the caller chose them explicitly.

    Raises:
        InputValidationError: unknown backend, or a device/backend with no matching format.
    """
    formats = set(manifest.formats)
    chain = [s for s in profile.runtime.chain if s.format in formats]
    if backend is None and device is None:
        return chain, False
    if backend is not None:
        BACKENDS.get(backend)  # unknown backend -> error listing the known ones
    picked = [s for s in chain if (backend is None or s.backend == backend) and (device is None or s.accelerator == device)]
    if picked:
        return picked, True
    if backend is None:
        raise InputValidationError(f"device '{device}' is not in the runtime chain of profile '{profile.name}'.",
                                   f"Chain: {', '.join(step_name(s) for s in chain)}; or pass backend= as well.")
    readable = [f for f in BACKENDS.get(backend).formats if f in formats]
    if not readable:
        raise InputValidationError(f"backend '{backend}' cannot read this artifact (formats: {', '.join(sorted(formats))}).",
                                   f"Chain: {', '.join(step_name(s) for s in chain)}")
    return [RuntimeStep(backend, device or get_backend(backend).default_accelerator, readable[0], native=False)], True


def open_runner(folder: Path, manifest: Manifest, profile: Profile, *, backend: str | None, device: str | None,
                strict: bool, make_config, guard: Callable[[RuntimeStep, RunnerConfig], object] | None = None,
                activate: bool = True) -> tuple[Runner, Selection]:
    """Walk the chain and return the first runner that activates, with the selection record.

    Args:
        folder: The artifact folder.
        manifest: Its validated manifest.
        profile: The profile embedded in it.
        backend / device: An explicit choice, or None.
        strict: Refuse non-native steps.
        make_config: ``(step) -> RunnerConfig`` for the step's artifact file.
        guard: ``(step, config)`` run before the file is loaded here: the crash guard's trial in a
            child process (see ``sandbox``); it raises ``ModelLoadError`` for a file that crashes,
            ``DelegateUnavailableError`` for a step that cannot run.
        activate: Load the model in this process (False: only the guard's trial, for ``verify``;
            the returned runner is then not active).

    Raises:
        DelegateUnavailableError: strict and the native accelerator cannot be used, an explicit
            choice cannot be used, or no step of the chain works.
        ModelLoadError: the artifact file is corrupt (not a matter of falling back).
    """
    steps, explicit = candidate_steps(profile, manifest, backend, device)
    sel = Selection(profile=profile.name, step=steps[0] if steps else profile.runtime.chain[0], explicit=explicit)
    fixes: list[str] = []
    for step in steps:
        if strict and not explicit and not step.native:
            break
        status = probe_step(step.backend, step.accelerator)
        if not status.available:
            sel.skipped.append(f"{step_name(step)}: {status.reason}")
            fixes.append(status.fix)
            continue
        try:
            config = make_config(step)
        except DelegateUnavailableError as exc:  # the artifact cannot use this step (e.g. not compiled for it)
            sel.skipped.append(f"{step_name(step)}: {exc.message}")
            fixes.append(exc.hint or "")
            continue
        runner = BACKENDS.get(step.backend)(config)
        try:
            if guard is not None:
                runner.validate_container(config.model_path, config.files)  # cheap checks first
                guard(step, config)
            if activate:
                runner.activate()
        except DelegateUnavailableError as exc:
            sel.skipped.append(f"{step_name(step)}: {exc.message}")
            fixes.append(exc.hint or "")
            continue
        sel.step = step
        if sel.fallback:
            warnings.warn(f"{profile.name}: running on {step_name(step)} ({runner.delegate}) because "
                          + "; ".join(sel.skipped), FallbackWarning, stacklevel=3)
        return runner, sel
    what = "; ".join(sel.skipped) or "no step of its runtime chain matches this artifact's formats"
    fix = "; ".join(dict.fromkeys(f for f in fixes if f)) or "run `edge-sdk doctor` to see what this host can run"
    if strict and not explicit:
        raise DelegateUnavailableError(f"strict: profile '{profile.name}' needs its accelerator, which cannot be used here: {what}.",
                                       fix + ". Or load with strict=False to run on the fallback and have it reported.")
    raise DelegateUnavailableError(f"Nothing can run profile '{profile.name}' here: {what}.", fix)
