"""A camera detector loop in about ten lines: BGR frames in, labelled boxes in frame pixels out, pipelined.

    python examples/camera_app.py [ARTIFACT] [--frames 100] [--compare]

Without ARTIFACT it builds a small YOLOv8-shaped stand-in detector by code
(examples/detector_model.py; offline). Frames are synthetic 480x640 BGR images, as
``cv2.VideoCapture.read()`` returns them; with OpenCV the ``frames`` generator would be
``iter(lambda: cap.read()[1], None)``. ``--compare`` also times a hand-written loop over the raw
ONNX Runtime session (letterbox, BGR->RGB, decode and NMS written out by hand) for the same frames.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import edge_sdk

sys.path.insert(0, str(Path(__file__).resolve().parent))
import detector_model  # noqa: E402  (the stand-in model's builder, beside this file)


def synthetic_frames(n: int, seed: int = 0):
    """``n`` 480x640 BGR uint8 frames: a moving bright block on noise."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        frame = rng.integers(0, 60, (480, 640, 3), dtype=np.uint8)
        x = (i * 7) % 560
        frame[200:320, x:x + 80] = (40, 180, 250)  # BGR orange
        yield frame


def detect_loop(artifact: Path, frames, labels: list[str]) -> list[list]:
    """The user code: load once, stream BGR frames through the model, print labelled boxes."""
    per_frame = []
    with edge_sdk.load(artifact, head="yolov8", labels=labels) as model:
        for i, result in enumerate(model.pipeline(frames, color="bgr", max_in_flight=2)):
            for det in result.detections:
                x1, y1, x2, y2 = det.box
                print(f"frame {i}: {det.label} {det.score:.2f} at ({x1:.0f}, {y1:.0f}, {x2:.0f}, {y2:.0f})")
            per_frame.append(result.detections)
    return per_frame


def raw_loop(sess, frames, conf: float = 0.25, iou: float = 0.45) -> list[int]:
    """The same task written by hand over an ONNX Runtime session (what the SDK saves you from writing)."""
    from PIL import Image

    size = sess.get_inputs()[0].shape[2]
    counts = []
    for frame in frames:
        h, w = frame.shape[:2]
        r = min(size / w, size / h)
        nw, nh = round(w * r), round(h * r)
        canvas = Image.new("RGB", (size, size), (114, 114, 114))
        left, top = (size - nw) // 2, (size - nh) // 2
        canvas.paste(Image.fromarray(np.ascontiguousarray(frame[:, :, ::-1])).resize((nw, nh), Image.BILINEAR), (left, top))
        x = (np.asarray(canvas, np.float32) / 255.0).transpose(2, 0, 1)[None]
        out = sess.run(None, {"images": x})[0][0]
        scores = out[4:].max(0)
        cls = out[4:].argmax(0)
        keep = scores >= conf
        cx, cy, bw, bh = out[:4, keep]
        boxes = np.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], 1)
        boxes = (boxes - [left, top, left, top]) / [nw / w, nh / h, nw / w, nh / h]
        s, c = scores[keep], cls[keep]
        order, kept = np.argsort(-s), []
        while order.size:
            i, rest = order[0], order[1:]
            kept.append(i)
            xx1 = np.maximum(boxes[i, 0], boxes[rest, 0])
            yy1 = np.maximum(boxes[i, 1], boxes[rest, 1])
            xx2 = np.minimum(boxes[i, 2], boxes[rest, 2])
            yy2 = np.minimum(boxes[i, 3], boxes[rest, 3])
            inter = np.clip(xx2 - xx1, 0, None) * np.clip(yy2 - yy1, 0, None)
            area = lambda b: (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])  # noqa: E731
            overlap = inter / (area(boxes[i]) + area(boxes[rest]) - inter)
            order = rest[(overlap <= iou) | (c[rest] != c[i])]
        counts.append(len(kept))
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("artifact", nargs="?", help="artifact folder of a YOLOv8-style detector (default: build the stand-in)")
    ap.add_argument("--frames", type=int, default=30)
    ap.add_argument("--compare", action="store_true", help="also time a hand-written raw ONNX Runtime loop")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        artifact = Path(args.artifact) if args.artifact else detector_model.build_artifact(Path(tmp) / "detector")
        t0 = time.perf_counter()
        per_frame = detect_loop(artifact, synthetic_frames(args.frames), detector_model.LABELS)
        sdk_ms = (time.perf_counter() - t0) / args.frames * 1e3
        print(f"edge-sdk pipeline: {args.frames} frames, {sum(map(len, per_frame))} detections, {sdk_ms:.2f} ms/frame "
              "(load included)")
        if args.compare:
            import onnxruntime as ort

            frames = list(synthetic_frames(args.frames))
            sess = ort.InferenceSession(str(artifact / "model.onnx"), providers=["CPUExecutionProvider"])
            raw_loop(sess, frames[:3])  # warm-up
            t0 = time.perf_counter()
            counts = raw_loop(sess, frames)
            raw_ms = (time.perf_counter() - t0) / args.frames * 1e3
            with edge_sdk.load(artifact, head="yolov8", labels=detector_model.LABELS) as model:
                for f in frames[:3]:
                    model.infer_image(f, color="bgr")
                t0 = time.perf_counter()
                for f in frames:
                    model.infer_image(f, color="bgr")
                sync_ms = (time.perf_counter() - t0) / args.frames * 1e3
                t0 = time.perf_counter()
                for _ in model.pipeline(frames, color="bgr", max_in_flight=2):
                    pass
                pipe_ms = (time.perf_counter() - t0) / args.frames * 1e3
            same = counts == [len(d) for d in per_frame]
            print(f"loops only (no load): raw onnxruntime {raw_ms:.2f} ms/frame, edge-sdk infer_image {sync_ms:.2f}, "
                  f"edge-sdk pipeline(max_in_flight=2) {pipe_ms:.2f}; same detection counts: {same}")
            if not same:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
