"""Constant below opset 9: Constant-1 holds only float16/float/double tensors.

9->8::  Constant(value=int64/bool/... tensor)  ->  an initializer with the same value
        (initializers hold any type at every IR version; the walker lists IR<4 initializers
        among the graph inputs as those versions require)

Float constants take the generic step. Refused for sparse values and inside functions, which
have no initializers.
"""

from __future__ import annotations

import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.moves import require_types
from unframe.version_converter.registry import adapter

_FLOATS = {ir.DataType.FLOAT16, ir.DataType.FLOAT, ir.DataType.DOUBLE}


@adapter("Constant", 9, 8)
def constant_9_8(node: ir.Node, step: Step) -> None:
    attr = node.attributes.get("value")
    tensor = attr.value if attr is not None else None
    if tensor is None or tensor.dtype in _FLOATS:
        require_types(step)
        return
    if not isinstance(step.graph, ir.Graph):
        step.refuse(f"a {tensor.dtype.name} Constant needs an initializer below opset 9, and a "
                    "function body has none")
    value = ir.Value(name=step.walker.fresh_name(f"{node.name or 'Constant'}_value"),
                     const_value=tensor, type=ir.TensorType(tensor.dtype), shape=ir.Shape(tensor.shape))
    step.graph.register_initializer(value)
    step.replace_with([value])
