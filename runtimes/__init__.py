"""Runtime backends (installed as ``edge_sdk.runtimes``).

Importing this package imports no ML framework: each backend module imports its runtime
lazily, and TensorFlow is never imported on the runtime path (LiteRT comes from
``ai_edge_litert`` or ``tflite_runtime``; ``tensorflow.lite`` is only a last resort).
"""

from .base import FallbackWarning  # noqa: F401  (filter or record fallbacks: warnings.simplefilter("error", FallbackWarning))
from .probe import StepStatus, probe_step  # noqa: F401
