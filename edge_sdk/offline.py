"""edge-sdk never touches the network, at convert time or on the device.

OpenVINO sends a usage event to Google Analytics on ``import openvino`` (its ``tools.ovc``
package is imported by ``openvino/__init__``), ``convert_model`` sends more, and NNCF sends its
own; all of it is opt-out, through ``openvino_telemetry`` (a forked child does the HTTP request).
:func:`no_telemetry` declines consent while the block runs: ``edge_sdk._deps.require`` imports
OpenVINO and NNCF inside it, and the conversion pipeline runs inside it. onnx2tf runs in a child
process with sockets blocked (see ``converters/onnx2tf_route.py``).
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
    """Decline OpenVINO/NNCF telemetry consent while the block runs (no-op without openvino_telemetry).

    Objects created inside the block (OpenVINO's import-time event, NNCF's telemetry object) keep
    the declined consent for the life of the process.
    """
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


#: Modules whose import sends telemetry unless consent is declined.
PHONES_HOME = frozenset({"openvino", "nncf"})
