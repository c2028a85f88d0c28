"""One exception root for everything edge-sdk raises on purpose.

Every error carries a one-line ``message`` (what was wrong) and an optional ``hint``
(what to do). The CLI prints both and maps the class to an exit code in one place
(:data:`EXIT_CODES`); library users can catch :class:`EdgeSDKError` or a subclass.
"""

from __future__ import annotations


class EdgeSDKError(Exception):
    """Root of all edge-sdk errors.

    Args:
        message: What went wrong, in one line, naming the thing (file, key, input).
        hint: What the user can do about it.
    """

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n  hint: {self.hint}"
        return self.message


class ProfileError(EdgeSDKError):
    """A device profile is unknown, or its file is malformed."""

    exit_code = 2


class InputValidationError(EdgeSDKError):
    """Input to a model or a command does not match the contract (shape, dtype, names, values)."""

    exit_code = 3


class ModelLoadError(EdgeSDKError):
    """A model or artifact cannot be loaded: missing, corrupt, tampered, or of the wrong kind."""

    exit_code = 4


class RuntimeCrashError(ModelLoadError):
    """The runtime crashed or hung on the model in the crash guard's trial child (this process was
    not affected). On a file edge-sdk has just made (the accuracy gate's load), that is edge-sdk's
    bug, not damage: the converter says so (exit 70)."""


class ManifestError(ModelLoadError):
    """``manifest.json`` is missing, malformed, or does not vouch for the files beside it."""


class DelegateUnavailableError(EdgeSDKError):
    """The accelerator a profile asks for cannot be used here (strict mode, or nothing left)."""

    exit_code = 5


class ConversionError(EdgeSDKError):
    """A conversion step failed; nothing was written."""

    exit_code = 6


class ConversionBugError(ConversionError):
    """edge-sdk failed in its own code while converting some format or profile (the others were
    still converted and published); its row in the summary says where. Exit 70, as any internal error."""

    exit_code = 70


def describe_bug(exc: BaseException, doing: str) -> str:
    """One line for an unexpected exception in edge-sdk's own code: what it was doing, the error,
    and the innermost edge-sdk frame (package-relative path, line, function) to report."""
    import traceback

    where = ""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = frame.filename.replace("\\", "/")
        for pkg in ("/edge_sdk/", "/converters/", "/runtimes/", "/device_profiles/"):
            if pkg in path:
                where = f" at {pkg.strip('/')}/{path.rsplit(pkg, 1)[1]}:{frame.lineno} ({frame.name})"
                break
        if where:
            break
    text = str(exc).strip() or "(no message)"
    return f"edge-sdk bug while {doing}: {type(exc).__name__}: {text}{where}"


class CalibrationError(ConversionError):
    """Calibration data is missing, unreadable, empty, or does not fit the model's inputs."""


class AccuracyGateError(ConversionError):
    """The converted artifact disagrees with the float model beyond the profile's thresholds.

    Args:
        message: Summary line.
        hint: What to do.
        report: The per-output metrics that failed the gate.
    """

    exit_code = 7

    def __init__(self, message: str, hint: str | None = None, report: dict | None = None):
        super().__init__(message, hint)
        self.report = report or {}


class MissingDependencyError(EdgeSDKError):
    """An optional dependency is not installed; names the pip extra that provides it.

    Args:
        module: The import name that failed.
        extra: The edge-sdk extra that installs it (e.g. ``litert``).
        purpose: What it was needed for.
    """

    exit_code = 8

    def __init__(self, module: str, extra: str, purpose: str = "", *, message: str | None = None,
                 hint: str | None = None):
        what = f" (needed for {purpose})" if purpose else ""
        super().__init__(
            message or f"Python module '{module}' is not installed{what}.",
            # an extra with a space is a sentence (TensorRT comes with JetPack, not from an extra)
            hint or (extra if " " in extra else f'pip install "edge-sdk[{extra}]"'),
        )
        self.module = module
        self.extra = extra


class BenchmarkGateError(EdgeSDKError):
    """A ``--fail-if`` condition or a profile latency budget was not met."""

    exit_code = 9


class FleetError(EdgeSDKError):
    """The device fleet cannot be reached or used (scheduler down, a name taken, a device lost)."""

    exit_code = 10


#: The single place where error classes become process exit codes (most specific first).
EXIT_CODES: tuple[tuple[type[EdgeSDKError], int], ...] = tuple(
    (cls, cls.exit_code)
    for cls in (
        ConversionBugError,
        AccuracyGateError,
        CalibrationError,
        ConversionError,
        ManifestError,
        ModelLoadError,
        DelegateUnavailableError,
        InputValidationError,
        ProfileError,
        MissingDependencyError,
        BenchmarkGateError,
        FleetError,
        EdgeSDKError,
    )
)


def exit_code_for(error: BaseException) -> int:
    """Return the process exit code for ``error`` (70 for an unexpected internal error)."""
    for cls, code in EXIT_CODES:
        if isinstance(error, cls):
            return code
    return 70
