import json
import os

import pytest

from edge_sdk.errors import ManifestError
from edge_sdk.manifest import (Manifest, ProfileRef, Quantization, SourceInfo, TensorSpec, file_entry,
                               find_profile_folders, read_manifest, write_manifest)
from edge_sdk.profiles import resolve_profile


def make_artifact(folder, payload=b"model-bytes" * 100):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.onnx").write_bytes(payload)
    prof = resolve_profile("jetson")
    m = Manifest(
        profile=ProfileRef(prof.name, prof.sha256, prof.to_dict()),
        source=SourceInfo("src.onnx", "onnx", "0" * 64),
        artifacts=[file_entry(folder, "model.onnx", fmt="onnx-qdq", precision="int8")],
        inputs=[TensorSpec("x", [1, 3, 8, 8], "float32")],
        outputs=[TensorSpec("y", [1, 10], "int8", Quantization(0.1, -3))],
        tools={"onnxruntime": "1.23.0"},
    )
    write_manifest(folder, m)
    return m


def test_round_trip(tmp_path):
    m = make_artifact(tmp_path / "a")
    back = read_manifest(tmp_path / "a")
    assert back.to_dict() == m.to_dict()
    assert back.outputs[0].quantization.scale == pytest.approx(0.1)
    assert back.created_at and back.schema_version == 1
    assert read_manifest(tmp_path / "a" / "manifest.json").profile.name == "jetson-orin"


def test_one_changed_byte_is_detected(tmp_path):
    make_artifact(tmp_path / "a")
    f = tmp_path / "a" / "model.onnx"
    data = bytearray(f.read_bytes())
    data[500] ^= 0x01
    f.write_bytes(bytes(data))
    with pytest.raises(ManifestError, match="sha256"):
        read_manifest(tmp_path / "a")
    read_manifest(tmp_path / "a", verify=False)  # explicit development opt-out


def test_truncation_is_detected(tmp_path):
    make_artifact(tmp_path / "a")
    f = tmp_path / "a" / "model.onnx"
    f.write_bytes(f.read_bytes()[:-10])
    with pytest.raises(ManifestError, match="truncated"):
        read_manifest(tmp_path / "a")


@pytest.mark.parametrize("bad", ["../outside.bin", "/etc/passwd", "sub/../../x", "..\\x"])
def test_path_traversal_refused(tmp_path, bad):
    make_artifact(tmp_path / "a")
    mpath = tmp_path / "a" / "manifest.json"
    data = json.loads(mpath.read_text())
    data["artifacts"][0]["path"] = bad
    mpath.write_text(json.dumps(data))
    (tmp_path / "outside.bin").write_bytes(b"x")
    with pytest.raises(ManifestError, match="leaves the artifact folder"):
        read_manifest(tmp_path / "a")


def test_symlink_refused(tmp_path):
    make_artifact(tmp_path / "a")
    target = tmp_path / "elsewhere.onnx"
    os.replace(tmp_path / "a" / "model.onnx", target)
    os.symlink(target, tmp_path / "a" / "model.onnx")
    with pytest.raises(ManifestError, match="symbolic link"):
        read_manifest(tmp_path / "a")


def test_malformed_manifests(tmp_path):
    make_artifact(tmp_path / "a")
    mpath = tmp_path / "a" / "manifest.json"
    good = json.loads(mpath.read_text())
    mpath.write_text("{not json")
    with pytest.raises(ManifestError, match="not valid JSON"):
        read_manifest(tmp_path / "a")
    for mutate, match in [
        (lambda d: d.update(schema_version=99), "schema_version"),
        (lambda d: d.update(surprise=1), "unknown key"),
        (lambda d: d["inputs"][0].update(shape=[-1, 3, 8, 8]), "non-static"),
        (lambda d: d["outputs"][0].update(dtype="complex64"), "invalid value"),
        (lambda d: d.pop("artifacts"), "required key"),
    ]:
        d = json.loads(json.dumps(good))
        mutate(d)
        mpath.write_text(json.dumps(d))
        with pytest.raises(ManifestError, match=match):
            read_manifest(tmp_path / "a")


def test_missing_folder_and_manifest(tmp_path):
    with pytest.raises(ManifestError, match="not found"):
        read_manifest(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ManifestError, match="No manifest.json"):
        read_manifest(tmp_path / "empty")


def test_missing_listed_file(tmp_path):
    make_artifact(tmp_path / "a")
    (tmp_path / "a" / "model.onnx").unlink()
    with pytest.raises(ManifestError, match="missing"):
        read_manifest(tmp_path / "a")


def test_find_profile_folders(tmp_path):
    make_artifact(tmp_path / "out" / "jetson-orin")
    (tmp_path / "out" / ".partial").mkdir()
    assert list(find_profile_folders(tmp_path / "out")) == ["jetson-orin"]
