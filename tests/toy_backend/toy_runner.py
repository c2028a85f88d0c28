"""A toy backend, defined outside the package: a runner class and its descriptor, nothing else.

Format ``toy-npz``: a ``.npz`` with ``w`` ``[K, N]`` and ``b`` ``[N]``; the model computes
``y = x @ w + b`` for ``x`` ``[1, K]``. Accelerator ``TOYNPU`` is "present" when the environment
variable ``TOY_NPU_PRESENT`` is ``1``; ``cpu`` always is. Importing this module registers the
backend (``EDGE_SDK_PLUGINS=toy_runner`` makes child processes import it too).
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np

from edge_sdk.backends import BackendDescriptor, register_backend
from edge_sdk.errors import ModelLoadError
from edge_sdk.runtimes.base import NativeTensor, Runner
from edge_sdk.runtimes.probe import StepStatus


class ToyRunner(Runner):
    backend = "toy"
    formats = ("toy-npz",)
    thread_safe = True

    @classmethod
    def validate_container(cls, path: Path, files: dict[str, Path]) -> None:
        if not zipfile.is_zipfile(path):
            raise ModelLoadError(f"{path.name} is not a toy-npz model (not a zip archive).", "Write it with np.savez.")

    def activate_impl(self) -> None:
        with np.load(self.config.model_path, allow_pickle=False) as z:
            self._w, self._b = z["w"].astype(np.float32), z["b"].astype(np.float32)
        k, n = self._w.shape
        self.input_metadata = [NativeTensor("x", (1, k), np.dtype(np.float32))]
        self.output_metadata = [NativeTensor("y", (1, n), np.dtype(np.float32))]
        self.delegate = self.config.accelerator
        self.details = {"toy": f"{k}x{n} matrix"}

    def infer_impl(self, feed: list[np.ndarray]) -> list[np.ndarray]:
        return [feed[0] @ self._w + self._b]

    def deactivate_impl(self) -> None:
        self._w = self._b = None


def probe(accelerator: str) -> StepStatus:
    if accelerator == "cpu":
        return StepStatus(True, "numpy is the toy CPU")
    if accelerator == "TOYNPU":
        if os.environ.get("TOY_NPU_PRESENT") == "1":
            return StepStatus(True, "toy NPU present")
        return StepStatus(False, "no toy NPU attached", "set TOY_NPU_PRESENT=1")
    return StepStatus(False, f"unknown toy accelerator '{accelerator}'", "use TOYNPU or cpu")


def details() -> dict:
    return {"toy_npu": os.environ.get("TOY_NPU_PRESENT") == "1"}


DESCRIPTOR = register_backend(BackendDescriptor(
    name="toy", runner=ToyRunner, formats=("toy-npz",), default_accelerator="cpu", cpu_accelerators=("cpu",),
    modules=(("numpy", "numpy"),), extra="toy", probe=probe, details=details))
