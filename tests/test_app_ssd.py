"""``--head ssd-anchors:<spec>`` and ``--head segmentation`` (issue #19).

The anchors are checked against a line-by-line port of MediaPipe's ``SsdAnchorsCalculator`` and the
decoding against a per-anchor port of ``TensorsToDetectionsCalculator::DecodeBoxes`` followed by a
plain greedy NMS; a tiny SSD-shaped ONNX model goes through ``convert --head ssd-anchors`` and
``load().infer_image()`` so the spec travels in the manifest. Real MediaPipe models:
tests/realmodels/test_heads_real.py.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import edge_sdk
from edge_sdk import preprocess as pp
from edge_sdk.anchors import parse_spec, ssd_anchors
from edge_sdk.cli import main
from edge_sdk.detect import Head, as_head, decode_mask, decode_outputs, decode_ssd
from edge_sdk.errors import InputValidationError, ManifestError
from edge_sdk.manifest import read_manifest


# ------------------------------------------------------------------ reference: MediaPipe, ported loop by loop
def ref_anchors(num_layers, min_scale, max_scale, w_in, h_in, strides, ratios, offset=0.5, reduce=False,
                interp=1.0, fixed=False):
    """ssd_anchors_calculator.cc, GenerateAnchors (strides path), as (x, y, w, h) rows."""
    def calc_scale(i, n):
        return (min_scale + max_scale) * 0.5 if n == 1 else min_scale + (max_scale - min_scale) * 1.0 * i / (n - 1.0)

    anchors, layer_id = [], 0
    while layer_id < num_layers:
        heights, widths, ars, scales = [], [], [], []
        last = layer_id
        while last < len(strides) and strides[last] == strides[layer_id]:
            scale = calc_scale(last, len(strides))
            if last == 0 and reduce:
                ars += [1.0, 2.0, 0.5]
                scales += [0.1, scale, scale]
            else:
                for r in ratios:
                    ars.append(r)
                    scales.append(scale)
                if interp > 0.0:
                    nxt = 1.0 if last == len(strides) - 1 else calc_scale(last + 1, len(strides))
                    scales.append(math.sqrt(scale * nxt))
                    ars.append(interp)
            last += 1
        for a, s in zip(ars, scales):
            heights.append(s / math.sqrt(a))
            widths.append(s * math.sqrt(a))
        fh, fw = math.ceil(h_in / strides[layer_id]), math.ceil(w_in / strides[layer_id])
        for y in range(fh):
            for x in range(fw):
                for k in range(len(heights)):
                    anchors.append([(x + offset) / fw, (y + offset) / fh, 1.0 if fixed else widths[k],
                                    1.0 if fixed else heights[k]])
        layer_id = last
    return np.array(anchors)


def ref_decode(raw, logits, anchors, *, xs, ys, ws, hs, reverse, exp, conf, iou, w_in, h_in):
    """DecodeBoxes + sigmoid + per-class greedy NMS, one anchor at a time (input pixels)."""
    cands = []
    for i, a in enumerate(anchors):
        scores = [1 / (1 + math.exp(-max(-100.0, min(100.0, float(v))))) for v in logits[i]]
        c = int(np.argmax(scores))
        p = scores[c]
        if p < conf:
            continue
        r = raw[i]
        yc, xc, h, w = (r[1], r[0], r[3], r[2]) if reverse else (r[0], r[1], r[2], r[3])
        xc = xc / xs * a[2] + a[0]
        yc = yc / ys * a[3] + a[1]
        h = math.exp(h / hs) * a[3] if exp else h / hs * a[3]
        w = math.exp(w / ws) * a[2] if exp else w / ws * a[2]
        box = [(xc - w / 2) * w_in, (yc - h / 2) * h_in, (xc + w / 2) * w_in, (yc + h / 2) * h_in]
        kps = [((r[j] if reverse else r[j + 1]) / xs * a[2] + a[0],
                (r[j + 1] if reverse else r[j]) / ys * a[3] + a[1]) for j in range(4, len(r), 2)]
        cands.append((p, i, c, box, [(x * w_in, y * h_in) for x, y in kps]))
    cands.sort(key=lambda t: (-t[0], t[1]))
    kept = []
    for cand in cands:
        if all(k[2] != cand[2] or _iou(k[3], cand[3]) <= iou for k in kept):
            kept.append(cand)
    return kept


def _iou(a, b):
    iw, ih = max(0.0, min(a[2], b[2]) - max(a[0], b[0])), max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - iw * ih
    return iw * ih / union if union > 0 else 0.0


# ------------------------------------------------------------------ anchors
@pytest.mark.parametrize("spec, ref, count", [
    # palm_detection_lite (MediaPipe palm_detection_cpu graph)
    ("strides=8,16,16,16;scale=0.1484375-0.75;fixed=1;size=192",
     dict(num_layers=4, min_scale=0.1484375, max_scale=0.75, w_in=192, h_in=192, strides=[8, 16, 16, 16], ratios=[1.0],
          fixed=True), 2016),
    # face_detection_short_range
    ("strides=8,16,16,16;fixed=1;size=128",
     dict(num_layers=4, min_scale=0.1484375, max_scale=0.75, w_in=128, h_in=128, strides=[8, 16, 16, 16], ratios=[1.0],
          fixed=True), 896),
    # pose_detection
    ("strides=8,16,32,32,32;fixed=1;size=224",
     dict(num_layers=5, min_scale=0.1484375, max_scale=0.75, w_in=224, h_in=224, strides=[8, 16, 32, 32, 32],
          ratios=[1.0], fixed=True), 2254),
    # TF Object Detection SSD MobileNet (MediaPipe's ssd_mobilenet graph): sized anchors, reduced lowest layer
    ("strides=16,32,64,128,256,512;scale=0.2-0.95;ratio=1,2,0.5,3,0.3333;reduce=1;size=300;order=yxhw",
     dict(num_layers=6, min_scale=0.2, max_scale=0.95, w_in=300, h_in=300, strides=[16, 32, 64, 128, 256, 512],
          ratios=[1.0, 2.0, 0.5, 3.0, 0.3333], reduce=True), None),
    # non-square input, no interpolated anchor, offset 0
    ("strides=8,16;scale=0.1-0.9;ratio=1,2;interp=0;offset=0;size=96x64",
     dict(num_layers=2, min_scale=0.1, max_scale=0.9, w_in=96, h_in=64, strides=[8, 16], ratios=[1.0, 2.0], interp=0.0,
          offset=0.0), 12 * 8 * 2 + 6 * 4 * 2),
])
def test_anchors_match_mediapipe(spec, ref, count):
    got = ssd_anchors(parse_spec(spec))
    want = ref_anchors(**ref)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    if count is not None:
        assert parse_spec(spec).count == count


def test_spec_text_json_and_errors_name_the_key(tmp_path):
    text = "strides=8,16,16,16;scale=0.1484375-0.75;fixed=1;xywh_scale=128;conf=0.5;iou=0.3"
    spec = parse_spec(text)
    assert (spec.x_scale, spec.h_scale, spec.fixed, spec.conf, spec.iou, spec.size) == (128, 128, True, 0.5, 0.3, None)
    f = tmp_path / "palm.json"
    f.write_text(json.dumps(spec.to_dict()), encoding="utf-8")
    assert parse_spec(str(f)) == spec == parse_spec(spec.to_dict())
    head = as_head(f"ssd-anchors:{f}")
    assert (head.kind, head.conf, head.iou, head.anchors) == ("ssd-anchors", 0.5, 0.3, spec)
    for bad, key in [("strides=8,x", "strides"), ("strides=8;stride=8", "unknown key 'stride'"),
                     ("strides=8;scale=0.9-0.1", "scale"), ("strides=8;size=0x4", "size"), ("strides=8;order=xy", "order"),
                     ("strides=8;fixed=2", "fixed"), ("strides=8;conf=1.5", "conf"), ("fixed=1", "strides is missing"),
                     ("strides=8;ratio=0", "ratio"), ("strides=8;xy_scale=-1", "xy_scale"), ("strides=8;fixed", "key=value"),
                     ("strides=8;fixed=1;fixed=0", "given twice")]:
        with pytest.raises(InputValidationError, match=key):
            parse_spec(bad)
    with pytest.raises(InputValidationError, match="Cannot read"):
        parse_spec(str(tmp_path / "missing.json"))
    with pytest.raises(InputValidationError, match="needs an anchor spec"):
        as_head("ssd-anchors")


# ------------------------------------------------------------------ decoding vs the reference
@pytest.mark.parametrize("spec, reverse, exp", [
    # BlazeFace: x, y, w, h then 6 keypoints (MediaPipe's reverse_output_order: true)
    ("strides=8,16,16,16;fixed=1;size=128;conf=0.6;iou=0.3", True, False),
    # TF-OD: y, x, h, w with variances (scales 10, 10, 5, 5) and exponential sizes
    ("strides=8,16;scale=0.2-0.9;ratio=1,2,0.5;size=64x32;order=yxhw;xy_scale=10;wh_scale=5;exp=1;conf=0.5", False, True),
])
def test_decode_ssd_matches_the_reference(spec, reverse, exp):
    s = parse_spec(spec)
    anchors = ssd_anchors(s)
    n, (w_in, h_in) = len(anchors), s.size
    rng = np.random.default_rng(1)
    d = 16 if not exp else 4
    raw = rng.normal(0, 6 if not exp else 1, (1, n, d)).astype(np.float32)
    raw[..., 2:4] = np.abs(raw[..., 2:4]) * 4 + 10 if not exp else raw[..., 2:4]
    classes = 1 if not exp else 3
    logits = rng.normal(-1, 2, (1, n, classes)).astype(np.float32)
    got = decode_ssd(raw, logits, as_head("ssd-anchors:" + spec))
    want = ref_decode(raw[0], logits[0], anchors, xs=s.x_scale or w_in, ys=s.y_scale or h_in, ws=s.w_scale or w_in,
                      hs=s.h_scale or h_in, reverse=reverse, exp=exp, conf=s.conf, iou=s.iou or 0.45, w_in=w_in, h_in=h_in)
    assert len(got) == len(want) >= 3
    np.testing.assert_allclose([g.score for g in got], [w[0] for w in want], rtol=1e-6)
    assert [g.class_id for g in got] == [w[2] for w in want]
    np.testing.assert_allclose([g.box for g in got], [w[3] for w in want], rtol=0, atol=1e-4)
    np.testing.assert_allclose(np.array([g.keypoints for g in got]).reshape(len(got), -1),
                               np.array([w[4] for w in want]).reshape(len(want), -1), rtol=0, atol=1e-4)


def test_decode_maps_boxes_and_keypoints_to_frame_pixels():
    """One anchor fires on a letterboxed 640x480 frame: its box and keypoint come back in frame pixels."""
    spec = "strides=8,16,16,16;fixed=1;conf=0.5"  # size from the transform: 128x128
    frame = np.zeros((480, 640, 3), np.uint8)
    _, t = pp.apply_with_transform(frame, pp.from_dict({"size": [128, 128], "resize": "letterbox", "layout": "NHWC",
                                                        "scale": 1.0, "pad_value": 0}))
    anchors = ssd_anchors(parse_spec(spec + ";size=128"))
    raw = np.zeros((1, 896, 6), np.float32)
    logits = np.full((1, 896, 1), -10.0, np.float32)
    i = 100
    cx, cy = anchors[i, 0] * 128, anchors[i, 1] * 128
    raw[0, i] = [4.0, -2.0, 40.0, 20.0, 10.0, 6.0]  # centre (cx+4, cy-2), 40x20; keypoint at (cx+10, cy+6)
    logits[0, i] = 3.0
    (det,) = decode_outputs({"boxes": raw, "scores": logits}, as_head("ssd-anchors:" + spec), transform=t, labels=["palm"])
    want = t.to_frame([cx + 4 - 20, cy - 2 - 10, cx + 4 + 20, cy - 2 + 10], clip=True)
    np.testing.assert_allclose(det.box, want, atol=1e-9)
    np.testing.assert_allclose(det.keypoints[0], t.to_frame([cx + 10, cy + 6, cx + 10, cy + 6])[:2], atol=1e-9)
    assert det.label == "palm" and det.score == pytest.approx(1 / (1 + math.exp(-3)))
    with pytest.raises(InputValidationError, match="makes 896 anchors"):
        decode_outputs({"boxes": raw[:, :500], "scores": logits[:, :500]}, as_head("ssd-anchors:" + spec), transform=t)
    with pytest.raises(InputValidationError, match="size is missing"):
        decode_ssd(raw, logits, as_head("ssd-anchors:" + spec))


# ------------------------------------------------------------------ segmentation
def test_segmentation_class_map_maps_back_exactly_to_a_letterboxed_frame():
    """A class map known in model space comes back on the frame's exact pixels (letterbox cut off, nearest)."""
    frame = np.zeros((480, 640, 3), np.uint8)
    _, t = pp.apply_with_transform(frame, pp.from_dict({"size": [128, 128], "resize": "letterbox", "layout": "NHWC",
                                                        "scale": 1.0, "pad_value": 0}))
    logits = np.zeros((1, 128, 128, 3), np.float32)  # NHWC, 3 classes; class 0 everywhere...
    logits[0, :, :, 0] = 1.0
    logits[0, 26:66, 20:60, 2] = 5.0  # ...class 2 on input box (20, 26)-(60, 66) = frame (100, 50)-(300, 250)
    logits[0, :16, :, 1] = 9.0  # class 1 in the letterbox padding only: must vanish
    mask = decode_outputs({"out": logits}, Head("segmentation"), transform=t)
    assert mask.shape == (480, 640) and mask.dtype == np.uint8
    want = np.zeros((480, 640), np.uint8)
    want[50:250, 100:300] = 2
    np.testing.assert_array_equal(mask, want)
    nchw = decode_mask(logits.transpose(0, 3, 1, 2), transform=t)  # [1, C, H, W] gives the same
    np.testing.assert_array_equal(nchw, want)
    # one channel of logits: probabilities (sigmoid), bilinear, in range
    prob = decode_mask(np.where(logits[..., 2:] > 0, 8.0, -8.0), transform=t)
    assert prob.dtype == np.float32 and prob.shape == (480, 640) and 0.0 <= prob.min() and prob.max() <= 1.0
    outside = np.ones((480, 640), bool)
    outside[48:252, 98:302] = False  # bilinear: only the box's edge pixels may go either way
    assert prob[52:248, 102:298].min() > 0.99 and prob[outside].max() < 0.01
    with pytest.raises(InputValidationError, match="segmentation head needs"):
        decode_mask(np.zeros((1, 2, 3, 4, 5)))


# ------------------------------------------------------------------ convert --head ssd-anchors -> manifest -> load
SSD_SPEC = "strides=8,16;fixed=1;conf=0.3;iou=0.4"  # 32x32 input: 4x4x2 + 2x2x2 = 40 anchors


def build_ssd_onnx(path, seed: int = 3):
    """A BlazeFace-shaped ONNX model: ``images [1, 3, 32, 32]`` -> ``regressors [1, 40, 6]``, ``classificators [1, 40, 2]``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def w(*shape, s=0.3):
        return rng.normal(0, s, shape).astype(np.float32)

    inits = {"w1": w(12, 3, 8, 8, s=0.2), "b1": w(12, s=0.1), "w2": w(12, 12, 2, 2, s=0.3), "b2": w(12, s=0.1),
             "rb1": w(12, 12, 1, 1, s=3.0), "rb2": w(12, 12, 1, 1, s=3.0), "cb1": w(4, 12, 1, 1, s=1.0),
             "cb2": w(4, 12, 1, 1, s=1.0), "r6": np.array([1, -1, 6], np.int64), "r2": np.array([1, -1, 2], np.int64)}
    nodes = [helper.make_node("Conv", ["images", "w1", "b1"], ["c1"], strides=[8, 8]),
             helper.make_node("Relu", ["c1"], ["f1"]),
             helper.make_node("Conv", ["f1", "w2", "b2"], ["c2"], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["f2"])]
    for k in ("1", "2"):
        nodes += [helper.make_node("Conv", [f"f{k}", f"rb{k}"], [f"rr{k}"]),
                  helper.make_node("Transpose", [f"rr{k}"], [f"rt{k}"], perm=[0, 2, 3, 1]),
                  helper.make_node("Reshape", [f"rt{k}", "r6"], [f"reg{k}"]),
                  helper.make_node("Conv", [f"f{k}", f"cb{k}"], [f"cc{k}"]),
                  helper.make_node("Transpose", [f"cc{k}"], [f"ct{k}"], perm=[0, 2, 3, 1]),
                  helper.make_node("Reshape", [f"ct{k}", "r2"], [f"cls{k}"])]
    nodes += [helper.make_node("Concat", ["reg1", "reg2"], ["regressors"], axis=1),
              helper.make_node("Concat", ["cls1", "cls2"], ["classificators"], axis=1)]
    graph = helper.make_graph(nodes, "ssd_like", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("regressors", TensorProto.FLOAT, [1, 40, 6]),
                               helper.make_tensor_value_info("classificators", TensorProto.FLOAT, [1, 40, 2])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def ssd_artifact(tmp_path_factory):
    root = tmp_path_factory.mktemp("ssd")
    onnx_path = build_ssd_onnx(root / "ssd.onnx")
    rng = np.random.default_rng(0)
    np.savez(root / "calib.npz", images=rng.uniform(0, 1, (16, 1, 3, 32, 32)).astype(np.float32))
    pre = {"size": [32, 32], "resize": "letterbox", "layout": "NCHW", "color": "RGB", "scale": 1 / 255, "pad_value": 0,
           "input": "images"}
    summary = edge_sdk.convert(str(onnx_path), ["intel-cpu"], root / "out", calib=root / "calib.npz",
                               head="ssd-anchors:" + SSD_SPEC, labels=["face", "hand"], preprocess=pre, recover="off",
                               allow_accuracy_drop=True, progress=None)
    return root, summary.profiles[0].folder


def test_convert_records_the_complete_spec_and_load_decodes_with_it(ssd_artifact):
    _, folder = ssd_artifact
    post = read_manifest(folder).postprocess
    assert (post.head, post.output, post.labels) == ("ssd-anchors", "regressors", ["face", "hand"])
    assert post.anchors == {"strides": [8, 16], "size": [32, 32], "fixed": True, "conf": 0.3, "iou": 0.4,
                            "boxes": "regressors", "scores": "classificators"}
    frame = np.random.default_rng(5).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    with edge_sdk.load(folder) as model:
        assert model.head.kind == "ssd-anchors" and model.head.conf == 0.3
        result = model.infer_image(frame)
        spec = parse_spec(post.anchors)
        want = ref_decode(result["regressors"][0], result["classificators"][0], ssd_anchors(spec), xs=32, ys=32, ws=32,
                          hs=32, reverse=True, exp=False, conf=0.3, iou=0.4, w_in=32, h_in=32)
        assert len(want) >= 1, "the stand-in detector should fire"
        got = result.detections
        assert [d.label for d in got] == [["face", "hand"][w[2]] for w in want]
        np.testing.assert_allclose([d.box for d in got], result.transform.to_frame([w[3] for w in want], clip=True),
                                   atol=1e-6)
        assert all(0 <= d.box[0] <= 64 and 0 <= d.box[2] <= 64 and 0 <= d.box[1] <= 48 and 0 <= d.box[3] <= 48
                   for d in got)  # clipped to the frame
        assert "postprocess" in result.timings


def test_pipeline_and_submit_decode_the_ssd_head_like_infer_image(ssd_artifact):
    _, folder = ssd_artifact
    frames = [np.random.default_rng(10 + i).integers(0, 256, (48, 64, 3), dtype=np.uint8) for i in range(6)]
    with edge_sdk.load(folder) as model:
        sync = [model.infer_image(f).detections for f in frames]
        assert any(sync), "the stand-in detector should fire on some frame"
        piped = [r.detections for r in model.pipeline(iter(frames), max_in_flight=2)]
        submitted = model.submit(frames[0]).result(timeout=60).detections
    assert piped == sync and submitted == sync[0]


def test_a_spec_that_does_not_fit_the_model_is_refused_before_anything_is_written(ssd_artifact, tmp_path, capsys):
    root, _ = ssd_artifact
    with pytest.raises(InputValidationError, match="makes 32 anchors but output 'regressors'"):
        edge_sdk.convert(str(root / "ssd.onnx"), ["intel-cpu"], tmp_path / "o1", calib=root / "calib.npz",
                         head="ssd-anchors:strides=8;fixed=1", progress=None)
    with pytest.raises(InputValidationError, match="3 names but output 'classificators'"):
        edge_sdk.convert(str(root / "ssd.onnx"), ["intel-cpu"], tmp_path / "o2", calib=root / "calib.npz",
                         head="ssd-anchors:" + SSD_SPEC, labels=["a", "b", "c"], progress=None)
    code = main(["convert", str(root / "ssd.onnx"), "--profile", "intel-cpu", "--out", str(tmp_path / "o3"),
                 "--calib", str(root / "calib.npz"), "--head", "ssd-anchors:strides=8,16;fixd=1"])
    err = capsys.readouterr().err
    assert code == 3 and "unknown key 'fixd'" in err and "Traceback" not in err
    assert not any((tmp_path / n).exists() for n in ("o1", "o2", "o3"))


def test_a_tampered_anchor_spec_is_refused(ssd_artifact, tmp_path):
    import shutil

    _, folder = ssd_artifact
    for change, match in [({"strides": "8,x"}, "anchors: ssd-anchors spec: bad strides"),
                          ({"boxes": "nope"}, "output 'nope'")]:
        copy = tmp_path / f"copy{len(change)}{next(iter(change))}"
        shutil.copytree(folder, copy)
        data = json.loads((copy / "manifest.json").read_text())
        data["postprocess"]["anchors"].update(change)
        (copy / "manifest.json").write_text(json.dumps(data))
        with pytest.raises(ManifestError, match=match):
            read_manifest(copy)
