"""TopK: ``k`` attribute -> input at 10; ``largest``/``sorted`` attributes at 11.

9->10::   TopK(x, k=3)        ->  TopK(x, Constant([3]))
10->9::   TopK(x, k_input)    ->  TopK(x, k=folded)
10->9::   TopK(x, k) run-time ->  v, i = TopK(x, k=D); Compress(v, arange(D) < k), Compress(i, ...)
                                  (a static axis length D: the first k of the full sort are the
                                  top k, ties lower index first either way)
          final target below 9    ->  Gather(v, arange(k)), Gather(i, arange(k))  (Loop-made arange)
11->10::  TopK(x, k, largest=0)  ->  v, i = TopK(Neg(x), k); (Neg(v), i)
                                  (equal values stay equal under Neg, so ties keep lower index first;
                                  sorted=0 leaves the order unspecified, sorted output is one of them)
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

import unframe.version_converter.dynamic as dyn
from unframe.version_converter.context import Step
from unframe.version_converter.generic import generic_step
from unframe.version_converter.moves import input_to_attr, require_types
from unframe.version_converter.registry import adapter


@adapter("TopK", 9, 10, type_free=True)
def topk_9_10(node: ir.Node, step: Step) -> None:
    k = step.drop_attr("k")
    node.resize_inputs(2)
    node.replace_input_with(1, step.const(np.asarray([k], dtype=np.int64)))


@adapter("TopK", 10, 9)
def topk_10_9(node: ir.Node, step: Step) -> None:
    require_types(step)
    if step.fold(step.input(1)) is not None:
        input_to_attr(step, 1, "k", kind="int")
        return
    x = node.inputs[0]
    rank = step.rank(x)
    axis = step.attr("axis", -1)
    if rank is None or not isinstance(x.shape[axis % rank], int):
        step.refuse("a run-time k needs a static length on the TopK axis before opset 10")
    axis %= rank
    length = int(x.shape[axis])
    full = step.add_node("TopK", [x], {"axis": axis, "k": length}, num_outputs=2)
    k = dyn.as_int64(step, node.inputs[1])
    if dyn.low(step):  # no Compress: the first k positions are gathered
        first, kept = dyn.arange(step, k), "Gather"
    else:
        first, kept = dyn.less(step, step.const(np.arange(length, dtype=np.int64)), k), "Compress"
    outs = []
    for sorted_all, old in zip(full.outputs, node.outputs, strict=True):
        sorted_all.type, sorted_all.shape = old.type, x.shape
        outs.append(dyn.op(step, kept, [sorted_all, first], old.type, axis=axis))
    step.replace_with(outs)


@adapter("TopK", 11, 10)
def topk_11_10(node: ir.Node, step: Step) -> None:
    require_types(step)
    x = node.inputs[0]
    axis = step.attr("axis", -1)
    if axis < 0:
        rank = step.rank(x)
        if rank is None:
            step.refuse("a negative axis needs a known input rank below opset 11")
        axis += rank
    step.drop_attr("sorted")
    if step.attr("largest", 1):
        step.drop_attr("largest")
        generic_step(node, step)
        return
    flipped = step.op("Neg", [x])
    flipped.type, flipped.shape = x.type, x.shape
    top = step.add_node("TopK", [flipped, node.inputs[1]], {"axis": axis}, num_outputs=2)
    for new, old in zip(top.outputs, node.outputs, strict=True):
        new.type, new.shape = old.type, old.shape
    values = step.op("Neg", [top.outputs[0]])
    step.replace_with([values, top.outputs[1]])
