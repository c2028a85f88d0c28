"""A structural verifier for TFLite flatbuffers, in pure Python, run before native code sees one.

The LiteRT interpreter trusts its input: a flipped byte in an operator's tensor index or a
buffer's length makes it read out of bounds and crash the process (segfault), where Python
cannot catch it. Hashes in the manifest stop this for verified artifacts; this check covers
``verify=False`` and files from elsewhere. It walks every table the interpreter will read
(model, operator codes, subgraphs, tensors, operators, buffers, quantization) with bounds
checks on every offset, and checks the cross-references (tensor/op/buffer indices, constant
buffer sizes against tensor shapes).

Field slots follow ``tensorflow/compiler/mlir/lite/schema/schema.fbs``.
"""

from __future__ import annotations

import struct
from pathlib import Path

from edge_sdk.errors import ModelLoadError

#: TensorType -> element size in bytes; 0 where the size is not a whole number of bytes per element
#: (STRING, RESOURCE, VARIANT, packed INT4 / INT2), so constant sizes are not checked for those.
ELEM_SIZE = {0: 4, 1: 2, 2: 4, 3: 1, 4: 8, 5: 0, 6: 1, 7: 2, 8: 8, 9: 1, 10: 8, 11: 16, 12: 8, 13: 0, 14: 0,
             15: 4, 16: 2, 17: 0, 18: 2, 19: 0}
MAX_RANK = 16


class _Bad(Exception):
    pass


class _Reader:
    def __init__(self, buf: bytes):
        self.b = buf
        self.n = len(buf)

    def _need(self, off: int, size: int) -> None:
        if off < 0 or off + size > self.n:
            raise _Bad(f"offset {off}+{size} outside the file ({self.n} bytes)")

    def u8(self, off):
        self._need(off, 1)
        return self.b[off]

    def u16(self, off):
        self._need(off, 2)
        return struct.unpack_from("<H", self.b, off)[0]

    def i32(self, off):
        self._need(off, 4)
        return struct.unpack_from("<i", self.b, off)[0]

    def u32(self, off):
        self._need(off, 4)
        return struct.unpack_from("<I", self.b, off)[0]

    def u64(self, off):
        self._need(off, 8)
        return struct.unpack_from("<Q", self.b, off)[0]

    def table(self, pos: int) -> tuple[int, int, int]:
        """(pos, vtable pos, vtable length) of the table at ``pos``, bounds-checked."""
        vt = pos - self.i32(pos)
        vt_len, obj_len = self.u16(vt), self.u16(vt + 2)
        if vt_len < 4 or vt_len % 2:
            raise _Bad(f"bad vtable at {vt}")
        self._need(vt, vt_len)
        self._need(pos, max(obj_len, 4))
        return pos, vt, vt_len

    def field(self, tab, slot: int) -> int | None:
        pos, vt, vt_len = tab
        vo = 4 + 2 * slot
        if vo >= vt_len:
            return None
        fo = self.u16(vt + vo)
        return pos + fo if fo else None

    def indirect(self, off: int) -> int:
        return off + self.u32(off)

    def vector(self, tab, slot: int, elem: int) -> tuple[int, int]:
        """(start, length) of a vector field (length 0 when absent)."""
        off = self.field(tab, slot)
        if off is None:
            return 0, 0
        p = self.indirect(off)
        count = self.u32(p)
        self._need(p + 4, count * elem)
        return p + 4, count

    def ints(self, tab, slot: int) -> list[int]:
        start, count = self.vector(tab, slot, 4)
        return list(struct.unpack_from(f"<{count}i", self.b, start)) if count else []

    def tables(self, tab, slot: int):
        start, count = self.vector(tab, slot, 4)
        return [self.table(self.indirect(start + 4 * i)) for i in range(count)]

    def scalar(self, tab, slot: int, reader, default=0):
        off = self.field(tab, slot)
        return default if off is None else reader(off)


def verify_tflite(path: Path) -> None:
    """Check the whole flatbuffer structure of a ``.tflite`` file.

    Raises:
        ModelLoadError: any offset points outside the file or any index outside its table.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ModelLoadError(f"Cannot read model file {path}: {exc.strerror}") from None
    try:
        _verify(_Reader(data))
    except (_Bad, struct.error, OverflowError) as exc:
        raise ModelLoadError(
            f"{path.name} is not a valid TFLite flatbuffer ({exc}): truncated, corrupt or tampered.",
            "Copy the artifact folder again from the source, or convert the model again.",
        ) from None


def _verify(r: _Reader) -> None:
    if r.n < 8 or r.b[4:8] != b"TFL3":
        raise _Bad("no TFL3 identifier")
    model = r.table(r.u32(0))
    codes = r.tables(model, 1)
    for code in codes:
        custom = r.field(code, 1)
        if custom is not None:
            p = r.indirect(custom)
            r._need(p + 4, r.u32(p))
    buffers = r.tables(model, 4)
    sizes = []
    for buf in buffers:
        _, n = r.vector(buf, 0, 1)
        off, size = r.scalar(buf, 1, r.u64), r.scalar(buf, 2, r.u64)
        if off > 1:  # data stored after the flatbuffer (models over 2 GB)
            r._need(off, size)
            n = size
        sizes.append(n)
    subgraphs = r.tables(model, 2)
    if not subgraphs:
        raise _Bad("no subgraph")
    for sg in subgraphs:
        tensors = r.tables(sg, 0)
        nt = len(tensors)
        for t in tensors:
            _check_tensor(r, t, sizes)
        for idx in r.ints(sg, 1) + r.ints(sg, 2):
            if not 0 <= idx < nt:
                raise _Bad(f"subgraph input/output index {idx} (tensors: {nt})")
        for op in r.tables(sg, 3):
            opcode = r.scalar(op, 0, r.u32)
            if opcode >= len(codes):
                raise _Bad(f"opcode index {opcode} (operator codes: {len(codes)})")
            for idx in r.ints(op, 1) + r.ints(op, 2) + r.ints(op, 8):
                if not -1 <= idx < nt:
                    raise _Bad(f"operator tensor index {idx} (tensors: {nt})")
            for slot in (4, 12):  # builtin_options / builtin_options_2 (a union table)
                opt = r.field(op, slot)
                if opt is not None:
                    r.table(r.indirect(opt))
            r.vector(op, 5, 1)  # custom_options


def _check_tensor(r: _Reader, t, sizes: list[int]) -> None:
    shape = r.ints(t, 0)
    if len(shape) > MAX_RANK or any(d < 0 for d in shape):
        raise _Bad(f"tensor shape {shape[:MAX_RANK + 1]}")
    ttype = r.scalar(t, 1, r.u8)
    if ttype not in ELEM_SIZE:
        raise _Bad(f"tensor type {ttype}")
    buf = r.scalar(t, 2, r.u32)
    if buf >= len(sizes):
        raise _Bad(f"tensor buffer index {buf} (buffers: {len(sizes)})")
    name = r.field(t, 3)
    if name is not None:
        p = r.indirect(name)
        r._need(p + 4, r.u32(p))
    elem = ELEM_SIZE[ttype]
    if buf and sizes[buf] and elem and r.field(t, 6) is None:  # dense constant: bytes must match the shape
        count = 1
        for d in shape:
            count *= d
        if sizes[buf] != count * elem:
            raise _Bad(f"constant tensor has {sizes[buf]} bytes, its shape {shape} needs {count * elem}")
    q = r.field(t, 4)
    if q is not None:
        qt = r.table(r.indirect(q))
        for slot, size in ((0, 4), (1, 4), (2, 4), (3, 8)):
            r.vector(qt, slot, size)
        _, ns = r.vector(qt, 2, 4)
        _, nz = r.vector(qt, 3, 8)
        dim = r.scalar(qt, 6, r.i32)
        if ns > 1 and (not 0 <= dim < len(shape) or shape[dim] != ns or nz not in (0, ns)):
            raise _Bad(f"per-channel quantization of {ns} scales does not fit shape {shape} (axis {dim})")
