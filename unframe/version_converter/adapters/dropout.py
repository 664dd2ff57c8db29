"""Dropout: ``ratio`` attribute -> input (and ``training_mode`` input) at 12.

11->12::  Dropout(x, ratio=r)             ->  Dropout(x, Constant(r))
12->11::  Dropout(x, ratio, training)     ->  Dropout(x, ratio=folded)    (refused in training mode)
12->11 with the mask used (inference mode: the output is x, the mask all True; Dropout-10 and
older define the mask otherwise)::
    y, mask = Dropout(x, ratio)      ->  y = Identity(x); mask = Tile(Constant([[True]]), Shape(x))
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.moves import drop_inputs_from, require_types
from unframe.version_converter.registry import adapter


@adapter("Dropout", 11, 12, type_free=True)
def dropout_11_12(node: ir.Node, step: Step) -> None:
    ratio = step.drop_attr("ratio")
    if ratio is None:
        return
    node.resize_inputs(2)
    node.replace_input_with(1, step.const(np.asarray(ratio, dtype=np.float32)))


@adapter("Dropout", 12, 11)
def dropout_12_11(node: ir.Node, step: Step) -> None:
    require_types(step)
    training = step.input(2)
    if training is not None:
        flag = step.fold(training)
        if flag is None or bool(flag.reshape(-1)[0]):
            step.refuse("training_mode is not a constant False; opset 11 has no training mode")
    if len(node.outputs) > 1 and (node.outputs[1].uses() or node.outputs[1].is_graph_output()):
        _identity_and_true_mask(node, step)
        return
    # in inference mode Dropout is the identity whatever the ratio, so a computed ratio can go
    ratio = step.fold(step.input(1)) if step.input(1) is not None else None
    drop_inputs_from(step, 1)
    step.drop_attr("seed")  # only drives the random mask, which inference mode never draws
    if ratio is not None:
        step.set_attr("ratio", ir.AttrFloat32("ratio", float(ratio.reshape(-1)[0])))


def _identity_and_true_mask(node: ir.Node, step: Step) -> None:
    """Inference-mode Dropout with its mask used: the mask is all True, of x's shape (Tile takes a
    run-time shape from opset 6, unlike ConstantOfShape, which needs 9)."""
    x = node.inputs[0]
    rank = step.rank(x)
    if rank is None:
        step.refuse("the mask output is used and the input rank is unknown; Dropout before opset 12 "
                    "defines the mask differently")
    ones = step.const(np.ones([1] * rank, dtype=np.bool_))
    mask = step.op("Tile", [ones, step.op("Shape", [x])])
    mask.type, mask.shape = ir.TensorType(ir.DataType.BOOL), node.outputs[1].shape
    step.replace_with([step.op("Identity", [x]), mask])
