"""`edge-sdk convert` end to end on real ONNX models: artifacts, manifests, the accuracy gate, doing no harm.

The "must show" case: a two-input, two-output ONNX graph with a dynamic batch and a dynamic
spatial dim, converted with ``--input-shape`` for intel-cpu, intel-npu and jetson-orin.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import edge_sdk
from edge_sdk.converters.base import FORMATS
from edge_sdk.errors import (AccuracyGateError, CalibrationError, InputValidationError, ModelLoadError, ProfileError)
from edge_sdk.manifest import read_manifest

from models import onnx_cnn, two_io_feeds, two_io_onnx, write_constant_images, write_dim_images, write_image_folder, write_npz

pytestmark = pytest.mark.slow
REPO_PROFILES = Path(__file__).resolve().parents[1] / "device_profiles"
MUST_SHOW = ("intel-cpu", "intel-npu", "jetson-orin")
CPU = {"onnx-qdq": ("onnxruntime", "CPUExecutionProvider"), "openvino-ir": ("openvino", "CPU")}


@pytest.fixture(scope="session")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("convert_onnx")
    return {
        "root": root,
        "two": two_io_onnx(root / "two_io.onnx"),
        "two_npz": write_npz(root / "two_io_calib.npz", two_io_feeds(120)),
        "cnn": onnx_cnn(root / "cnn.onnx"),
        "images": write_image_folder(root / "images", n=120),
        "val": write_image_folder(root / "val", n=40, seed=77),
        "const": write_constant_images(root / "const", n=40),
        "dim": write_dim_images(root / "dim", n=40),
    }


@pytest.fixture(scope="session")
def must_show(data):
    from conftest import run_cli

    out = data["root"] / "must_show"
    proc = run_cli("convert", str(data["two"]), *[a for p in MUST_SHOW for a in ("--profile", p)], "--out", str(out),
                   "--calib", str(data["two_npz"]), "--input-shape", "image:1,3,24,16", "--json")
    return proc, out


def test_must_show_cli_writes_three_verified_artifacts(must_show):
    proc, out = must_show
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)  # stdout holds only the JSON summary
    assert summary["ok"] and [p["profile"] for p in summary["profiles"]] == list(MUST_SHOW)
    for name in MUST_SHOW:
        assert f"[{name}]" in proc.stderr and "accuracy gate" in proc.stderr  # progress per profile and stage
        m = read_manifest(out / name, verify=True)  # every file's sha256 checks out
        assert m.profile.name == name and m.profile.spec["name"] == name
        assert {t.name: t.shape for t in m.inputs} == {"image": [1, 3, 24, 16], "aux": [1, 4]}
        assert {t.name: t.shape for t in m.outputs} == {"logits": [1, 5], "features": [1, 8, 24, 16]}
        assert m.static_shapes["source_inputs"]["image"] == [-1, 3, -1, 16]
        assert m.static_shapes["batch_size"] == 1 and "aux" in m.static_shapes["batch_fixed_to_profile"]
        assert all(a.precision == "int8" and len(a.sha256) == 64 for a in m.artifacts)
        assert m.accuracy["gate"] == "passed" and m.accuracy["meaningful"] is True
        for report in m.accuracy["formats"].values():
            for metrics in report["outputs"].values():
                assert metrics["cosine"] >= 0.98 and metrics["sqnr_db"] >= 15.0 and metrics["max_abs_err"] >= 0
        assert m.calibration["calibration_samples"] == 96 and m.calibration["holdout_samples"] == 24
        assert (out / name).stat().st_mode & 0o055 == (0o755 & ~_umask()) & 0o055  # not mkdtemp's 0700
    npu = read_manifest(out / "intel-npu").accuracy["formats"]["openvino-ir"]
    assert npu["device"] == "CPU" and npu["native"] is False  # the gate says it ran on a CPU stand-in


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_must_show_graphs_are_int8(must_show):
    import onnx
    import openvino as ov

    _, out = must_show
    q = onnx.load(str(out / "jetson-orin" / "model.onnx"))
    ops = [n.op_type for n in q.graph.node]
    assert ops.count("QuantizeLinear") >= 3 and ops.count("DequantizeLinear") >= 5
    assert any(i.data_type == onnx.TensorProto.INT8 for i in q.graph.initializer)
    assert next(o.version for o in q.opset_import if o.domain in ("", "ai.onnx")) == 17  # upgraded from 12
    for name in ("intel-cpu", "intel-npu"):
        model = ov.Core().read_model(str(out / name / "model.xml"))
        assert sum(op.get_type_name() == "FakeQuantize" for op in model.get_ops()) >= 3
        assert all(p.get_partial_shape().is_static for p in list(model.inputs) + list(model.outputs))
    # x86 CPUs without VNNI saturate full-range int8 products: intel-cpu's weights use half the range
    # (NNCF's overflow fix on every layer), so its numbers are the same on every x86 CPU; the NPU's are not cut.
    model = ov.Core().read_model(str(out / "intel-cpu" / "model.xml"))
    weights = [np.asarray(op.get_data()) for op in model.get_ops()
               if op.get_type_name() == "Constant" and op.get_output_element_type(0).get_type_name() == "i8"]
    assert weights and max(int(np.abs(w.astype(np.int32)).max()) for w in weights) <= 64
    assert read_manifest(out / "intel-cpu").backend_options["openvino"]["nncf_overflow_fix"] == "enable"
    assert read_manifest(out / "intel-npu").backend_options["openvino"]["nncf_overflow_fix"] == "default"


def test_must_show_artifacts_run_close_to_the_float_model(must_show, data):
    import onnxruntime as ort

    _, out = must_show
    feeds = two_io_feeds(12, seed=4321)  # fresh samples, not the calibration set
    ref = ort.InferenceSession(str(data["two"]), providers=["CPUExecutionProvider"])
    for name in MUST_SHOW:
        m = read_manifest(out / name)
        backend, device = CPU[m.formats[0]]
        model = edge_sdk.load(out / name, backend=backend, device=device)
        try:
            for i in range(12):
                feed = {k: v[i:i + 1] for k, v in feeds.items()}
                want = dict(zip(["logits", "features"], ref.run(["logits", "features"], feed)))
                got = model.infer(feed).outputs
                for k in want:
                    a, b = want[k].ravel(), got[k].ravel()
                    assert np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b) > 0.97, (name, k)
        finally:
            model.close()


def test_jetson_manifest_says_how_to_build_the_engine(must_show):
    _, out = must_show
    m = read_manifest(out / "jetson-orin")
    trt = m.backend_options["tensorrt"]
    assert trt["trtexec"].startswith("trtexec --onnx=model.onnx --int8 --fp16 --saveEngine=")
    assert "build_serialized_network" in trt["python"]
    assert m.backend_options["onnx_qdq"]["activation_symmetric"] is True
    assert any("tensorrt is not importable" in w for w in m.warnings)


def test_constant_calibration_is_refused_before_anything_converts(data, tmp_path):
    from conftest import run_cli

    out = tmp_path / "out"
    proc = run_cli("convert", str(data["cnn"]), "--profile", "jetson-orin", "--profile", "intel-cpu", "--out", str(out),
                   "--calib", str(data["const"]), "--val", str(data["val"]), "--json", "--recover", "off")
    assert proc.returncode == 6, proc.stderr[-2000:]
    assert "input 'image' is the same in all 40 sample(s)" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists() or not any(out.iterdir())


def test_gate_fails_on_unrepresentative_calibration_and_writes_nothing(data, tmp_path):
    from conftest import run_cli

    out = tmp_path / "out"
    proc = run_cli("convert", str(data["cnn"]), "--profile", "jetson-orin", "--profile", "intel-cpu", "--out", str(out),
                   "--calib", str(data["dim"]), "--val", str(data["val"]), "--json", "--recover", "off")
    assert proc.returncode == 7, proc.stderr[-2000:]
    assert "Accuracy gate failed" in proc.stderr and "top-1 agreement" in proc.stderr and "Traceback" not in proc.stderr
    report = json.loads(proc.stdout)
    assert not report["ok"] and all(p["gate"] == "failed" and not p["published"] for p in report["profiles"])
    # nothing published, nothing half-written: only the rejected candidates, kept aside for inspection
    assert sorted(p.name for p in out.iterdir()) == [".rejected"]
    assert sorted(p.name for p in (out / ".rejected").iterdir()) == ["intel-cpu", "jetson-orin"]
    assert all(p["rejected"] for p in report["profiles"])


def test_gate_passes_on_good_calibration_with_the_same_validation(data, tmp_path):
    s = edge_sdk.convert(data["cnn"], ["jetson-orin", "intel-cpu"], tmp_path / "out", calib=data["images"],
                         validation=data["val"], progress=None)
    assert [p.gate for p in s.profiles] == ["passed", "passed"]
    for p in s.profiles:
        m = read_manifest(p.folder)
        assert m.preprocessing.spec["layout"] == "NHWC" and len(m.preprocessing.sha256) == 64
        top1 = next(iter(next(iter(m.accuracy["formats"].values()))["outputs"].values()))["top1_agreement"]
        assert top1 >= 0.9


def test_allow_accuracy_drop_publishes_and_records_the_failure(data, tmp_path):
    s = edge_sdk.convert(data["cnn"], "jetson-orin", tmp_path / "out", calib=data["dim"], validation=data["val"],
                         allow_accuracy_drop=True, recover="off", progress=None)
    m = read_manifest(tmp_path / "out" / "jetson-orin")
    assert s.profiles[0].gate == "failed" and s.profiles[0].published
    assert m.accuracy["gate"] == "failed" and m.accuracy["formats"]["onnx-qdq"]["failures"]
    assert any("allow-accuracy-drop" in w for w in m.warnings)


def test_random_calibration_is_marked_not_meaningful(data, tmp_path):
    s = edge_sdk.convert(data["two"], "jetson-orin", tmp_path / "out", calib="random", calib_count=10,
                         input_shapes=["image:1,3,8,16"], progress=None)
    m = read_manifest(tmp_path / "out" / "jetson-orin")
    assert s.profiles[0].gate == "not_meaningful"
    assert m.calibration["calibrated"] is False and m.accuracy["meaningful"] is False
    assert any("random" in w for w in m.warnings)


def test_existing_folder_needs_force_and_force_replaces(data, tmp_path):
    out = tmp_path / "out"
    (out / "jetson-orin").mkdir(parents=True)
    keep = out / "jetson-orin" / "mine.txt"
    keep.write_text("user data")
    with pytest.raises(InputValidationError, match="already exist") as err:
        edge_sdk.convert(data["two"], "jetson-orin", out, calib=data["two_npz"], input_shapes={"image": [1, 3, 24, 16]},
                         progress=None)
    assert "--force" in err.value.hint and keep.read_text() == "user data"
    edge_sdk.convert(data["two"], "jetson", out, calib=data["two_npz"], input_shapes={"image": [1, 3, 24, 16]},
                     force=True, progress=None)
    assert not keep.exists() and read_manifest(out / "jetson-orin").profile.name == "jetson-orin"
    assert sorted(p.name for p in out.iterdir()) == ["jetson-orin"]  # no staging or backup folder left


def test_interrupted_conversion_leaves_nothing(data, tmp_path, monkeypatch):
    def interrupted(job):
        (job.workdir / "model.onnx").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setitem(FORMATS._entries, "onnx-qdq", interrupted)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        edge_sdk.convert(data["two"], "jetson-orin", out, calib=data["two_npz"], input_shapes={"image": [1, 3, 24, 16]},
                         progress=None)
    assert not out.exists()


@pytest.mark.parametrize("case", ["corrupt_model", "missing_model", "unknown_profile", "no_calib", "dynamic_dims"])
def test_bad_input_is_one_clear_error_and_nothing_written(data, tmp_path, case):
    model, profile, kwargs = data["two"], "jetson-orin", {"calib": data["two_npz"], "input_shapes": {"image": [1, 3, 24, 16]}}
    expected = {"corrupt_model": ModelLoadError, "missing_model": ModelLoadError, "unknown_profile": ProfileError,
                "no_calib": CalibrationError, "dynamic_dims": InputValidationError}[case]
    if case == "corrupt_model":
        model = tmp_path / "bad.onnx"
        model.write_bytes(b"\x08\x07garbage that is not a protobuf model")
    elif case == "missing_model":
        model = tmp_path / "missing.onnx"
    elif case == "unknown_profile":
        profile = "jetson-nano-9000"
    elif case == "no_calib":
        kwargs["calib"] = None
    else:
        kwargs["input_shapes"] = None
    with pytest.raises(expected) as err:
        edge_sdk.convert(model, profile, tmp_path / "out", progress=None, **kwargs)
    assert err.value.message and err.value.hint
    assert not (tmp_path / "out").exists()


def test_cli_error_has_no_traceback_and_the_right_exit_code(data, tmp_path):
    from conftest import run_cli

    proc = run_cli("convert", str(data["two"]), "--profile", "intel-cpu", "--out", str(tmp_path / "o"),
                   "--calib", str(data["two_npz"]))
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert "--input-shape image:1,3,<size>,16" in proc.stderr
    assert not (tmp_path / "o").exists()


def test_nncf_accuracy_control_uses_the_validation_function(data, tmp_path):
    import onnxruntime as ort

    ref = ort.InferenceSession(str(data["two"]), providers=["CPUExecutionProvider"])
    calls = []

    def validate(compiled, items):
        calls.append(1)
        agree = [np.argmax(compiled(item)["logits"]) == np.argmax(ref.run(["logits"], item)[0]) for item in items]
        return float(np.mean(agree))

    s = edge_sdk.convert(data["two"], "intel-cpu", tmp_path / "out", calib=data["two_npz"],
                         input_shapes={"image": [1, 3, 24, 16]}, validation_fn=validate, progress=None)
    m = read_manifest(tmp_path / "out" / "intel-cpu")
    assert calls and s.profiles[0].gate == "passed"
    assert m.backend_options["openvino"]["nncf_mode"] == "accuracy-control"
    assert m.backend_options["openvino"]["nncf_subset_size"] == 96  # the real count, not NNCF's default 300


def test_an_op_the_tools_cannot_run_is_one_clear_error(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    from edge_sdk.errors import ConversionError

    node = helper.make_node("FancyWarp", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    onnx.save(model, str(tmp_path / "custom.onnx"))
    np.save(tmp_path / "x.npy", np.random.default_rng(0).uniform(0, 1, (4, 4)).astype(np.float32))
    with pytest.raises((ConversionError, ModelLoadError)) as err:
        edge_sdk.convert(tmp_path / "custom.onnx", "intel-cpu", tmp_path / "out", calib=tmp_path / "x.npy", progress=None)
    assert "FancyWarp" in err.value.message or "com.example" in err.value.message, err.value.message
    assert not (tmp_path / "out").exists()


def test_a_profile_asking_for_a_format_convert_cannot_make_fails_first(data, tmp_path):
    from edge_sdk.errors import ConversionError

    text = (REPO_PROFILES / "jetson-orin.toml").read_text().replace('formats = ["onnx-qdq"]', 'formats = ["onnx-qdq", "tensorrt-engine"]')
    text = text.replace('name = "jetson-orin"', 'name = "my-orin"')
    custom = tmp_path / "my-orin.toml"
    custom.write_text(text)
    with pytest.raises(ConversionError, match="tensorrt-engine") as err:
        edge_sdk.convert(data["two"], str(custom), tmp_path / "out", calib=data["two_npz"], progress=None)
    assert "onnx-qdq" in err.value.hint and not (tmp_path / "out").exists()
