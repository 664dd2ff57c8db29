"""Writing standard ONNX nodes in place of one ``ai.onnx.ml`` node.

An ``Emitter`` inserts nodes before the node being lowered, names them after it, registers
tables as initializers and marks every node it writes with ``KEEP_FP32``: the comparisons and
accumulations of a lowered model decide labels, and a backend that lowers the rest of the graph
to 16 bits must leave them in float32. The few ops whose form changed across opsets (reductions
and Unsqueeze take ``axes`` as an input from 13 and 18) are written for the graph's opset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.passes import KEEP_FP32

MIN_OPSET = 13  # Unsqueeze/Squeeze/ReduceSum with axes as an input, Softmax over one axis
_NP_TO_IR = {np.dtype(np.float32): ir.DataType.FLOAT, np.dtype(np.float64): ir.DataType.DOUBLE,
             np.dtype(np.int64): ir.DataType.INT64, np.dtype(np.int32): ir.DataType.INT32,
             np.dtype(np.uint8): ir.DataType.UINT8,
             np.dtype(np.bool_): ir.DataType.BOOL}


class Names:
    """Fresh value and node names, unique in the graph (one instance per pass run)."""

    def __init__(self, graph: ir.Graph) -> None:
        self.used = {v.name for v in graph.inputs} | set(graph.initializers)
        for node in ir.traversal.RecursiveGraphIterator(graph):
            self.used.add(node.name or "")
            self.used.update(v.name or "" for v in node.outputs)
        self._n = 0

    def fresh(self, base: str) -> str:
        while True:
            self._n += 1
            name = f"{base}_{self._n}"
            if name not in self.used:
                self.used.add(name)
                return name


class Emitter:
    """Builds the replacement of ``anchor`` (inserted right before it)."""

    def __init__(self, graph: ir.Graph, anchor: ir.Node, opset: int, names: Names) -> None:
        self.graph = graph
        self.anchor = anchor
        self.opset = opset
        self.names = names
        self.prefix = f"mlt_{(anchor.name or anchor.op_type)}"
        self.nodes: list[ir.Node] = []

    # -- generic -------------------------------------------------------------------------------
    def op(self, op_type: str, inputs: Sequence[ir.Value | None], attrs: Mapping[str, Any] | None = None,
           *, outputs: int = 1, dtype: ir.DataType | None = None) -> Any:
        """Insert ``op_type`` and return its output (a tuple when ``outputs`` > 1)."""
        attributes = ir.convenience.convert_attributes(dict(attrs or {}))
        node = ir.Node("", op_type, list(inputs), attributes, num_outputs=outputs,
                       name=self.names.fresh(f"{self.prefix}_{op_type}"))
        node.metadata_props[KEEP_FP32] = "1"
        for out in node.outputs:
            out.name = self.names.fresh(f"{self.prefix}_{op_type.lower()}")
            if dtype is not None:
                out.type = ir.TensorType(dtype)
        self.graph.insert_before(self.anchor, node)
        self.nodes.append(node)
        return node.outputs[0] if outputs == 1 else tuple(node.outputs)

    def const(self, array: Any, hint: str = "table", dtype: Any = None) -> ir.Value:
        """A constant as an initializer (tables can be large; initializers stay lazy)."""
        arr = np.ascontiguousarray(np.asarray(array, dtype=dtype))
        name = self.names.fresh(f"{self.prefix}_{hint}")
        if arr.dtype.kind not in "biuf":  # strings: a Constant node (a label table)
            tensor = ir.StringTensor([str(v).encode() for v in arr.reshape(-1)],
                                     shape=ir.Shape(arr.shape), name=name)
            out = self.op("Constant", [], {"value": tensor}, dtype=ir.DataType.STRING)
            out.shape = ir.Shape(arr.shape)
            return out
        tensor = ir.Tensor(arr, name=name)
        value = ir.Value(name=name, const_value=tensor, type=ir.TensorType(tensor.dtype),
                         shape=ir.Shape(arr.shape))
        self.graph.register_initializer(value)
        return value

    # -- opset-aware forms ---------------------------------------------------------------------
    def reduce(self, op_type: str, x: ir.Value, axes: Sequence[int], keepdims: bool) -> ir.Value:
        """ReduceSum takes axes as an input from opset 13, the other reductions from 18."""
        keep = {"keepdims": int(keepdims)}
        if op_type == "ReduceSum" and self.opset >= 13 or self.opset >= 18:
            return self.op(op_type, [x, self.const(np.asarray(axes, np.int64), "axes")], keep)
        return self.op(op_type, [x], {**keep, "axes": list(axes)})

    def unsqueeze(self, x: ir.Value, axes: Sequence[int]) -> ir.Value:
        return self.op("Unsqueeze", [x, self.const(np.asarray(axes, np.int64), "axes")])

    def squeeze(self, x: ir.Value, axes: Sequence[int]) -> ir.Value:
        return self.op("Squeeze", [x, self.const(np.asarray(axes, np.int64), "axes")])

    def reshape(self, x: ir.Value, shape: Sequence[int]) -> ir.Value:
        return self.op("Reshape", [x, self.const(np.asarray(shape, np.int64), "shape")])

    def cast(self, x: ir.Value, to: ir.DataType) -> ir.Value:
        if x.dtype == to:
            return x
        return self.op("Cast", [x], {"to": int(to)}, dtype=to)

    def scalar(self, value: float, dtype: Any) -> ir.Value:
        return self.const(np.asarray(value, dtype=dtype), "scalar")

    def gather(self, table: ir.Value, index: ir.Value, axis: int = 0) -> ir.Value:
        return self.op("Gather", [table, index], {"axis": axis}, dtype=table.dtype)

    def where(self, cond: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.op("Where", [cond, a, b], dtype=a.dtype or b.dtype)


def ir_dtype(np_dtype: Any) -> ir.DataType:
    return _NP_TO_IR[np.dtype(np_dtype)]


def np_dtype(dtype: ir.DataType | None) -> np.dtype:
    return np.dtype(dtype.numpy()) if dtype is not None else np.dtype(np.float32)
