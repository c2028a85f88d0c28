"""Time per camera frame: preprocessing baked into the OpenVINO IR vs on the host (``convert --bake-preprocess``).

Each model is converted for ``intel-cpu`` twice, with and without ``--bake-preprocess 480x640,bgr``;
both artifacts then run ``Model.infer_image(bgr_frame, color="bgr")`` on the same 480x640 frames,
interleaved. Run: ``python benchmarks/bench_bake_preprocess.py [--json out.json]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from _common import DIGITS, REPO, interleaved_medians, print_table, write_result

FRAME = (480, 640)


def measure(plain: Path, baked: Path, frames: list[np.ndarray], rounds: int = 20, per_round: int = 20) -> dict[str, float]:
    """Median ms per ``infer_image(frame, color="bgr")`` of the host-preprocessed and the baked artifact."""
    import edge_sdk

    with edge_sdk.load(plain) as p, edge_sdk.load(baked) as b:
        it = {"host": 0, "baked": 0}

        def call(model, key):
            def fn():
                it[key] = (it[key] + 1) % len(frames)
                return model.infer_image(frames[it[key]], color="bgr")
            return fn

        return interleaved_medians({"host": call(p, "host"), "baked": call(b, "baked")}, rounds=rounds,
                                   per_round=per_round, warmup=min(20, per_round))


def linear_row(plain: Path, baked: Path, frames: list[np.ndarray], rounds: int = 20, per_round: int = 20) -> tuple[float, dict]:
    """Raw OpenVINO ms per frame of the plain IR re-baked with ``resize=linear``, and its check against the host path.

    ``resize=auto`` refuses linear beyond a 2x downscale (or when it misses the tolerance), so no
    artifact holds it; this times the same PrePostProcessor graph without the facade.
    """
    import openvino as ov

    import edge_sdk
    from edge_sdk.converters.openvino_bake import BakeRequest, compare, with_ppp
    from edge_sdk.manifest import read_manifest
    from edge_sdk.preprocess import from_dict

    m = read_manifest(baked)
    spec = from_dict(m.preprocessing.spec)
    name = m.preprocessing.baked.input
    core = ov.Core()
    model = with_ppp(core.read_model(str(plain / "model.xml")), name, spec, BakeRequest(FRAME, "bgr", "linear"), "linear")
    compiled = core.compile_model(model, "CPU")
    req = compiled.create_infer_request()
    with edge_sdk.load(plain) as p:
        ref = [list(p.infer_image(f, color="bgr").outputs.values()) for f in frames]
    got = [[np.array(v) for v in compiled({name: f[None]}).to_tuple()] for f in frames]
    it = [0]

    def fn():
        it[0] = (it[0] + 1) % len(frames)
        return req.infer({name: frames[it[0]][None]})

    ms = interleaved_medians({"linear": fn}, rounds=rounds, per_round=per_round, warmup=min(20, per_round))["linear"]
    return ms, compare(ref, got)


def _frames(n: int = 8) -> list[np.ndarray]:
    sys.path.insert(0, str(REPO / "tests"))
    from PIL import Image

    from models import digit_images

    imgs, _ = digit_images(n, size=96, seed=42)
    rng = np.random.default_rng(42)
    out = []
    for im in imgs:
        big = np.asarray(Image.fromarray(im).resize((FRAME[1], FRAME[0]), Image.BILINEAR), np.float64)
        out.append(np.ascontiguousarray(np.clip(big + rng.normal(0, 12, big.shape), 0, 255).astype(np.uint8)[..., ::-1]))
    return out


def _cases(root: Path) -> list[tuple[str, Path, str, str, dict]]:
    sys.path.insert(0, str(REPO / "examples"))
    sys.path.insert(0, str(REPO / "tests"))
    import detector_model
    from models import write_image_folder

    calib = write_image_folder(root / "calib", n=48, size=96)
    cases = [("digits CNN 32x32 gray, stretch", DIGITS / "digits_cnn.onnx", str(DIGITS / "calib"),
              str(DIGITS / "preprocess.json"), {"calib_count": 60})]
    for size in (128, 320):
        onnx = detector_model.build_onnx(root / f"det{size}.onnx", size=size)
        cases.append((f"YOLOv8-shaped detector {size}x{size} RGB NCHW, letterbox", onnx, str(calib),
                      f"size={size}x{size},resize=letterbox,layout=NCHW,color=RGB,scale=1/255", {}))
    return cases


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from edge_sdk.converters.pipeline import convert
    from edge_sdk.manifest import read_manifest

    frames, rows = _frames(), []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i, (label, model, calib, pre, kw) in enumerate(_cases(root)):
            out = {}
            for name, bake in (("plain", None), ("baked", f"{FRAME[0]}x{FRAME[1]},bgr")):
                convert(str(model), "intel-cpu", root / f"{i}{name}", calib=calib, preprocess=pre, bake_preprocess=bake,
                        progress=None, **kw)
                out[name] = root / f"{i}{name}" / "intel-cpu"
            baked = read_manifest(out["baked"]).preprocessing.baked
            ms = measure(out["plain"], out["baked"], frames)
            chk = baked.check["tried"][baked.resize]
            rows.append([label, baked.resize, f"{ms['host']:.3f}", f"{ms['baked']:.3f}", f"{ms['host'] / ms['baked']:.2f}x",
                         f"{chk['min_cosine']:.5f} / {chk['max_rel']:.4f}"])
            lin_ms, lin = linear_row(out["plain"], out["baked"], frames)
            rows.append([label, "linear (raw OpenVINO)", f"{ms['host']:.3f}", f"{lin_ms:.3f}", f"{ms['host'] / lin_ms:.2f}x",
                         f"{lin['min_cosine']:.5f} / {lin['max_rel']:.4f}" + ("" if lin["passed"] else " (fails)")])
    data = {"title": "Baked preprocessing (OpenVINO PrePostProcessor) vs host, ms per 480x640 BGR frame",
            "columns": ["model", "graph resize", "host ms", "baked ms", "speed-up", "check cos / max rel"], "rows": rows,
            "notes": ["infer_image(frame, color='bgr') medians, interleaved; OpenVINO CPU plugin, default threads",
                      "'graph resize' is what resize=auto chose at conversion (linear only up to a 2x downscale and "
                      "within the tolerance: cosine >= 0.995, max rel <= 0.05)",
                      "'linear (raw OpenVINO)': the same PrePostProcessor graph with RESIZE_LINEAR, timed on a bare "
                      "InferRequest (no facade), checked on the bench frames against the host path"]}
    if args.json:
        write_result(args.json, data["title"], data["columns"], data["rows"], data["notes"])
    print_table(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
