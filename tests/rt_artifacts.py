"""Hand-built artifacts for the runtime tests (the converters are tested elsewhere).

Every model here is real and tiny: a float ONNX graph built with ``onnx.helper``, its int8
QDQ version from ONNX Runtime's ``quantize_static``, an OpenVINO IR converted from the QDQ
model, and two full-integer TFLite models (uint8 I/O for the Edge TPU profile, float I/O for
ARM) from a tiny Keras model via ``tf.lite.TFLiteConverter``. Manifests embed the real
built-in profiles so that chain walking is real.

All models share one contract: input ``input`` float ``[1, 8, 8, 3]`` (NHWC), output
``logits`` ``[1, 4]``.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np

from edge_sdk.manifest import (Manifest, Preprocessing, ProfileRef, Quantization, SourceInfo, TensorSpec,
                               file_entry, preprocessing_hash, write_manifest)
from edge_sdk.profiles import resolve_profile

IN_SHAPE = [1, 8, 8, 3]
OUT_SHAPE = [1, 4]
PREPROCESS = {"size": [8, 8], "resize": "stretch", "layout": "NHWC", "color": "RGB", "scale": 1 / 255,
              "mean": [0.5], "std": [0.25], "pad_value": 114, "dtype": "float32", "input": "input"}


def sample_inputs(n: int, seed: int = 0, shape=IN_SHAPE) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.0, 1.0, size=shape).astype(np.float32) for _ in range(n)]


def build_float_onnx(path: Path, *, hw: int = 8, channels: int = 4, blocks: int = 1, seed: int = 0) -> Path:
    """NHWC input -> Transpose -> (Conv 3x3 + Relu) x blocks -> GlobalAveragePool -> Gemm -> logits."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Transpose", ["input"], ["x_nchw"], perm=[0, 3, 1, 2])]
    inits = []
    prev, cin = "x_nchw", 3
    for b in range(blocks):
        w = rng.normal(0, 0.5, size=(channels, cin, 3, 3)).astype(np.float32)
        bias = rng.normal(0, 0.1, size=(channels,)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{b}"), numpy_helper.from_array(bias, f"b{b}")]
        nodes += [helper.make_node("Conv", [prev, f"w{b}", f"b{b}"], [f"c{b}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{b}"], [f"r{b}"])]
        prev, cin = f"r{b}", channels
    fw = rng.normal(0, 0.5, size=(channels, 4)).astype(np.float32)
    fb = rng.normal(0, 0.1, size=(4,)).astype(np.float32)
    inits += [numpy_helper.from_array(fw, "fw"), numpy_helper.from_array(fb, "fb")]
    nodes += [helper.make_node("GlobalAveragePool", [prev], ["gap"]),
              helper.make_node("Flatten", ["gap"], ["flat"], axis=1),
              helper.make_node("Gemm", ["flat", "fw", "fb"], ["logits"])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, hw, hw, 3])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, OUT_SHAPE)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="edge-sdk-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def build_qdq_onnx(float_path: Path, path: Path, *, hw: int = 8) -> Path:
    """Int8 QDQ ONNX via onnxruntime.quantization.quantize_static (per-channel, symmetric weights)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self._it = iter({"input": x} for x in sample_inputs(16, seed=1, shape=[1, hw, hw, 3]))

        def get_next(self):
            return next(self._it, None)

    quantize_static(str(float_path), str(path), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    extra_options={"ActivationSymmetric": True})
    return path


def build_openvino_ir(onnx_path: Path, xml_path: Path) -> Path:
    """OpenVINO IR (int8 from the QDQ nodes) via openvino.convert_model + save_model."""
    import openvino as ov

    ov.save_model(ov.convert_model(str(onnx_path)), str(xml_path), compress_to_fp16=False)
    return xml_path


def build_tflite_pair(folder: Path, *, hw: int = 8, channels: int = 4, blocks: int = 1) -> tuple[Path, Path]:
    """Full-integer TFLite models from one tiny Keras model: (uint8 I/O, float I/O)."""
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    inp = tf.keras.Input(shape=[hw, hw, 3], batch_size=1, name="input")
    x = inp
    for _ in range(blocks):
        x = tf.keras.layers.Conv2D(channels, 3, padding="same", activation="relu")(x)
    x = tf.keras.layers.GlobalAveragePooling2D()(x)
    out = tf.keras.layers.Dense(4, name="logits")(x)
    model = tf.keras.Model(inp, out)

    def rep():
        for x in sample_inputs(16, seed=1, shape=[1, hw, hw, 3]):
            yield [x]

    paths = []
    for name, io_type in (("model_uint8.tflite", tf.uint8), ("model_int8_float_io.tflite", None)):
        conv = tf.lite.TFLiteConverter.from_keras_model(model)
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.representative_dataset = rep
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        if io_type is not None:
            conv.inference_input_type = io_type
            conv.inference_output_type = io_type
        p = folder / name
        p.write_bytes(conv.convert())
        paths.append(p)
    return paths[0], paths[1]


def tflite_io_specs(path: Path) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """Manifest specs (named ``input``/``logits``) from a TFLite file, with its quantization."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(path))

    def spec(d, name):
        dt = np.dtype(d["dtype"]).name
        scale, zp = d["quantization"]
        q = Quantization(float(scale), int(zp), dt) if dt in ("int8", "uint8") and scale else None
        return TensorSpec(name, [int(s) for s in d["shape"]], dt, q, "NHWC" if name == "input" else "")

    return [spec(it.get_input_details()[0], "input")], [spec(it.get_output_details()[0], "logits")]


FLOAT_IO = ([TensorSpec("input", IN_SHAPE, "float32", None, "NHWC")], [TensorSpec("logits", OUT_SHAPE, "float32")])


def write_artifact(folder: Path, profile: str, files: list[tuple[Path, str, str, str]], inputs, outputs,
                   preprocess: dict | None = None, backend_options: dict | None = None) -> Path:
    """Copy files into ``folder`` and write a manifest embedding the built-in ``profile``.

    Args:
        files: (source path, name in folder, format, role).
    """
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for src, name, fmt, role in files:
        shutil.copyfile(src, folder / name)
        entries.append(file_entry(folder, name, fmt=fmt, precision="int8", role=role))
    prof = resolve_profile(profile)
    src_sha = hashlib.sha256(files[0][0].read_bytes()).hexdigest()
    manifest = Manifest(profile=ProfileRef(prof.name, prof.sha256, prof.to_dict()),
                        source=SourceInfo("tiny.onnx", "onnx", src_sha), artifacts=entries,
                        inputs=inputs, outputs=outputs,
                        preprocessing=Preprocessing(preprocess, preprocessing_hash(preprocess)),
                        backend_options=backend_options or {})
    write_manifest(folder, manifest)
    return folder


def build_onnx_family(work: Path, root: Path, *, hw: int = 8, channels: int = 4, blocks: int = 1) -> dict[str, Path]:
    """The ONNX/OpenVINO artifacts (no TensorFlow): jetson, intel-cpu, intel-npu."""
    work.mkdir(parents=True, exist_ok=True)
    f = build_float_onnx(work / "float.onnx", hw=hw, channels=channels, blocks=blocks)
    q = build_qdq_onnx(f, work / "qdq.onnx", hw=hw)
    xml = build_openvino_ir(q, work / "model.xml")
    ins = [TensorSpec("input", [1, hw, hw, 3], "float32", None, "NHWC")]
    outs = FLOAT_IO[1]
    pre = dict(PREPROCESS, size=[hw, hw])
    out = {"float_onnx": f, "qdq_onnx": q}
    out["jetson-orin"] = write_artifact(root / "jetson-orin", "jetson-orin", [(q, "model.onnx", "onnx-qdq", "model")], ins, outs)
    ir_files = [(xml, "model.xml", "openvino-ir", "model"), (xml.with_suffix(".bin"), "model.bin", "openvino-ir", "weights")]
    out["intel-cpu"] = write_artifact(root / "intel-cpu", "intel-cpu", ir_files, ins, outs, pre)
    out["intel-npu"] = write_artifact(root / "intel-npu", "intel-npu", ir_files, ins, outs, pre)
    return out


def build_tflite_family(work: Path, root: Path, qdq_onnx: Path, **size) -> dict[str, Path]:
    """The TFLite artifacts (TensorFlow at build time only): coral-edgetpu and arm-cpu.

    ``size`` (hw, channels, blocks) must match the one ``qdq_onnx`` was built with.
    """
    work.mkdir(parents=True, exist_ok=True)
    u8, f_io = build_tflite_pair(work, **size)
    ins, outs = tflite_io_specs(u8)
    out = {"tflite_uint8": u8, "tflite_float_io": f_io}
    out["coral-edgetpu"] = write_artifact(root / "coral-edgetpu", "coral-edgetpu",
                                          [(u8, "model.tflite", "tflite-int8", "model")], ins, outs)
    fi, fo = tflite_io_specs(f_io)
    out["arm-cpu"] = write_artifact(root / "arm-cpu", "arm-cpu", [(f_io, "model.tflite", "tflite-int8", "model"),
                                                                  (qdq_onnx, "model.onnx", "onnx-qdq", "model")], fi, fo)
    return out


# --------------------------------------------------------------------- session-wide builds
_BUILT: dict[str, dict[str, Path]] = {}


def onnx_artifacts(tmp_path_factory) -> dict[str, Path]:
    """Build the ONNX/OpenVINO artifacts once per test session (shared by every runtime test module)."""
    if "onnx" not in _BUILT:
        base = tmp_path_factory.mktemp("rt_onnx")
        _BUILT["onnx"] = build_onnx_family(base / "work", base / "artifacts")
    return _BUILT["onnx"]


def tflite_artifacts(tmp_path_factory) -> dict[str, Path]:
    """Build the TFLite artifacts (TensorFlow) once per test session; includes the ONNX ones."""
    if "tflite" not in _BUILT:
        onnx = onnx_artifacts(tmp_path_factory)
        base = tmp_path_factory.mktemp("rt_tflite")
        _BUILT["tflite"] = {**onnx, **build_tflite_family(base / "work", base / "artifacts", onnx["qdq_onnx"])}
    return _BUILT["tflite"]


def load_quiet(folder, **kw):
    """``edge_sdk.load`` with its fallback/gate warnings silenced (the tests assert on what they check)."""
    import warnings

    import edge_sdk

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return edge_sdk.load(folder, **kw)


def copy_artifact(src: Path, dst: Path) -> Path:
    """A private copy of an artifact folder that a test may damage."""
    shutil.copytree(src, dst)
    return dst
