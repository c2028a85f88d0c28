"""int8 artifact vs the float model, per runtime, on the bundled digits model (raw runtime calls,
interleaved in one process). OpenVINO's float model is measured twice: in f32 and in the precision
the CPU plugin picks by default (bf16 on CPUs with AVX-512 BF16/AMX), so the comparison does not lie.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from _common import DIGITS, REPO, ensure_artifacts, interleaved_medians, print_table, write_result

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def model_path(folder: Path, fmt: str) -> str:
    man = json.loads((folder / "manifest.json").read_text())
    return str(folder / next(a["path"] for a in man["artifacts"] if a["format"] == fmt and a["role"] == "model"))


def ort_fn(path: str, s8: bool = True):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    if s8:
        opts.add_session_config_entry("session.qdqisint8allowed", "1")  # what the facade does on x86
    s = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    i = s.get_inputs()[0]
    feed = {i.name: np.random.default_rng(0).random([d if isinstance(d, int) else 1 for d in i.shape], np.float32)}
    return lambda: s.run(None, feed)


def ov_fn(model, precision: str | None):
    import openvino as ov

    cfg = {"INFERENCE_NUM_THREADS": 1, "PERFORMANCE_HINT": "LATENCY"}
    if precision:
        cfg["INFERENCE_PRECISION_HINT"] = precision
    c = ov.Core().compile_model(model, "CPU", cfg)
    used = str(c.get_property("INFERENCE_PRECISION_HINT"))
    req = c.create_infer_request()
    x = np.random.default_rng(0).random(list(c.inputs[0].shape), np.float32)
    return (lambda: req.infer([x])), used


def lite_fn(path: str | None = None, content: bytes | None = None):
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=path, model_content=content, num_threads=1)
    it.allocate_tensors()
    d = it.get_input_details()[0]
    x = np.zeros(d["shape"], d["dtype"])

    def run():
        it.set_tensor(d["index"], x)
        it.invoke()

    return run


def float_tflite() -> bytes:
    import tensorflow as tf

    model = tf.keras.models.load_model(DIGITS / "digits_cnn.keras")
    return tf.lite.TFLiteConverter.from_keras_model(model).convert()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="int8_vs_float.json")
    ap.add_argument("--artifacts", default=str(REPO / "benchmarks" / ".artifacts"))
    args = ap.parse_args()
    out = ensure_artifacts(Path(args.artifacts), ["jetson-orin", "intel-cpu", "arm-cpu"])
    import openvino as ov

    rows = []
    qdq = model_path(out / "jetson-orin", "onnx-qdq")
    m = interleaved_medians({"float": ort_fn(str(DIGITS / "digits_cnn.onnx")), "int8": ort_fn(qdq),
                             "u8": ort_fn(qdq, s8=False)})
    rows.append(["ONNX Runtime CPU (s8s8, as the facade runs it)", "fp32", f"{m['float']:.4f}", f"{m['int8']:.4f}",
                 f"{m['float'] / m['int8']:.2f}"])
    rows.append(["ONNX Runtime CPU (x86 u8s8 default, may saturate)", "fp32", f"{m['float']:.4f}", f"{m['u8']:.4f}",
                 f"{m['float'] / m['u8']:.2f}"])

    fp_model = ov.Core().read_model(str(DIGITS / "digits_cnn.onnx"))
    f32, used32 = ov_fn(fp_model, "f32")
    fdef, used_def = ov_fn(fp_model, None)
    i8, _ = ov_fn(model_path(out / "intel-cpu", "openvino-ir"), None)
    m = interleaved_medians({"f32": f32, "default": fdef, "int8": i8})
    rows.append(["OpenVINO CPU", used32, f"{m['f32']:.4f}", f"{m['int8']:.4f}", f"{m['f32'] / m['int8']:.2f}"])
    rows.append(["OpenVINO CPU", f"{used_def} (plugin default)", f"{m['default']:.4f}", f"{m['int8']:.4f}",
                 f"{m['default'] / m['int8']:.2f}"])

    m = interleaved_medians({"float": lite_fn(content=float_tflite()),
                             "int8": lite_fn(model_path(out / "arm-cpu", "tflite-int8"))})
    rows.append(["LiteRT XNNPACK", "fp32", f"{m['float']:.4f}", f"{m['int8']:.4f}", f"{m['float'] / m['int8']:.2f}"])
    data = write_result(args.json, "int8 vs float, raw runtime, 1 thread (median ms per inference)",
                        ["runtime", "float precision used", "float ms", "int8 ms", "speed-up"], rows,
                        ["digits CNN (32x32x1) is tiny: per-call overhead dominates, so int8 gains are small; "
                         "on large models the gap is larger"])
    print_table(data)


if __name__ == "__main__":
    main()
