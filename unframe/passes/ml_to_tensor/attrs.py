"""Reading ai.onnx.ml attributes, and the exception a lowering raises when it can't take a node.

Kept apart from ``registry`` so that the modules the lowerings share (``forest``) import no
registry (whose built-in modules import them back)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.opset import attribute_value


class Unsupported(Exception):
    """A lowering can't express this node; ``reason`` is one line for the blocker."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def attr_value(node: ir.Node, name: str, default: Any = None) -> Any:
    return attribute_value(node, name, default)


def float_attr(node: ir.Node, name: str) -> np.ndarray | None:
    tensor = node.attributes.get(f"{name}_as_tensor")
    if tensor is not None:
        return np.asarray(tensor.value.numpy(), dtype=np.float64).reshape(-1)
    values = node.attributes.get(name)
    if values is None:
        return None
    if values.type == ir.AttributeType.TENSOR:
        return np.asarray(values.value.numpy()).reshape(-1)
    return np.asarray(list(values.value), dtype=np.float32)
