"""A small builder for the preparation passes that replace one node with several."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir


class NodeBuilder:
    """Nodes of one rewrite, each named after it (``{prefix}_{n}_{op}``); constants become
    initializers of ``graph``, which a Loop body built by a child builder (``body()``) reads from
    the outer scope."""

    def __init__(self, graph: ir.Graph, prefix: str, *, shared: list[int] | None = None) -> None:
        self.graph, self.prefix = graph, prefix
        self.nodes: list[ir.Node] = []
        self._count = shared if shared is not None else [0]

    def _name(self, tag: str) -> str:
        self._count[0] += 1
        return f"{self.prefix}_{self._count[0]}_{tag}"

    def op(self, op_type: str, inputs: list[ir.Value | None], dtype: ir.DataType, *,
           outputs: int = 1, **attrs: Any) -> ir.Value:
        """Append ``op_type(inputs, **attrs)``; its (first) output, of type ``dtype``."""
        name = self._name(op_type)
        made = ir.node(op_type, inputs, attrs, num_outputs=outputs, name=name)
        for k, value in enumerate(made.outputs):  # named: a Loop body's values stay distinct
            value.name = name if k == 0 else f"{name}_{k}"
        made.outputs[0].type = ir.TensorType(dtype)
        self.nodes.append(made)
        return made.outputs[0]

    def const(self, tag: str, array: np.ndarray) -> ir.Value:
        name = self._name(tag)
        value = ir.Value(name=name, const_value=ir.Tensor(array, name=name), shape=ir.Shape(array.shape),
                         type=ir.TensorType(ir.DataType.from_numpy(array.dtype)))
        self.graph.register_initializer(value)
        return value

    def body(self) -> NodeBuilder:
        """A builder for a subgraph's nodes: same names and constants, its own node list."""
        return NodeBuilder(self.graph, self.prefix, shared=self._count)

    def scalar(self, value: float | int, dtype: type = np.float32) -> ir.Value:
        return self.const("k", np.array(value, dtype))

    def vector(self, *values: float | int, dtype: type = np.int64) -> ir.Value:
        return self.const("v", np.array(values, dtype))
