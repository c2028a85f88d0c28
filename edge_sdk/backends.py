"""Backend descriptors: what each runtime backend is, declared once.

A :class:`BackendDescriptor` says everything the rest of the SDK needs to know about a runtime
backend without importing it: its name, the artifact formats its runner reads, its accelerator
names (which of them are just the CPU, and the default one), the Python modules and
distributions that make it up (``doctor``, ``bench``'s environment, the crash guard's cache key),
the pip extra that installs it, its runner class and its availability probe (both as lazy
``"module:attr"`` strings). Profile validation, ``probe_step``, ``doctor``, the runner registry
and the CLI's ``--backend`` choices all read this one registry.

A new backend is one module: a :class:`~edge_sdk.runtimes.base.Runner` subclass and a
descriptor passed to :func:`register_backend`. Modules named in the ``EDGE_SDK_PLUGINS``
environment variable (comma-separated import names) are imported the first time the registry is
read, so a plugin backend is also known in child processes (the crash guard's trial load) when
the module is importable there. Importing this module imports nothing heavy.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from .errors import InputValidationError
from .registry import Registry, resolve

if TYPE_CHECKING:  # pragma: no cover
    from .runtimes.probe import StepStatus


@dataclass(frozen=True)
class BackendDescriptor:
    """One runtime backend, as data.

    Attributes:
        name: The name profiles, manifests and ``--backend`` use.
        runner: The :class:`~edge_sdk.runtimes.base.Runner` subclass, or ``"module:Class"``.
        formats: Artifact formats the runner reads.
        default_accelerator: What an explicit ``backend=`` without ``device=`` runs on.
        cpu_accelerators: Accelerator names that are "just the CPU" (a profile whose chosen
            step uses one is not an accelerator profile).
        modules: ``(import name, distribution)`` pairs that make up the runtime, in the order
            the runner tries them; ``doctor`` reports each, the first installed distribution
            is the backend's version.
        extra: How to install it (``pip install "edge-sdk[<extra>]"``), or a sentence when it
            does not come from PyPI.
        probe: ``(accelerator) -> StepStatus`` or ``"module:function"``: can this host run the
            accelerator, why (not), and the fix. Never loads a library named by a profile.
        details: Optional ``() -> dict`` or ``"module:function"`` with what ``doctor`` shows
            beyond versions (execution providers, devices ...).
        op_profiler: Optional ``(runner, runs) -> OpProfile | None`` or ``"module:function"``: the
            runtime's own per-op profile for ``bench --ops`` (:mod:`edge_sdk.bench.ops`).
        binder: Optional ``(runner, feed) -> callable`` or ``"module:function"``: one inference on
            inputs bound once, for ``bench --mode backend`` (:mod:`edge_sdk.bench.backend_mode`).
    """

    name: str
    runner: Any
    formats: tuple[str, ...]
    default_accelerator: str
    cpu_accelerators: tuple[str, ...] = ()
    modules: tuple[tuple[str, str], ...] = ()
    extra: str = ""
    probe: Any = None
    details: Any = None
    op_profiler: Any = None
    binder: Any = None

    def runner_class(self) -> type:
        """The runner class (imported on first use)."""
        return resolve(self.runner)

    def hook(self, name: str) -> Callable | None:
        """The optional hook ``name`` (``probe``, ``details``, ``op_profiler``, ``binder``), imported, or None."""
        target = getattr(self, name)
        return resolve(target) if target is not None else None

    def probe_step(self, accelerator: str) -> "StepStatus":
        """Whether ``accelerator`` of this backend can run here (see :func:`edge_sdk.runtimes.probe.probe_step`)."""
        from .runtimes.probe import StepStatus

        probe = self.hook("probe")
        if probe is None:
            return StepStatus(False, f"backend '{self.name}' declares no probe", "add probe= to its descriptor")
        try:
            return probe(accelerator)
        except Exception as exc:  # noqa: BLE001 - a broken probe means "cannot run here", not a crashed doctor/load
            return StepStatus(False, f"the probe of backend '{self.name}' failed: {type(exc).__name__}: {exc}",
                              "fix or reinstall that backend's runtime")

    def doctor_details(self) -> dict[str, Any]:
        """What ``doctor`` reports for this backend beyond module versions."""
        details = self.hook("details")
        return dict(details()) if details is not None else {}

    def distributions(self) -> tuple[str, ...]:
        """The distributions whose installed version identifies this runtime, in order."""
        return tuple(dict.fromkeys(dist for _, dist in self.modules))

    def installed(self) -> tuple[str, str] | None:
        """``(distribution, version)`` of the first of its distributions that is installed, or None."""
        from ._deps import version_of

        return next(((d, v) for d in self.distributions() if (v := version_of(d))), None)

    def install_hint(self) -> str:
        """A sentence saying how to install this backend."""
        if not self.extra:
            return f"install the runtime of backend '{self.name}'"
        return self.extra if " " in self.extra else f'pip install "edge-sdk[{self.extra}]"'


_REGISTRY: Registry[BackendDescriptor] = Registry("backend", InputValidationError)
_plugins_loaded: set[str] = set()


def register_backend(descriptor: BackendDescriptor, *, replace: bool = False) -> BackendDescriptor:
    """Make a backend known to profiles, ``load``, ``doctor``, ``bench`` and the CLI.

    Raises:
        InputValidationError: the name is taken (pass ``replace=True`` to override on purpose)
            or the descriptor is incomplete.
    """
    if not descriptor.name or not descriptor.formats or not descriptor.default_accelerator:
        raise InputValidationError(f"Backend descriptor {descriptor.name!r} needs a name, formats and a default accelerator.")
    if descriptor.name in _REGISTRY and not replace and _REGISTRY.get(descriptor.name) != descriptor:
        raise InputValidationError(f"Backend '{descriptor.name}' is already registered.",
                                   "Pick another name, or pass replace=True.")
    return _REGISTRY.register(descriptor.name, descriptor)


def unregister_backend(name: str) -> None:
    """Forget a backend (tests and plugins that unload); unknown names are ignored."""
    _REGISTRY.unregister(name)


def _load_plugins() -> None:
    for mod in filter(None, (m.strip() for m in os.environ.get("EDGE_SDK_PLUGINS", "").split(","))):
        if mod in _plugins_loaded:
            continue
        try:
            importlib.import_module(mod)
        except Exception as exc:  # noqa: BLE001 - a plugin's own bug is the user's to fix; said on every read
            raise InputValidationError(f"EDGE_SDK_PLUGINS names module '{mod}', which cannot be imported "
                                       f"({type(exc).__name__}: {exc}).",
                                       "Put it on PYTHONPATH and fix its error, or remove it from EDGE_SDK_PLUGINS.") from None
        _plugins_loaded.add(mod)


def backends() -> dict[str, BackendDescriptor]:
    """Every registered backend by name (plugins from ``EDGE_SDK_PLUGINS`` included)."""
    _load_plugins()
    return {name: _REGISTRY.get(name) for name in _REGISTRY.names()}


def backend_names() -> list[str]:
    """Registered backend names, sorted."""
    return sorted(backends())


def get_backend(name: str) -> BackendDescriptor:
    """The descriptor of backend ``name``.

    Raises:
        InputValidationError: unknown backend (the message lists the registered ones).
    """
    _load_plugins()
    return _REGISTRY.get(name)


def known_formats() -> list[str]:
    """Every artifact format some registered backend reads, sorted."""
    return sorted({f for d in backends().values() for f in d.formats})


def cpu_accelerators() -> frozenset[str]:
    """Accelerator names that are "just the CPU", over every backend."""
    return frozenset(a for d in backends().values() for a in d.cpu_accelerators)


def backends_for_format(fmt: str) -> list[BackendDescriptor]:
    """The backends whose runner reads ``fmt``, by name."""
    return [d for d in backends().values() if fmt in d.formats]


def _builtin(*descriptors: BackendDescriptor) -> None:
    for d in descriptors:
        register_backend(d)


_builtin(
    BackendDescriptor(
        "litert", "edge_sdk.runtimes.litert:LiteRTRunner", ("tflite-int8",), "xnnpack", ("xnnpack", "cpu"),
        (("ai_edge_litert", "ai-edge-litert"), ("tflite_runtime", "tflite-runtime"), ("tensorflow", "tensorflow")),
        "litert",
        "edge_sdk.runtimes.probe:probe_litert", "edge_sdk.runtimes.probe:litert_details",
        "edge_sdk.bench.ops:litert_ops", "edge_sdk.bench.backend_mode:bind_litert"),
    BackendDescriptor(
        "onnxruntime", "edge_sdk.runtimes.onnxruntime:OnnxRuntimeRunner", ("onnx-qdq",), "CPUExecutionProvider",
        ("CPUExecutionProvider",),
        (("onnxruntime", "onnxruntime"), ("onnxruntime", "onnxruntime-gpu"), ("onnxruntime", "onnxruntime-openvino")),
        "onnxruntime", "edge_sdk.runtimes.probe:probe_onnxruntime", "edge_sdk.runtimes.probe:onnxruntime_details",
        "edge_sdk.bench.ops:onnxruntime_ops", "edge_sdk.bench.backend_mode:bind_onnxruntime"),
    BackendDescriptor(
        "openvino", "edge_sdk.runtimes.openvino:OpenVINORunner", ("openvino-ir", "onnx-qdq"), "CPU", ("CPU",),
        (("openvino", "openvino"),), "openvino",
        "edge_sdk.runtimes.probe:probe_openvino", "edge_sdk.runtimes.probe:openvino_details",
        "edge_sdk.bench.ops:openvino_ops", "edge_sdk.bench.backend_mode:bind_openvino"),
    BackendDescriptor(
        "tensorrt", "edge_sdk.runtimes.tensorrt:TensorRTRunner", ("tensorrt-engine", "onnx-qdq"), "gpu", (),
        (("tensorrt", "tensorrt"),), "JetPack ships tensorrt (not on PyPI for Jetson); elsewhere pip install tensorrt",
        "edge_sdk.runtimes.probe:probe_tensorrt"),
)

__all__ = ["BackendDescriptor", "backend_names", "backends", "backends_for_format", "cpu_accelerators",
           "get_backend", "known_formats", "register_backend", "unregister_backend"]
