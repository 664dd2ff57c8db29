"""Fold a value to a small numpy array when it is a constant, or simple arithmetic on constants and
static shapes. Never reads external data: an ``ir.ExternalTensor`` is treated as unknown."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from unframe.opset import is_default_domain

MAX_FOLD_ELEMENTS = 1 << 16
_FOLDABLE = {
    "Identity", "Cast", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Neg", "Add", "Sub", "Mul", "Div",
    "Gather", "Slice", "Range", "ConstantOfShape", "Abs", "Max", "Min", "Floor", "Ceil", "Equal", "Where",
    "Not", "Less", "Greater", "ReduceProd", "ReduceSum", "Expand", "Tile", "Transpose", "Mod", "Sign",
    "Size", "Shape", "Flatten", "Sqrt", "Pow", "Clip", "Round",
}


def tensor_array(tensor: ir.TensorProtocol | None) -> np.ndarray | None:
    if tensor is None or isinstance(tensor, ir.ExternalTensor):
        return None
    if tensor.size > MAX_FOLD_ELEMENTS:
        return None
    try:
        return np.asarray(tensor.numpy())
    except Exception:  # an exotic dtype (float4, int2) or a lazily loaded tensor: treat as unknown
        return None


def constant_node_value(node: ir.Node) -> np.ndarray | None:
    attrs = node.attributes
    if "value" in attrs:
        return tensor_array(attrs["value"].value)
    for name, dtype in (("value_int", np.int64), ("value_ints", np.int64), ("value_float", np.float32),
                        ("value_floats", np.float32)):
        if name in attrs:
            return np.asarray(attrs[name].value, dtype=dtype)
    return None


def fold(value: ir.Value | None, opset_of: Callable[[ir.Node], int], depth: int = 0) -> np.ndarray | None:
    if value is None or depth > 12:
        return None
    if value.const_value is not None:
        return tensor_array(value.const_value)
    node = value.producer()
    if node is None:
        return None
    if not is_default_domain(node.domain):
        return None
    if node.op_type == "Constant":
        return constant_node_value(node)
    if node.op_type == "Shape" and len(node.inputs) == 1:
        return _fold_shape(node)
    if node.op_type == "Size":
        shape = _static(node.inputs[0])
        return None if shape is None else np.asarray(int(np.prod(shape)), dtype=np.int64)
    if node.op_type not in _FOLDABLE or len(node.outputs) != 1:
        return None
    arrays = []
    for inp in node.inputs:
        if inp is None:
            arrays.append(None)
            continue
        arr = fold(inp, opset_of, depth + 1)
        if arr is None:
            return None
        arrays.append(arr)
    return _evaluate(node, arrays, opset_of(node))


def _static(value: ir.Value | None) -> tuple[int, ...] | None:
    if value is None or value.shape is None:
        return None
    dims = tuple(value.shape)
    return dims if all(isinstance(d, int) for d in dims) else None  # type: ignore[return-value]


def _fold_shape(node: ir.Node) -> np.ndarray | None:
    shape = _static(node.inputs[0])
    if shape is None:
        return None
    start = node.attributes.get_int("start", 0)
    end = node.attributes.get_int("end", None)
    return np.asarray(shape[start:end] if end is not None else shape[start:], dtype=np.int64)


def _evaluate(node: ir.Node, arrays: list[np.ndarray | None], opset: int) -> np.ndarray | None:
    import onnx
    from onnx.reference import ReferenceEvaluator

    names = [f"i{k}" if a is not None else "" for k, a in enumerate(arrays)]
    proto = ir.serde.serialize_node(node)
    del proto.input[:]
    proto.input.extend(names)
    del proto.output[:]
    proto.output.append("y")
    graph = onnx.helper.make_graph(
        [proto], "fold",
        [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in zip(names, arrays, strict=False) if a is not None],
        [onnx.helper.make_empty_tensor_value_info("y")])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    try:
        (out,) = ReferenceEvaluator(model).run(None, {n: a for n, a in zip(names, arrays, strict=False) if a is not None})
    except Exception:  # not foldable after all (unsupported by the reference runtime)
        return None
    out = np.asarray(out)
    return out if out.size <= MAX_FOLD_ELEMENTS else None
