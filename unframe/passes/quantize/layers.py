"""The scheme each weighted layer ended up with, for the report and ``inspect``.

Read from the quantized ONNX graph where the artifact is one (the ONNX target) or was built from
one (TensorRT's Q/DQ graph): what the graph holds, node by node. For the other runtimes (their
vendor's quantizer works inside its own format) it is what was asked of that quantizer: every
weighted layer of the float graph with the scheme, or float where the sensitivity pass kept it;
the table's source says which of the two it is.

Layer names are the ONNX node names of the float graph (``naming.name_nodes``), the names the
sensitivity pass and ``QuantRequest.exclude`` use.
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir

FLOAT = "float"
KEPT = "float (kept by the sensitivity pass)"
SMALL = "float (weight under 256 values)"
NOT_CONSTANT = "float (weight computed at run time)"


def from_graph(quantized: ir.Model, exclude: tuple[str, ...] = ()) -> dict[str, str]:
    """Each weighted node of a quantized ONNX graph and its scheme as the graph holds it."""
    from unframe.passes.quantize.onnx_quant import WEIGHTED

    layers: dict[str, str] = {}
    for node in quantized.graph:
        op = node.op_type
        if op == "MatMulNBits":
            bits = node.attributes.get_int("bits", 4)
            layers[node.name] = f"int{bits} weights in blocks of {node.attributes.get_int('block_size', 32)}"
        elif op in ("MatMulInteger", "ConvInteger"):
            layers[node.name] = "int8 weights, int8 activations quantized at run time"
        elif op in ("QLinearConv", "QLinearMatMul"):
            layers[node.name] = "int8 weights and activations (QLinear)"
        elif op in WEIGHTED:
            index = WEIGHTED[op][0]
            weight = node.inputs[index] if len(node.inputs) > index else None
            layers[node.name] = _weight_scheme(weight, node.inputs[0] if node.inputs else None, node.name, exclude)
    return layers


def planned(float_model: ir.Model, scheme: Any, exclude: tuple[str, ...] = ()) -> dict[str, str]:
    """Each weighted node of the float graph and what was asked of the backend's quantizer for it:
    the scheme, or float where the sensitivity pass kept it (the vendor's tool may still leave a
    small layer in float: the table's source says so)."""
    from unframe.passes.quantize.onnx_quant import WEIGHTED

    kept = set(exclude)
    return {node.name or f"{node.op_type}_{i}": KEPT if (node.name or f"{node.op_type}_{i}") in kept else scheme.about
            for i, node in enumerate(float_model.graph) if node.op_type in WEIGHTED}


def _weight_scheme(weight: ir.Value | None, activation: ir.Value | None, name: str,
                   exclude: tuple[str, ...]) -> str:
    dq = weight.producer() if weight is not None else None
    if dq is None or dq.op_type != "DequantizeLinear":
        if name in exclude:
            return KEPT
        tensor = weight.const_value if weight is not None else None
        if tensor is None:
            return NOT_CONSTANT
        return SMALL if tensor.size < 256 else FLOAT
    stored = _dtype(dq.inputs[0] if dq.inputs else None)
    bits = {ir.DataType.INT4: "int4", ir.DataType.UINT4: "uint4", ir.DataType.INT8: "int8",
            ir.DataType.UINT8: "uint8"}.get(stored, str(stored.name).lower() if stored else "?")
    scale = dq.inputs[1] if len(dq.inputs) > 1 else None
    block = dq.attributes.get_int("block_size", 0)
    if block:
        how = f"in blocks of {block}"
    elif (shape := _shape(scale)) is not None and len(shape) == 1 and shape[0] != 1:
        how = "per channel"
    else:
        how = "per tensor"
    text = f"{bits} weights {how}"
    act = activation.producer() if activation is not None else None
    while act is not None and act.op_type in MOVES_ONLY and act.inputs and act.inputs[0] is not None:
        act = act.inputs[0].producer()  # int8 values reshaped are int8 still (NNCF's Q/DQ before a Flatten)
    if act is not None and act.op_type == "DequantizeLinear":
        act_type = _dtype(act.inputs[0] if act.inputs else None)
        text += f", {str(act_type.name).lower() if act_type else 'int8'} activations"
    else:
        text += ", float activations"
    return text


MOVES_ONLY = ("Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze")  # ops that only move values


def _dtype(value: ir.Value | None) -> ir.DataType | None:
    if value is None:
        return None
    if value.dtype is not None:
        return value.dtype
    return value.const_value.dtype if value.const_value is not None else None


def _shape(value: ir.Value | None) -> tuple[Any, ...] | None:
    if value is None:
        return None
    if value.shape is not None:
        return tuple(value.shape)
    return tuple(value.const_value.shape) if value.const_value is not None else None
