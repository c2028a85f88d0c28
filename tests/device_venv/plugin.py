"""pytest plugin for the runtime tests inside a device venv (``tests/device_venv/run.py``).

The device venv has edge-sdk (installed from a wheel, not the checkout) and the runtime wheels, but
no converter: no onnx, no TensorFlow. The runtime tests build their tiny models with those, so the
artifacts are built beforehand in the dev venv (``run.py build-artifacts``) and this plugin makes
the builders copy them instead: ``rt_artifacts.onnx_artifacts`` / ``tflite_artifacts`` and
``detector_model.build_artifact``. Anything else that needs the conversion stack fails, as it would
on a device.

It also refuses to run when edge_sdk comes from the checkout or when the conversion stack is
importable, so a mistake in the harness cannot turn the check into a dev-venv run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONVERSION_STACK = ("tensorflow", "tf_keras", "keras", "onnx", "onnx2tf", "nncf", "tf2onnx", "torch")


def _prebuilt() -> Path:
    path = os.environ.get("EDGE_SDK_PREBUILT")
    if not path or not (Path(path) / "index.json").is_file():
        raise pytest.UsageError("EDGE_SDK_PREBUILT must name the folder run.py built (index.json missing)")
    return Path(path)


def pytest_configure(config: pytest.Config) -> None:
    import edge_sdk

    where = Path(edge_sdk.__file__).resolve()
    if REPO in where.parents:
        raise pytest.UsageError(f"edge_sdk was imported from the checkout ({where}), not the device venv's install")
    present = [m for m in CONVERSION_STACK if importlib.util.find_spec(m) is not None]
    if present:
        raise pytest.UsageError(f"the device venv has the conversion stack installed: {present}")

    src = _prebuilt()
    index = json.loads((src / "index.json").read_text())
    for p in (REPO / "tests", REPO / "examples"):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))
    import detector_model
    import rt_artifacts as ra

    copied: list[Path] = []

    def family(key: str):
        def get(tmp_path_factory) -> dict[str, Path]:
            if key not in ra._BUILT:
                if not copied:  # one private copy of the prebuilt models per session (tests may damage files)
                    dest = tmp_path_factory.mktemp("prebuilt")
                    shutil.copytree(src / "families", dest, dirs_exist_ok=True)
                    copied.append(dest)
                ra._BUILT[key] = {name: copied[0] / rel for name, rel in index[key].items()}
            return ra._BUILT[key]
        return get

    def build_artifact(folder, *, size: int = detector_model.SIZE) -> Path:
        name = f"detector_{size}"
        if name not in index:
            raise AssertionError(f"no prebuilt detector of size {size}: add it to run.py's DETECTOR_SIZES")
        folder = Path(folder)
        shutil.copytree(src / index[name], folder, dirs_exist_ok=True)
        return folder

    ra.onnx_artifacts = family("onnx")
    ra.tflite_artifacts = family("tflite")
    detector_model.build_artifact = build_artifact


def pytest_report_header(config: pytest.Config) -> list[str]:
    from importlib import metadata

    names = ("edge-sdk", "numpy", "pillow", "click", "ai-edge-litert", "onnxruntime", "openvino", "opencv-python-headless")
    found = []
    for n in names:
        try:
            found.append(f"{n}=={metadata.version(n)}")
        except metadata.PackageNotFoundError:
            pass
    return ["device venv: " + " ".join(found)]
