"""Conversion never touches the network.

OpenVINO's model converter and NNCF send usage telemetry to Google Analytics by default (opt-out,
through ``openvino_telemetry``; a forked child does the HTTP request). ``edge-sdk`` promises
"nothing goes out": :func:`no_telemetry` declines consent for the duration of a conversion.
onnx2tf runs in a child process with sockets blocked (see ``onnx2tf_route``).
"""

from __future__ import annotations

import contextlib
import sys


def _silence_loaded_nncf() -> None:
    # NNCF builds its telemetry object (and asks for consent) once, when it is first imported.
    # If the caller imported NNCF before us, turn that object's consent off too.
    wrapper = sys.modules.get("nncf.telemetry.wrapper")
    impl = getattr(getattr(wrapper, "telemetry", None), "_impl", None)
    if impl is not None and hasattr(impl, "consent"):
        impl.consent = False


@contextlib.contextmanager
def no_telemetry():
    """Decline OpenVINO/NNCF telemetry consent while the block runs (no-op without openvino_telemetry)."""
    try:
        from openvino_telemetry.utils.opt_in_checker import ConsentCheckResult, OptInChecker
    except ImportError:
        yield
        return
    original = OptInChecker.check
    OptInChecker.check = lambda self, *args, **kwargs: ConsentCheckResult.DECLINED
    try:
        _silence_loaded_nncf()
        yield
    finally:
        OptInChecker.check = original
