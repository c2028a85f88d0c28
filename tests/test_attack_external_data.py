"""ONNX external data never reads bytes the manifest does not cover (issue 43, finding 1).

The audit rewrote one initializer of a jetson artifact's ``model.onnx`` as
``data_location: EXTERNAL, location: /etc/passwd`` (or ``../..``, a link, an unlisted ``w.bin``),
rehashed the model file, and ONNX Runtime read those bytes: ``verify`` said OK, ``sign`` signed
it, ``load`` with trusted keys ran it, and replacing an unlisted ``w.bin`` after signing went
unnoticed. One generator per way out; each case is first shown to load in plain ONNX Runtime
(the hole is real, not a broken file), then refused by ``load``, ``verify`` (both ways), ``sign``
and ``run``. The one honest form - the data file listed and hashed - loads, matches the embedded
model's outputs, and is refused once its bytes change.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge_sdk.errors import ManifestError, ModelLoadError
from edge_sdk.onnx_wire import WireError, external_refs
from edge_sdk.signing import generate_keypair, sign_artifact

import rt_artifacts as ra

pytestmark = pytest.mark.usefixtures("isolated")  # tests/conftest.py


@pytest.fixture(scope="module")
def arts(tmp_path_factory):
    return ra.onnx_artifacts(tmp_path_factory)


def set_external_data(t, location: str, offset: int | None = None, length: int | None = None) -> None:
    """Point tensor ``t`` at ``location`` (onnx's own helper insists on raw_data being present)."""
    del t.external_data[:]
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            entry = t.external_data.add()
            entry.key, entry.value = key, str(value)
    t.data_location = TensorProto.EXTERNAL


load = ra.load_quiet

def externalize(qdq: Path, model_out: Path, location: str, payload: Path) -> str:
    """Move the largest initializer of ``qdq`` into ``payload`` and save the model, naming it ``location``.

    Returns the tensor's name.
    """
    m = onnx.load(str(qdq))
    t = max(m.graph.initializer, key=lambda i: len(i.raw_data) or np.prod(i.dims))
    arr = numpy_helper.to_array(t)
    payload.write_bytes(arr.tobytes())
    name = t.name
    t.ClearField("raw_data")
    for f in ("float_data", "int32_data", "int64_data"):
        t.ClearField(f)
    set_external_data(t, location, offset=0, length=arr.nbytes)
    t.data_location = TensorProto.EXTERNAL
    onnx.save(m, str(model_out))
    return name


def artifact(arts, tmp_path: Path, location: str, *, list_data: bool) -> tuple[Path, Path]:
    """A jetson artifact whose model reads one initializer from ``location`` (the payload written
    where that location resolves for the attack, or as ``w.bin`` in the folder when listed)."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    model = work / "model.onnx"
    payload = work / "w.bin"
    externalize(arts["qdq_onnx"], model, location, payload)
    files = [(model, "model.onnx", "onnx-qdq", "model")]
    if list_data:
        files.append((payload, location, "onnx-qdq", "data"))
    ins, outs = [ra.TensorSpec("input", [1, 8, 8, 3], "float32", None, "NHWC")], ra.FLOAT_IO[1]
    return ra.write_artifact(tmp_path / "art", "jetson-orin", files, ins, outs), payload


def place(folder: Path, payload: Path, how: str, tmp_path: Path) -> str:
    """Put the payload where the attack's location points; returns that location."""
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    shutil.copyfile(payload, outside / "w.bin")
    if how == "absolute":
        return str(outside / "w.bin")
    if how == "dotdot":
        return "../outside/w.bin"
    if how == "unlisted":
        shutil.copyfile(payload, folder / "w.bin")
        return "w.bin"
    if how == "link":
        (folder / "w.bin").symlink_to(outside / "w.bin")
        return "w.bin"
    if how == "linked-dir":
        (folder / "d").symlink_to(outside)
        return "d/w.bin"
    raise AssertionError(how)


def attack(arts, tmp_path: Path, how: str) -> Path:
    """An artifact whose model.onnx (hashed in the manifest) reads its weights through ``how``."""
    probe = tmp_path / "probe"
    probe.mkdir()
    externalize(arts["qdq_onnx"], probe / "m.onnx", "w.bin", probe / "w.bin")
    folder = ra.copy_artifact(arts["jetson-orin"], tmp_path / "art")
    location = place(folder, probe / "w.bin", how, tmp_path)
    externalize(arts["qdq_onnx"], folder / "model.onnx", location, probe / "unused.bin")
    from hardening_corpus import rehash

    rehash(folder, "model.onnx")
    return folder


ATTACKS = {"absolute": "outside the artifact folder", "dotdot": "outside the artifact folder",
           "unlisted": "does not list", "link": "symbolic link", "linked-dir": "symbolic link"}


@pytest.mark.parametrize("how", sorted(ATTACKS))
def test_every_way_out_is_refused_by_load_verify_sign_and_run(arts, tmp_path, how, cli, npy):
    import onnxruntime as ort

    folder = attack(arts, tmp_path, how)
    # The hole is real: ONNX Runtime alone follows the reference and runs the model.
    sess = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    assert sess.run(None, {"input": ra.sample_inputs(1)[0]})[0].shape == tuple(ra.OUT_SHAPE)
    for kw in ({}, {"verify": False}):
        with pytest.raises(ManifestError, match=ATTACKS[how]):
            load(folder, **kw)
    priv, pub = generate_keypair(tmp_path / "owner")
    with pytest.raises(ManifestError, match=ATTACKS[how]):
        sign_artifact(folder, priv)
    assert not (folder / "manifest.sig").exists()
    env = {"EDGE_SDK_CONFIG": str(tmp_path / "no-config.toml")}
    for args in (["verify", str(folder)], ["verify", str(folder), "--no-load"], ["run", str(folder), "--input", str(npy)]):
        r = cli(*args, env=env)
        assert r.returncode == 4, (args, r.stdout, r.stderr)
        assert ATTACKS[how] in r.stdout + r.stderr and "Traceback" not in r.stderr


def test_a_listed_hashed_data_file_loads_and_is_covered_by_hash_and_signature(arts, tmp_path):
    folder, _ = artifact(arts, tmp_path, "w.bin", list_data=True)
    x = ra.sample_inputs(2, seed=3)
    with load(arts["jetson-orin"]) as ref, load(folder) as m:
        for xi in x:
            np.testing.assert_array_equal(m.infer({"input": xi}, raw=True)["logits"], ref.infer({"input": xi}, raw=True)["logits"])
    priv, pub = generate_keypair(tmp_path / "owner")
    sign_artifact(folder, priv)
    load(folder, trusted_keys=[pub]).close()
    data = bytearray((folder / "w.bin").read_bytes())
    data[0] ^= 0x40
    (folder / "w.bin").write_bytes(bytes(data))  # replaced after signing: the hash sees it
    with pytest.raises(ManifestError, match="'w.bin' does not match its sha256"):
        load(folder, trusted_keys=[pub])


def test_a_span_past_the_listed_file_is_refused(arts, tmp_path):
    folder, _ = artifact(arts, tmp_path, "w.bin", list_data=True)
    m = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    t = next(i for i in m.graph.initializer if i.data_location == TensorProto.EXTERNAL)
    size = (folder / "w.bin").stat().st_size
    set_external_data(t, "w.bin", offset=size - 4, length=64)
    onnx.save(m, str(folder / "model.onnx"))
    from hardening_corpus import rehash

    rehash(folder, "model.onnx")
    with pytest.raises(ManifestError, match=f"which has {size}"):
        load(folder)


def _tensor(name, location):
    t = numpy_helper.from_array(np.ones(4, np.float32), name)
    if location is not None:
        t.ClearField("raw_data")
        set_external_data(t, location)
        t.data_location = TensorProto.EXTERNAL
    return t


def test_the_reader_finds_references_wherever_a_tensor_can_sit():
    """Initializer, sparse initializer, a Constant in an If branch inside a Loop body, a function
    body, an attribute default: the same references onnx's own walk finds."""
    const = helper.make_node("Constant", [], ["t"], value=_tensor("in_then", "/a"))
    then_g = helper.make_graph([const], "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, [4])])
    else_g = helper.make_graph([helper.make_node("Constant", [], ["t2"], value=_tensor("in_else", None))], "else", [],
                               [helper.make_tensor_value_info("t2", TensorProto.FLOAT, [4])])
    body = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)], "body", [],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    loop = helper.make_node("Loop", ["n", "c"], ["o"], body=body)
    sparse = helper.make_sparse_tensor(_tensor("sv", "../b"), numpy_helper.from_array(np.arange(4, dtype=np.int64), "si"),
                                       [8])
    fn = helper.make_function("d", "F", ["x"], ["z"], [helper.make_node("Constant", [], ["z"], value=_tensor("in_fn", "c"))],
                              [helper.make_opsetid("", 17)])
    default = helper.make_attribute("k", _tensor("attr_default", "e"))
    fn.attribute_proto.extend([default])
    g = helper.make_graph([loop], "g", [], [helper.make_tensor_value_info("o", TensorProto.FLOAT, [4])],
                          [_tensor("init", "w.bin")], sparse_initializer=[sparse])
    m = helper.make_model(g, functions=[fn])
    found = {(r.tensor, r.location) for r in external_refs(m.SerializeToString())}
    assert found == {("init", "w.bin"), ("in_then", "/a"), ("sv", "../b"), ("in_fn", "c"), ("attr_default", "e")}


@pytest.mark.parametrize("damage", ["truncated", "bad length", "group", "deep"])
def test_a_malformed_model_is_a_clean_container_error(arts, tmp_path, damage):
    data = (arts["qdq_onnx"]).read_bytes()
    bad = {"truncated": data[:-7], "bad length": b"\x3a\xff\xff\xff\x0f" + data,  # graph claims 4 GiB
           "group": b"\x3b" + data,  # field 7, wire type 3
           "deep": _nest(120)}[damage]
    with pytest.raises(WireError):
        external_refs(bad)
    folder = ra.copy_artifact(arts["jetson-orin"], tmp_path / "a")
    (folder / "model.onnx").write_bytes(bad)
    from hardening_corpus import rehash

    rehash(folder, "model.onnx")
    with pytest.raises(ModelLoadError, match="not a valid ONNX model"):
        load(folder)


def _nest(depth: int) -> bytes:
    """A ModelProto whose graph holds a node whose attribute holds a graph ... ``depth`` levels deep."""
    inner = b""
    for i in range(depth):
        # GraphProto.node (1) > NodeProto.attribute (5) > AttributeProto.g (6) > GraphProto ...
        attr = b"\x32" + _len(inner) + inner
        node = b"\x2a" + _len(attr) + attr
        inner = b"\x0a" + _len(node) + node
    return b"\x3a" + _len(inner) + inner


def _len(b: bytes) -> bytes:
    n, out = len(b), bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)
