"""Shared helpers for adapters that move a value between an attribute and an input."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.version_converter.context import Step


def attr_to_input(step: Step, attr: str, index: int, dtype: Any = np.int64, *,
                  default: Any = None) -> None:
    """Before: ``Op(x, attr=v)``; after: ``Op(x, ..., Constant(v))`` at input ``index``."""
    value = step.drop_attr(attr)
    if value is None:
        value = default
    if value is None:
        return
    node = step.node
    if len(node.inputs) < index:
        node.resize_inputs(index)
    const = step.const(np.asarray(value, dtype=dtype))
    if len(node.inputs) == index:
        node.resize_inputs(index + 1)
    node.replace_input_with(index, const)


def input_value(step: Step, index: int, what: str) -> np.ndarray | None:
    """The folded value of input ``index`` (None when absent); refuses when it can't be folded."""
    value = step.input(index)
    if value is None:
        return None
    folded = step.fold(value)
    if folded is None:
        step.refuse(f"input {what!r} must become an attribute at opset {step.to_version} but is not a "
                    f"constant (nor foldable from constants and static shapes)")
    return folded


def drop_inputs_from(step: Step, index: int) -> None:
    """Remove inputs ``index`` and after."""
    node = step.node
    if len(node.inputs) > index:
        node.resize_inputs(index)


def input_to_attr(step: Step, index: int, attr: str, *, kind: str = "ints") -> bool:
    """Before: ``Op(x, Constant(v))``; after: ``Op(x, attr=v)``. False when the input is absent."""
    folded = input_value(step, index, attr)
    if folded is None:
        drop_inputs_from(step, index)
        return False
    if kind == "ints":
        step.set_attr(attr, ir.AttrInt64s(attr, [int(v) for v in folded.reshape(-1)]))
    elif kind == "int":
        step.set_attr(attr, ir.AttrInt64(attr, int(folded.reshape(-1)[0])))
    elif kind == "floats":
        step.set_attr(attr, ir.AttrFloat32s(attr, [float(v) for v in folded.reshape(-1)]))
    elif kind == "float":
        step.set_attr(attr, ir.AttrFloat32(attr, float(folded.reshape(-1)[0])))
    drop_inputs_from(step, index)
    return True


def dtype_of(step: Step, value: ir.Value | None) -> np.dtype:
    if value is None or value.dtype is None:
        step.refuse("needs the element type of its input, which is unknown")
    return value.dtype.numpy()


def require_types(step: Step) -> None:
    """Refuse when a known dtype of the node isn't allowed by the target schema."""
    from unframe.version_converter.types import check_types

    if step.to_schema is None:
        return
    problems = check_types(step.node, step.to_schema)
    if problems:
        step.refuse("; ".join(problems))
