"""The external-data references of an ONNX file, read from its protobuf wire format.

An ONNX tensor may keep its bytes in another file (``data_location: EXTERNAL`` with
``external_data {key: "location" value: "w.bin"}``, plus ``offset``/``length``), and every runtime
that opens the model by path (ONNX Runtime, OpenVINO's ONNX frontend, TensorRT's parser) reads that
file. The manifest's hashes and the signature cover only the files it lists, so a model that
names ``/etc/passwd``, ``../../x`` or an unlisted ``w.bin`` reads bytes nobody checked.
:func:`external_refs` finds every such reference, anywhere a tensor can sit (initializers, sparse
initializers, ``Constant``-style node attributes, the subgraphs of ``If``/``Loop``/``Scan`` at any
depth, function bodies and attribute defaults, training-info graphs), without importing ``onnx``
(not a runtime dependency) and without running native code; :func:`edge_sdk.trust.check_artifact`
refuses any reference that is not a listed, hashed file inside the artifact folder.

Only the fields on the way to a tensor are decoded; everything else (raw tensor bytes included) is
skipped by its length, so a 100 MB model is walked in well under a second.
"""

from __future__ import annotations

from dataclasses import dataclass

# Field numbers (onnx/onnx.proto, stable since IR version 3).
_MODEL = {7: "graph", 25: "function", 20: "training"}
_TRAINING = {1: "graph", 2: "graph"}  # TrainingInfoProto.initialization, .algorithm
_GRAPH = {1: "node", 5: "tensor", 15: "sparse"}  # node, initializer, sparse_initializer
_NODE = {5: "attribute"}
_ATTRIBUTE = {5: "tensor", 6: "graph", 10: "tensor", 11: "graph", 22: "sparse", 23: "sparse"}
_FUNCTION = {7: "node", 11: "attribute"}  # node, attribute_proto (defaults)
_SPARSE = {1: "tensor", 2: "tensor"}  # values, indices
_KINDS = {"graph": _GRAPH, "node": _NODE, "attribute": _ATTRIBUTE, "function": _FUNCTION, "sparse": _SPARSE,
          "training": _TRAINING}
#: TensorProto fields read: name (8), external_data (13, StringStringEntryProto), data_location (14).
_T_NAME, _T_EXTERNAL, _T_LOCATION, EXTERNAL = 8, 13, 14, 1
#: Deeper nesting than this is refused (protobuf's own parsers stop at 100).
MAX_DEPTH = 100


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message."""


@dataclass(frozen=True)
class ExternalRef:
    """One tensor whose bytes live in another file.

    Attributes:
        tensor: The tensor's name (may be empty).
        location: The ``location`` entry as written (None when the tensor names none).
        offset: The ``offset`` entry (None when absent).
        length: The ``length`` entry (None when absent).
    """

    tensor: str
    location: str | None
    offset: int | None
    length: int | None


def _varint(buf, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise WireError("truncated or overlong varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _fields(buf, pos: int, end: int):
    """(field number, wire type, value or (start, stop) of a length-delimited field) of one message."""
    while pos < end:
        key, pos = _varint(buf, pos, end)
        num, wire = key >> 3, key & 7
        if num == 0:
            raise WireError("field number 0")
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            yield num, wire, value
        elif wire == 2:
            n, pos = _varint(buf, pos, end)
            if n > end - pos:
                raise WireError("a length-delimited field runs past its message")
            yield num, wire, (pos, pos + n)
            pos += n
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
            if pos > end:
                raise WireError("truncated fixed-width field")
        else:  # groups (3, 4) are not used by ONNX; 6 and 7 do not exist
            raise WireError(f"wire type {wire}")


def _text(buf, span: tuple[int, int]) -> str:
    try:
        return bytes(buf[span[0]:span[1]]).decode("utf-8")
    except UnicodeDecodeError:
        raise WireError("a string field is not UTF-8") from None


def _tensor(buf, start: int, end: int) -> ExternalRef | None:
    name, location, entries = "", 0, {}
    for num, wire, value in _fields(buf, start, end):
        if num == _T_NAME and wire == 2:
            name = _text(buf, value)
        elif num == _T_LOCATION and wire == 0:
            location = value
        elif num == _T_EXTERNAL and wire == 2:
            key = val = ""
            for n2, w2, v2 in _fields(buf, *value):
                if w2 == 2 and n2 in (1, 2):
                    if n2 == 1:
                        key = _text(buf, v2)
                    else:
                        val = _text(buf, v2)
            entries[key] = val
    # A runtime reads external bytes when data_location says EXTERNAL; entries without it are
    # reported too (a reader that trusted the entries alone would follow them).
    if location != EXTERNAL and not entries:
        return None

    def number(key):
        if key not in entries:
            return None
        try:
            value = int(entries[key])
        except ValueError:
            raise WireError(f"tensor '{name[:80]}': external_data {key} {entries[key][:40]!r} is not a number") from None
        if value < 0:
            raise WireError(f"tensor '{name[:80]}': negative external_data {key}")
        return value

    return ExternalRef(name, entries.get("location"), number("offset"), number("length"))


def external_refs(data) -> list[ExternalRef]:
    """Every tensor of the ONNX model ``data`` (bytes, or a buffer such as an mmap) stored in another file.

    Raises:
        WireError: ``data`` is not a well-formed protobuf message (or nests deeper than MAX_DEPTH).
    """
    buf = memoryview(data) if not isinstance(data, memoryview) else data
    refs: list[ExternalRef] = []
    # An explicit stack: (message kind, start, end, depth).
    stack = [(_MODEL, 0, len(buf), 0)]
    while stack:
        kind, start, end, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise WireError(f"messages nested deeper than {MAX_DEPTH}")
        for num, wire, value in _fields(buf, start, end):
            sub = kind.get(num)
            if sub is None or wire != 2:
                continue
            if sub == "tensor":
                ref = _tensor(buf, *value)
                if ref is not None:
                    refs.append(ref)
            else:
                stack.append((_KINDS[sub], value[0], value[1], depth + 1))
    return refs


__all__ = ["ExternalRef", "MAX_DEPTH", "WireError", "external_refs"]
