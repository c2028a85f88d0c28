"""Host (x86-64) side: the quick-start artifacts the arm64 check runs, and what they are compared to.

    PYTHONPATH=UNPACKED_WHEEL .venv/bin/python artifacts.py --out DIR [--tamper DIR]

Run with the wheel under test first on PYTHONPATH (the driver does that), so the artifacts are
made by exactly the code the devices run. Writes into DIR:

- ``out/<profile>/``: ``edge_sdk.convert`` of ``examples/digits/digits_cnn.onnx`` for arm-cpu
  (int8 TFLite + int8 QDQ ONNX), coral-edgetpu and intel-cpu, calibrated on the bundled 200
  calibration digits, gated on the 300 validation digits — what ``examples/quickstart.py`` does;
- ``float.npz``: the float model's outputs on the validation digits (ONNX Runtime fp32 on the
  source model, the accuracy gate's reference), after each profile's recorded preprocessing;
- ``steps.json``: per artifact format and output, the quantization step of the output's last
  quantized tensor (``null`` where the output is computed in float, e.g. OpenVINO's SoftMax).

``--tamper DIR`` instead writes a deliberately broken copy of the arm-cpu artifact for the
harness's self-test: the last layer's int8 weights and bias are rotated by one class (the model
still loads and runs, and its manifest hashes are updated to match, but it answers the wrong
digit), so the accuracy gate must fail it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "examples" / "digits"
PROFILES = ["arm-cpu", "coral-edgetpu", "intel-cpu"]


def val_names() -> list[str]:
    return sorted(json.loads((DIGITS / "val_labels.json").read_text()))


def convert(out: Path) -> None:
    import edge_sdk
    from edge_sdk.preprocess import from_dict

    spec = from_dict(json.loads((DIGITS / "preprocess.json").read_text()))
    edge_sdk.convert(str(DIGITS / "digits_cnn.onnx"), PROFILES, str(out), calib=str(DIGITS / "calib"),
                     validation=str(DIGITS / "val"), preprocess=spec, force=True)


def float_reference(out: Path) -> dict[str, np.ndarray]:
    """ONNX Runtime fp32 on the source model, per profile (each replays its own recorded preprocessing)."""
    import onnxruntime as ort

    import edge_sdk
    from edge_sdk import preprocess as pp

    sess = ort.InferenceSession(str(DIGITS / "digits_cnn.onnx"), providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    names = [o.name for o in sess.get_outputs()]
    result: dict[str, np.ndarray] = {}
    for prof in PROFILES:
        manifest = edge_sdk.read_manifest(out / prof)
        spec = pp.from_dict(manifest.preprocessing.spec, where="manifest preprocessing")
        spec = spec.with_size_from_shape(list(manifest.inputs[0].shape))
        rows = [sess.run(None, {inp.name: pp.apply(DIGITS / "val" / f, spec)}) for f in val_names()]
        art_outputs = [o.name for o in manifest.outputs]
        for i, name in enumerate(names):
            # the artifact's outputs carry the source's names; by position where they differ
            key = name if name in art_outputs else art_outputs[i]
            result[f"{prof}__{key}"] = np.stack([np.asarray(r[i]) for r in rows])
    return result


def tflite_output_steps(path: Path) -> dict[str, float | None]:
    """Per output: the scale of the output tensor itself, or of the int8 tensor its DEQUANTIZE reads."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(str(path))
    tensors = {t["index"]: t for t in it.get_tensor_details()}
    producers = {o: op for op in it._get_ops_details() for o in op["outputs"]}
    steps: dict[str, float | None] = {}
    for det in it.get_output_details():
        scale = det["quantization"][0]
        if not scale:
            op = producers.get(det["index"])
            if op is not None and op["op_name"] == "DEQUANTIZE":
                scale = tensors[op["inputs"][0]]["quantization"][0]
        steps[det["name"]] = float(scale) if scale else None
    return steps


def onnx_output_steps(path: Path) -> dict[str, float | None]:
    """Per graph output: the scale of the DequantizeLinear that produces it (per-tensor), else None."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    steps: dict[str, float | None] = {}
    for out in model.graph.output:
        node = producers.get(out.name)
        scale = None
        if node is not None and node.op_type == "DequantizeLinear" and node.input[1] in inits:
            arr = inits[node.input[1]]
            scale = float(arr) if arr.size == 1 else None
        steps[out.name] = scale
    return steps


def output_steps(out: Path) -> dict[str, dict[str, float | None]]:
    """``{"<profile>/<format>": {output: step or None}}`` keyed by the manifest's output names."""
    import edge_sdk

    steps: dict[str, dict[str, float | None]] = {}
    for prof in PROFILES:
        manifest = edge_sdk.read_manifest(out / prof)
        outputs = [o.name for o in manifest.outputs]
        for art in manifest.artifacts:
            if art.role != "model":
                continue
            path = out / prof / art.path
            if art.format == "tflite-int8":
                raw = tflite_output_steps(path)
            elif art.format == "onnx-qdq":
                raw = onnx_output_steps(path)
            else:
                raw = {}
            # the manifest's quantization (a quantized output tensor) wins; TFLite names differ: by position
            vals = list(raw.values())
            got = {}
            for i, o in enumerate(manifest.outputs):
                q = o.quantization
                got[o.name] = float(q.scale) if q is not None else raw.get(o.name, vals[i] if i < len(vals) else None)
            steps[f"{prof}/{art.format}"] = {k: got[k] for k in outputs}
    return steps


def _rehash(folder: Path, rel: str) -> None:
    """Make the manifest agree with an edited file (what a tamperer who knows the format does)."""
    mpath = folder / "manifest.json"
    data = json.loads(mpath.read_text())
    blob = (folder / rel).read_bytes()
    for art in data["artifacts"]:
        if art["path"] == rel:
            art["sha256"] = hashlib.sha256(blob).hexdigest()
            art["size_bytes"] = len(blob)
    mpath.write_text(json.dumps(data, indent=2) + "\n")


def tamper(src: Path, dst: Path) -> dict:
    """Rotate the classes of the last Gemm/MatMul's int8 weights and bias in arm-cpu's model.onnx."""
    import onnx
    from onnx import numpy_helper

    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    model = onnx.load(str(dst / "model.onnx"))
    inits = {i.name: i for i in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    last = next(n for n in reversed(model.graph.node) if n.op_type in ("Gemm", "MatMul"))
    changed = []
    for name in last.input[1:]:
        node = producers.get(name)  # weights and bias arrive through DequantizeLinear in a QDQ graph
        init_name = node.input[0] if node is not None and node.op_type == "DequantizeLinear" else name
        if init_name not in inits:
            continue
        arr = numpy_helper.to_array(inits[init_name])
        if arr.ndim == 0 or arr.shape[-1] < 2:
            continue
        # Gemm(transB=0)/MatMul weights: [in, classes]; bias: [classes]
        axis = -1 if not any(a.name == "transB" and a.i for a in last.attribute) else 0
        inits[init_name].CopyFrom(numpy_helper.from_array(np.roll(arr, 1, axis=axis), init_name))
        changed.append(init_name)
    if not changed:
        raise SystemExit(f"tamper: found nothing to rotate in {last.name}")
    onnx.save(model, str(dst / "model.onnx"))
    _rehash(dst, "model.onnx")
    return {"node": last.name, "rotated": changed}


def drop_editable_finders() -> None:
    """The wheel under test comes first on PYTHONPATH; a developer's editable install of the checkout
    must not fill in what the wheel lacks (that would hide a packaging bug), so its finders go."""
    sys.meta_path[:] = [f for f in sys.meta_path if not str(getattr(f, "__module__", "")).startswith("__editable__")]
    sys.path_hooks[:] = [h for h in sys.path_hooks if not str(getattr(h, "__module__", "")).startswith("__editable__")]


def main() -> int:
    drop_editable_finders()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--tamper", type=Path, help="write the tampered arm-cpu copy here (from --out/out/arm-cpu)")
    args = ap.parse_args()
    import edge_sdk

    where = Path(edge_sdk.__file__).resolve()
    if REPO / "edge_sdk" in where.parents:
        raise SystemExit(f"artifacts.py must run with the wheel under test on PYTHONPATH (got {where})")
    if args.tamper:
        info = tamper(args.out / "out" / "arm-cpu", args.tamper)
        (args.tamper.parent / (args.tamper.name + ".tamper.json")).write_text(json.dumps(info) + "\n")
        print(json.dumps(info))
        return 0
    convert(args.out / "out")
    np.savez(args.out / "float.npz", images=np.array(val_names()), **float_reference(args.out / "out"))
    (args.out / "steps.json").write_text(json.dumps(output_steps(args.out / "out"), indent=1) + "\n")
    (args.out / "edge_sdk_path.txt").write_text(str(where) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
