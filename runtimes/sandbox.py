"""Trial-load an unverified model in a child process, so a corrupt file cannot crash the caller.

Native runtimes trust their input: a LiteRT interpreter given a flatbuffer with a flipped
byte can segfault on load or on the first invoke, which no Python ``try`` can catch. When the
manifest hashes vouch for the file (``verify=True``, the default) the file is exactly what the
converter wrote and ran, so no trial is needed. With ``verify=False`` the facade first loads
the model and runs one zero input in a child process; if the child dies from a signal the file
is refused with :class:`~edge_sdk.errors.ModelLoadError`. Ordinary errors in the child are
ignored here: the real load in this process reports them properly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from edge_sdk.errors import ModelLoadError

from .base import RunnerConfig

_CHILD = r"""
import json, sys
import numpy as np
from pathlib import Path
from edge_sdk.runtimes.base import RunnerConfig
from edge_sdk.runtimes.select import BACKENDS
a = json.loads(sys.argv[1])
cfg = RunnerConfig(model_path=Path(a["model_path"]), accelerator=a["accelerator"], num_threads=1,
                   files={k: Path(v) for k, v in a["files"].items()}, backend_options=a["backend_options"],
                   cache_dir=None, model_sha256=a["sha"])
try:
    runner = BACKENDS.get(a["backend"])(cfg)
    runner.activate()
    runner.infer_impl([np.zeros([d if d > 0 else 1 for d in t.shape], t.dtype) for t in runner.input_metadata])
    runner.deactivate()
except Exception as exc:
    print("error:", type(exc).__name__)
print("done")
"""


def trial_run(backend: str, config: RunnerConfig, timeout_s: float = 120.0) -> None:
    """Load ``config.model_path`` with ``backend`` and run one zero input in a child process.

    Raises:
        ModelLoadError: the child crashed (signal) or hung.
    """
    args = json.dumps({"backend": backend, "model_path": str(config.model_path), "accelerator": config.accelerator,
                       "files": {k: str(v) for k, v in config.files.items()},
                       "backend_options": config.backend_options, "sha": config.model_sha256})
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD, args], capture_output=True, text=True,
                              timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise ModelLoadError(f"{config.model_path.name} hung the {backend} runtime in a trial load ({timeout_s:.0f} s).",
                             "The file is likely corrupt: copy the artifact again, or load with verify=True.") from None
    if proc.returncode < 0:  # killed by a signal (SIGSEGV, SIGABRT, SIGFPE ...): the file broke native code
        try:
            why = signal.Signals(-proc.returncode).name
        except ValueError:
            why = f"signal {-proc.returncode}"
        raise ModelLoadError(
            f"{config.model_path.name} crashed the {backend} runtime in a trial load ({why}): corrupt or tampered file.",
            "Copy the artifact folder again from the source, or convert again; verify=True checks the hashes first.")
