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

import math
import struct
from pathlib import Path

from edge_sdk.errors import ModelLoadError

#: TensorType -> element size in bytes; 0 where the size is not a whole number of bytes per element
#: (STRING, RESOURCE, VARIANT, packed INT4 / INT2), so constant sizes are not checked for those.
ELEM_SIZE = {0: 4, 1: 2, 2: 4, 3: 1, 4: 8, 5: 0, 6: 1, 7: 2, 8: 8, 9: 1, 10: 8, 11: 16, 12: 8, 13: 0, 14: 0,
             15: 4, 16: 2, 17: 0, 18: 2, 19: 0}
MAX_RANK = 16
#: The flatbuffer schema version LiteRT reads.
SCHEMA_VERSION = 3
#: Largest tensor accepted (2 GiB): a flipped dimension must not make the runtime allocate terabytes.
MAX_TENSOR_BYTES = 1 << 31
#: Tensor type -> the range its zero points must lie in (UINT8, INT16, INT8).
ZERO_POINT_RANGE = {3: (0, 255), 7: (-32768, 32767), 9: (-128, 127)}
#: Sparse index vector union (Int32Vector, Uint16Vector, Uint8Vector) -> element size.
SPARSE_VECTOR_ELEM = {1: 4, 2: 2, 3: 1}


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

    def string(self, tab, slot: int, utf8: bool = False) -> None:
        """Check a string field: in bounds and NUL-terminated (native code reads it as a C string);
        with ``utf8``, also valid UTF-8 (names the Python API decodes)."""
        off = self.field(tab, slot)
        if off is None:
            return
        p = self.indirect(off)
        n = self.u32(p)
        self._need(p + 4, n + 1)
        if self.b[p + 4 + n] != 0:
            raise _Bad(f"string at {p} is not terminated")
        if utf8:
            try:
                self.b[p + 4:p + 4 + n].decode("utf-8")
            except UnicodeDecodeError:
                raise _Bad(f"string at {p} is not UTF-8") from None

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
    version = r.scalar(model, 0, r.u32)
    if version != SCHEMA_VERSION:
        raise _Bad(f"schema version {version}, expected {SCHEMA_VERSION}")
    codes = r.tables(model, 1)
    for code in codes:
        r.string(code, 1)  # custom_code
    r.string(model, 3)  # description
    buffers = r.tables(model, 4)
    sizes = []
    for buf in buffers:
        _, n = r.vector(buf, 0, 1)
        off, size = r.scalar(buf, 1, r.u64), r.scalar(buf, 2, r.u64)
        if off > 1:  # data stored after the flatbuffer (models over 2 GB)
            r._need(off, size)
            n = size
        sizes.append(n)
    for idx in r.ints(model, 5):  # metadata_buffer
        if not 0 <= idx < len(sizes):
            raise _Bad(f"metadata buffer index {idx} (buffers: {len(sizes)})")
    for meta in r.tables(model, 6):
        r.string(meta, 0)
        if r.scalar(meta, 1, r.u32) >= len(sizes):
            raise _Bad(f"metadata buffer index {r.scalar(meta, 1, r.u32)} (buffers: {len(sizes)})")
    # External buffer groups / buffers (slots 8, 9) name data outside this file: never written by
    # edge-sdk's converters, and a file must not make the runtime read other files.
    if r.vector(model, 8, 4)[1] or r.vector(model, 9, 4)[1]:
        raise _Bad("external buffers are not supported")
    subgraphs = r.tables(model, 2)
    if not subgraphs:
        raise _Bad("no subgraph")
    tensor_counts = []
    for sg in subgraphs:
        tensors = r.tables(sg, 0)
        nt = len(tensors)
        tensor_counts.append(nt)
        for t in tensors:
            _check_tensor(r, t, sizes)
        for idx in r.ints(sg, 1) + r.ints(sg, 2):
            if not 0 <= idx < nt:
                raise _Bad(f"subgraph input/output index {idx} (tensors: {nt})")
        r.string(sg, 4)  # name
        for op in r.tables(sg, 3):
            _check_operator(r, op, len(codes), nt)
    for sig in r.tables(model, 7):  # signature_defs
        sg_idx = r.scalar(sig, 4, r.u32)
        if sg_idx >= len(subgraphs):
            raise _Bad(f"signature subgraph index {sg_idx} (subgraphs: {len(subgraphs)})")
        for slot in (0, 1):
            for tmap in r.tables(sig, slot):
                r.string(tmap, 0, utf8=True)
                idx = r.scalar(tmap, 1, r.u32)
                if idx >= tensor_counts[sg_idx]:
                    raise _Bad(f"signature tensor index {idx} (tensors: {tensor_counts[sg_idx]})")
        r.string(sig, 2, utf8=True)  # signature_key
        r.string(sig, 3)  # deprecated_tag


def _check_operator(r: _Reader, op, n_codes: int, nt: int) -> None:
    opcode = r.scalar(op, 0, r.u32)
    if opcode >= n_codes:
        raise _Bad(f"opcode index {opcode} (operator codes: {n_codes})")
    for idx in r.ints(op, 1) + r.ints(op, 2) + r.ints(op, 8):
        if not -1 <= idx < nt:
            raise _Bad(f"operator tensor index {idx} (tensors: {nt})")
    for slot in (4, 12):  # builtin_options / builtin_options_2 (a union table)
        opt = r.field(op, slot)
        if opt is not None:
            r.table(r.indirect(opt))
    r.vector(op, 5, 1)  # custom_options
    r.vector(op, 7, 1)  # mutating_variable_inputs
    off, size = r.scalar(op, 9, r.u64), r.scalar(op, 10, r.u64)
    if off > 1:  # large custom options stored after the flatbuffer
        r._need(off, size)


def _check_tensor(r: _Reader, t, sizes: list[int]) -> None:
    shape = r.ints(t, 0)
    if len(shape) > MAX_RANK or any(d < 0 for d in shape):
        raise _Bad(f"tensor shape {shape[:MAX_RANK + 1]}")
    signature = r.ints(t, 7)
    if len(signature) > MAX_RANK or any(d < -1 for d in signature):
        raise _Bad(f"tensor shape signature {signature[:MAX_RANK + 1]}")
    ttype = r.scalar(t, 1, r.u8)
    if ttype not in ELEM_SIZE:
        raise _Bad(f"tensor type {ttype}")
    buf = r.scalar(t, 2, r.u32)
    if buf >= len(sizes):
        raise _Bad(f"tensor buffer index {buf} (buffers: {len(sizes)})")
    r.string(t, 3, utf8=True)  # name
    count = 1
    for d in shape:
        count *= d
    elem = ELEM_SIZE[ttype]
    if count * max(elem, 1) > MAX_TENSOR_BYTES:
        raise _Bad(f"tensor shape {shape} needs {count * max(elem, 1)} bytes (limit {MAX_TENSOR_BYTES})")
    if buf and sizes[buf] and elem and r.field(t, 6) is None:  # dense constant: bytes must match the shape
        if sizes[buf] != count * elem:
            raise _Bad(f"constant tensor has {sizes[buf]} bytes, its shape {shape} needs {count * elem}")
    q = r.field(t, 4)
    if q is not None:
        qt = r.table(r.indirect(q))
        for slot, size in ((0, 4), (1, 4), (2, 4), (3, 8)):
            r.vector(qt, slot, size)
        sstart, ns = r.vector(qt, 2, 4)
        if ns and any(not (math.isfinite(v) and v >= 0) for v in struct.unpack_from(f"<{ns}f", r.b, sstart)):
            raise _Bad("a quantization scale is negative or not finite")
        zstart, nz = r.vector(qt, 3, 8)
        lo, hi = ZERO_POINT_RANGE.get(ttype, (None, None))
        if lo is not None and nz:
            zps = struct.unpack_from(f"<{nz}q", r.b, zstart)
            if any(not lo <= z <= hi for z in zps):  # kernels index lookup tables with it
                raise _Bad(f"zero point {next(z for z in zps if not lo <= z <= hi)} outside [{lo}, {hi}] of its tensor type")
        dim = r.scalar(qt, 6, r.i32)
        if ns > 1 and (not 0 <= dim < len(shape) or shape[dim] != ns or nz not in (0, ns)):
            raise _Bad(f"per-channel quantization of {ns} scales does not fit shape {shape} (axis {dim})")
        details = r.field(qt, 5)  # CustomQuantization { custom: [ubyte] }
        if details is not None:
            r.vector(r.table(r.indirect(details)), 0, 1)
    sparsity = r.field(t, 6)
    if sparsity is not None:
        _check_sparsity(r, r.table(r.indirect(sparsity)))
    for variant in r.tables(t, 9):
        r.ints(variant, 0)
        if r.scalar(variant, 1, r.u8) not in ELEM_SIZE:
            raise _Bad("variant tensor type")
    if r.scalar(t, 10, r.u32):
        raise _Bad("external buffers are not supported")


def _check_sparsity(r: _Reader, sp) -> None:
    """SparsityParameters: traversal order, block map and per-dimension index arrays in bounds."""
    r.ints(sp, 0)
    r.ints(sp, 1)
    for dm in r.tables(sp, 2):
        for type_slot, slot in ((2, 3), (4, 5)):  # array_segments / array_indices (a union of vectors)
            kind = r.scalar(dm, type_slot, r.u8)
            vec = r.field(dm, slot)
            if vec is None:
                continue
            if kind not in SPARSE_VECTOR_ELEM:
                raise _Bad(f"sparse index vector type {kind}")
            r.vector(r.table(r.indirect(vec)), 0, SPARSE_VECTOR_ELEM[kind])
