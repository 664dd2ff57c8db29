"""BatchNormalization training_mode (added at opset 14).

14->13, training_mode=1: the batch statistics and the running-statistics update written out (axes =
every axis but the channel axis 1; the variance is the population variance, as the spec says)::

    Y, running_mean, running_var = BatchNormalization(X, scale, B, input_mean, input_var,
                                                      epsilon=e, momentum=m, training_mode=1)
->  mean = ReduceMean(X, axes, keepdims=1)                    # [1, C, 1, ...]
    d = Sub(X, mean);  var = ReduceMean(Mul(d, d), axes, keepdims=1)
    Y = Add(Mul(Div(d, Sqrt(Add(var, e))), Reshape(scale, [-1, 1, ...])), Reshape(B, [-1, 1, ...]))
    running_mean = Add(Mul(input_mean, m), Mul(Reshape(mean, [-1]), 1 - m))
    running_var  = Add(Mul(input_var, m), Mul(Reshape(var, [-1]), 1 - m))

Needs the input rank; refused when X, scale/B and the statistics have different dtypes (the
mixed-precision form of opset 15 leaves the precision of the arithmetic open).
training_mode=0: the generic step drops it.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.generic import generic_step
from unframe.version_converter.registry import adapter


def _typed(value: ir.Value, like: ir.Value, shape: ir.Shape | None) -> ir.Value:
    value.type, value.shape = like.type, shape
    return value


def _check(node: ir.Node, step: Step) -> int:
    """The input rank; refuses what the rewrite can't express exactly."""
    x = node.inputs[0]
    rank = step.rank(x)
    if rank is None or rank < 2:
        step.refuse("BatchNormalization training_mode=1 needs a known input rank (>= 2) before opset 14")
    dtypes = {v.dtype for v in node.inputs[:5] if v is not None}
    if len(dtypes) != 1 or None in dtypes:
        step.refuse("BatchNormalization training_mode=1 with inputs of different (or unknown) dtypes: "
                    "the precision of its arithmetic is open")
    return rank


@adapter("BatchNormalization", 14, 13)
def batchnorm_14_13(node: ir.Node, step: Step) -> None:
    if not step.attr("training_mode", 0):
        generic_step(node, step)
        return
    rank = _check(node, step)
    x, scale, bias, input_mean, input_var = node.inputs[:5]
    dtype = x.dtype.numpy()
    axes = [0, *range(2, rank)]
    kept = ir.Shape([1 if i != 1 else (x.shape[1]) for i in range(rank)])
    mean = _typed(step.op("ReduceMean", [x], {"axes": axes, "keepdims": 1}), x, kept)
    diff = _typed(step.op("Sub", [x, mean]), x, x.shape)
    var = _typed(step.op("ReduceMean", [step.op("Mul", [diff, diff])], {"axes": axes, "keepdims": 1}), x, kept)
    column = step.const(np.asarray([-1] + [1] * (rank - 2), dtype=np.int64))
    std = step.op("Sqrt", [step.op("Add", [var, step.const(np.asarray(step.attr("epsilon", 1e-5), dtype))])])
    scaled = step.op("Mul", [step.op("Div", [diff, std]), step.op("Reshape", [scale, column])])
    y = _typed(step.op("Add", [scaled, step.op("Reshape", [bias, column])]), x, x.shape)
    outputs: list[ir.Value | None] = [y, None, None]
    momentum = float(step.attr("momentum", 0.9))
    for index, (stat, running) in enumerate(((mean, input_mean), (var, input_var)), start=1):
        if index < len(node.outputs) and (node.outputs[index].uses() or node.outputs[index].is_graph_output()):
            flat = step.op("Reshape", [stat, step.const(np.asarray([-1], dtype=np.int64))])
            outputs[index] = _typed(step.op("Add", [
                step.op("Mul", [running, step.const(np.asarray(momentum, dtype))]),
                step.op("Mul", [flat, step.const(np.asarray(1 - momentum, dtype))])]), running, running.shape)
    step.replace_with(outputs[:len(node.outputs)])
