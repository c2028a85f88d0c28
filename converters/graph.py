"""A read-only view of a model graph (ONNX or TFLite): nodes, tensors, shapes, producers.

The accuracy gate reads the ops at a model's tail to tell what an output means (a Softmax, a
Sigmoid, a Concat of boxes and scores); the sensitivity report lists the quantizable layers.
Both work the same on ONNX and on TFLite through this view. TFLite op names are mapped to the
ONNX vocabulary where the meaning is the same (``LOGISTIC`` -> ``Sigmoid``), so rules are
written once; the original name is kept in :attr:`Node.native`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: TFLite builtin -> ONNX op type, where the tail rules care.
_TFLITE_AS_ONNX = {
    "LOGISTIC": "Sigmoid", "SOFTMAX": "Softmax", "LOG_SOFTMAX": "LogSoftmax", "CONCATENATION": "Concat",
    "RESHAPE": "Reshape", "TRANSPOSE": "Transpose", "SQUEEZE": "Squeeze", "EXPAND_DIMS": "Unsqueeze",
    "DEQUANTIZE": "Identity", "QUANTIZE": "Identity", "CAST": "Cast", "L2_NORMALIZATION": "LpNormalization",
    "HARD_SWISH": "HardSwish", "CONV_2D": "Conv", "DEPTHWISE_CONV_2D": "Conv", "FULLY_CONNECTED": "Gemm",
    "TRANSPOSE_CONV": "ConvTranspose", "ADD": "Add", "MUL": "Mul", "SUB": "Sub", "DIV": "Div", "ARG_MAX": "ArgMax",
    "TANH": "Tanh", "RELU": "Relu", "RELU6": "Clip", "DENSIFY": "Identity", "MEAN": "ReduceMean",
    "AVERAGE_POOL_2D": "AveragePool",
}
#: Ops that move or relabel values without computing new ones.
TRANSPARENT = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity", "Cast", "Flatten"}


@dataclass
class Node:
    """One op. ``op`` in the ONNX vocabulary; ``native`` as the file names it."""

    name: str
    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    native: str = ""


@dataclass
class GraphView:
    """Nodes in execution order, tensor shapes, graph outputs, and who produces each tensor."""

    nodes: list[Node]
    shapes: dict[str, list[int]]
    outputs: list[str]
    constants: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._producer = {t: n for n in self.nodes for t in n.outputs}

    def producer(self, tensor: str) -> Node | None:
        return self._producer.get(tensor)

    def tail(self, tensor: str, through: set[str] = TRANSPARENT) -> Node | None:
        """The first op computing ``tensor``, looking through ops in ``through``."""
        node = self.producer(tensor)
        seen = 0
        while node is not None and node.op in through and node.inputs and seen < 64:
            node = self.producer(node.inputs[0])
            seen += 1
        return node

    def consumers(self, tensor: str) -> list[Node]:
        return [n for n in self.nodes if tensor in n.inputs]


def from_onnx(model) -> GraphView:
    """View of an ONNX ``ModelProto`` (shapes from ONNX shape inference where it knows them)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - a graph shape inference cannot handle still has its nodes
        inferred = model
    shapes: dict[str, list[int]] = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape"):
            shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
    consts = {i.name for i in model.graph.initializer}
    nodes = []
    for i, n in enumerate(model.graph.node):
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute if a.type in (1, 2, 3, 6, 7, 8)}
        if n.op_type == "Constant":
            consts.update(n.output)
        nodes.append(Node(n.name or f"{n.op_type}_{i}", n.op_type, list(n.input), list(n.output), attrs, n.op_type))
    return GraphView(nodes, shapes, [o.name for o in model.graph.output], consts)


def from_onnx_file(path: str | Path) -> GraphView:
    import onnx

    return from_onnx(onnx.load(str(path), load_external_data=False))


def _builtin_names(schema) -> dict[int, str]:
    return {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_") and isinstance(v, int)}


def from_tflite(model: bytes, subgraph: int = 0) -> GraphView:
    """View of one subgraph of a TFLite flatbuffer (tensor names as the file has them)."""
    from edge_sdk._deps import require

    schema = require("ai_edge_litert.schema_py_generated", "reading TFLite models")
    m = schema.Model.GetRootAs(model, 0)
    names = _builtin_names(schema)
    codes = []
    for i in range(m.OperatorCodesLength()):
        oc = m.OperatorCodes(i)
        code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
        name = names.get(code, f"BUILTIN_{code}")
        codes.append(f"CUSTOM:{(oc.CustomCode() or b'').decode(errors='replace')}" if name == "CUSTOM" else name)
    sg = m.Subgraphs(subgraph)
    tname = [(sg.Tensors(i).Name() or b"").decode(errors="replace") for i in range(sg.TensorsLength())]
    shapes = {tname[i]: [int(sg.Tensors(i).Shape(k)) for k in range(sg.Tensors(i).ShapeLength())]
              for i in range(sg.TensorsLength())}
    consts = set()
    for i in range(sg.TensorsLength()):
        t = sg.Tensors(i)
        buf = m.Buffers(t.Buffer()) if t.Buffer() < m.BuffersLength() else None
        if buf is not None and (buf.DataLength() > 0 or buf.Offset() > 1):
            consts.add(tname[i])
    nodes = []
    for i in range(sg.OperatorsLength()):
        op = sg.Operators(i)
        native = codes[op.OpcodeIndex()]
        ins = [tname[op.Inputs(j)] if op.Inputs(j) >= 0 else "" for j in range(op.InputsLength())]
        outs = [tname[op.Outputs(j)] for j in range(op.OutputsLength())]
        attrs: dict[str, Any] = {}
        if native == "CONCATENATION":
            opts = schema.ConcatenationOptions()
            table = op.BuiltinOptions()
            if table is not None:
                opts.Init(table.Bytes, table.Pos)
                attrs["axis"] = int(opts.Axis())
        elif native == "SOFTMAX":
            attrs["axis"] = -1
        nodes.append(Node(outs[0] if outs else f"{native}_{i}", _TFLITE_AS_ONNX.get(native, native), ins, outs, attrs, native))
    outputs = [tname[sg.Outputs(k)] for k in range(sg.OutputsLength())]
    return GraphView(nodes, shapes, outputs, consts)


__all__ = ["GraphView", "Node", "TRANSPARENT", "from_onnx", "from_onnx_file", "from_tflite"]
