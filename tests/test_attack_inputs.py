"""User-side input files that used to end in a traceback, exit 70 or a hang (issue 43, finding 6).

One generator per class: a decompression-bomb PNG (a valid 1x1 PNG whose header claims 30000 x
30000 pixels: Pillow's ``DecompressionBombError``), a 200-byte ``.npy`` whose header claims
3.6 PiB (numpy allocates what the header says), the same inside an ``.npz``, an ``.npz`` that
inflates past the machine's memory (the memory figure lowered so an honest small file is over it),
and a FIFO named like a data file (the reader blocks forever). Each goes through every entry point
that reads it - ``infer_image``, ``run --input``, ``bench --image``, calibration - and must end in
the documented ``EdgeSDKError`` naming the file, with no traceback, within a timeout.
"""

from __future__ import annotations

import io
import os
import struct
import warnings
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import edge_sdk
from edge_sdk import arrayfile
from edge_sdk.converters.calibration import load_calibration
from edge_sdk.errors import CalibrationError, InputValidationError
from edge_sdk.manifest import TensorSpec

import rt_artifacts as ra

pytestmark = pytest.mark.usefixtures("isolated")  # tests/conftest.py

IMG = [TensorSpec("image", [-1, 32, 32, 3], "float32")]
IMG_SHAPES = {"image": [1, 32, 32, 3]}
#: A hang is a failure: every CLI call below must finish well within this.
TIMEOUT_S = 120


@pytest.fixture(scope="module")
def arts(tmp_path_factory):
    return ra.onnx_artifacts(tmp_path_factory)


def bomb_png(path: Path, side: int = 30000) -> Path:
    """A real 1x1 PNG whose IHDR claims ``side`` x ``side`` pixels (CRC fixed): tiny on disk."""
    buf = io.BytesIO()
    Image.new("RGB", (1, 1)).save(buf, "PNG")
    data = bytearray(buf.getvalue())
    at = data.index(b"IHDR")
    data[at + 4:at + 12] = struct.pack(">II", side, side)
    data[at + 17:at + 21] = struct.pack(">I", zlib.crc32(bytes(data[at:at + 17])) & 0xFFFFFFFF)
    path.write_bytes(bytes(data))
    return path


def huge_npy_bytes(shape=(2**50,), dtype="<f4") -> bytes:
    """A .npy header claiming ``shape`` (4 PiB here), followed by 16 bytes of data."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_2_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue() + b"\0" * 16


def huge_npz(path: Path, name: str = "input") -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name}.npy", huge_npy_bytes())
    return path


def test_the_generators_make_what_they_claim(tmp_path):
    """The bomb really trips Pillow and the header really makes numpy allocate, before our checks."""
    with pytest.raises(Image.DecompressionBombError):
        Image.open(bomb_png(tmp_path / "b.png"))
    p = tmp_path / "h.npy"
    p.write_bytes(huge_npy_bytes())
    assert len(p.read_bytes()) < 200
    with pytest.raises((MemoryError, ValueError)):
        np.load(p, allow_pickle=False)


def test_a_decompression_bomb_is_a_clean_input_error_everywhere(arts, tmp_path, cli):
    png = bomb_png(tmp_path / "bomb.png")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with edge_sdk.load(arts["intel-cpu"]) as m, pytest.raises(InputValidationError, match="Refusing to decode image"):
            m.infer_image(png)
    env = {"EDGE_SDK_CONFIG": str(tmp_path / "no-config.toml")}
    r = cli("run", str(arts["intel-cpu"]), "--input", str(png), env=env, timeout=TIMEOUT_S)
    assert r.returncode == 3 and "decompression bomb" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = cli("bench", str(arts["intel-cpu"]), "--image", str(png), "--runs", "2", "--warmup", "0", "--power", "none",
            env=env, timeout=TIMEOUT_S)
    assert r.returncode == 3 and "decompression bomb" in r.stderr and "Traceback" not in r.stderr, r.stdout + r.stderr
    folder = tmp_path / "calib"
    folder.mkdir()
    for i in range(3):
        Image.new("RGB", (40, 40), (i * 60, 0, 0)).save(folder / f"img_{i}.png")
    bomb_png(folder / "img_9.png")
    with pytest.raises(CalibrationError, match="img_9.png.*decompression bomb"):
        load_calibration(folder, IMG, IMG_SHAPES, holdout_fraction=0.2)


@pytest.mark.parametrize("kind", ["npy", "npz"])
def test_a_header_claiming_petabytes_is_refused_before_numpy_allocates(arts, tmp_path, cli, kind):
    if kind == "npy":
        path = tmp_path / "input.npy"
        path.write_bytes(huge_npy_bytes())
    else:
        path = huge_npz(tmp_path / "input.npz")
    with pytest.raises(InputValidationError, match="header claims shape"):
        arrayfile.load_array_file(path, error=InputValidationError)
    r = cli("run", str(arts["jetson-orin"]), "--input", str(path), env={"EDGE_SDK_CONFIG": str(tmp_path / "n.toml")},
            timeout=TIMEOUT_S)
    assert r.returncode == 3 and "header claims shape" in r.stderr and "Traceback" not in r.stderr, r.stderr
    with pytest.raises(CalibrationError, match="header claims shape"):
        load_calibration(path, IMG, IMG_SHAPES, holdout_fraction=0.2)


def test_an_npz_inflating_past_memory_is_refused(tmp_path, monkeypatch):
    """Honest headers whose total is more than the machine has (the memory figure lowered to 1 KiB)."""
    path = tmp_path / "c.npz"
    np.savez_compressed(path, image=np.zeros((4, 32, 32, 3), np.float32))
    assert isinstance(arrayfile.load_array_file(path, error=CalibrationError), dict)
    monkeypatch.setattr(arrayfile, "memory_bytes", lambda: 1024)
    with pytest.raises(CalibrationError, match="inflates to 49,152 bytes of arrays; this machine has 1,024"):
        load_calibration(path, IMG, IMG_SHAPES, holdout_fraction=0.2)


def test_object_arrays_and_truncated_files_are_refused(tmp_path):
    p = tmp_path / "o.npy"
    np.save(p, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(InputValidationError, match="Python objects"):
        arrayfile.load_array_file(p, error=InputValidationError)
    t = tmp_path / "t.npy"
    np.save(t, np.ones((8, 8), np.float32))
    t.write_bytes(t.read_bytes()[:-5])
    with pytest.raises(InputValidationError, match=r"claims shape \(8, 8\).*only 251 bytes"):
        arrayfile.load_array_file(t, error=InputValidationError)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this OS")
def test_a_fifo_never_blocks_a_reader(arts, tmp_path, cli):
    env = {"EDGE_SDK_CONFIG": str(tmp_path / "no-config.toml")}
    for name, art in (("x.npy", "jetson-orin"), ("x.npz", "jetson-orin"), ("x.png", "intel-cpu")):
        fifo = tmp_path / name
        os.mkfifo(fifo)
        r = cli("run", str(arts[art]), "--input", str(fifo), env=env, timeout=TIMEOUT_S)
        assert r.returncode == 3 and "is a FIFO" in r.stderr and "Traceback" not in r.stderr, (name, r.stderr)
    r = cli("bench", str(arts["intel-cpu"]), "--image", str(tmp_path / "x.png"), "--runs", "2", "--warmup", "0",
            "--power", "none", env=env, timeout=TIMEOUT_S)
    assert r.returncode == 3 and "is a FIFO" in r.stderr, r.stdout + r.stderr
    with pytest.raises(CalibrationError, match="is a FIFO"):
        load_calibration(tmp_path / "x.npy", IMG, IMG_SHAPES, holdout_fraction=0.2)
    folder = tmp_path / "npys"
    folder.mkdir()
    np.save(folder / "aux.npy", np.zeros((4, 4), np.float32))
    os.mkfifo(folder / "image.npy")
    with pytest.raises(CalibrationError, match="image.npy is a FIFO"):
        load_calibration(folder, IMG, IMG_SHAPES, holdout_fraction=0.2)


WEIRD = "logits\x1b]0;pwned\x07\x1b[2J\u202e\x00"


def test_names_from_an_artifact_are_printed_never_executed(arts, tmp_path, cli, npy):
    """An output named with an OSC title sequence, a screen clear, a right-to-left override and NUL:
    `run` prints it escaped (the model still runs), as every CLI line is written through SafeStream."""
    import onnx

    m = onnx.load(str(arts["qdq_onnx"]))
    old = m.graph.output[0].name
    m.graph.output[0].name = WEIRD
    for node in m.graph.node:
        node.output[:] = [WEIRD if o == old else o for o in node.output]
    onnx.save(m, str(tmp_path / "weird.onnx"))
    folder = ra.write_artifact(tmp_path / "art", "jetson-orin", [(tmp_path / "weird.onnx", "model.onnx", "onnx-qdq", "model")],
                               [TensorSpec("input", [1, 8, 8, 3], "float32", None, "NHWC")],
                               [TensorSpec(WEIRD, ra.OUT_SHAPE, "float32")])
    r = cli("run", str(folder), "--input", str(npy), env={"EDGE_SDK_CONFIG": str(tmp_path / "n.toml")}, timeout=TIMEOUT_S)
    assert r.returncode == 0, r.stderr
    # (click itself drops CSI sequences such as the screen clear when stdout is not a terminal)
    assert "logits\\x1b]0;pwned\\x07" in r.stdout and "\\u202e\\x00" in r.stdout, r.stdout
    assert not any(c in r.stdout + r.stderr for c in "\x1b\x07\x00\u202e")


def test_safe_text_escapes_what_acts_on_a_terminal_and_keeps_the_rest():
    from edge_sdk.termsafe import SafeStream, safe_text

    assert safe_text("résumé 日本 tab\tnew\nline") == "résumé 日本 tab\tnew\nline"
    assert safe_text("a\x1b[31mb\x9bc\u2066d\udc80") == "a\\x1b[31mb\\x9bc\\u2066d\\udc80"
    assert safe_text("\rbar: 3/10") == "\rbar: 3/10" and safe_text("x\ry") == "x\\x0dy"
    out = io.StringIO()
    SafeStream(out).write("name\ud800!")  # a lone surrogate: written escaped, never UnicodeEncodeError
    assert out.getvalue() == "name\\ud800!"
    ascii_out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    SafeStream(ascii_out).write("caf\u00e9\n")
    ascii_out.flush()
    assert ascii_out.buffer.getvalue() == b"caf\\xe9\n"
