"""Scatter (removed at 11) and ScatterElements (introduced at 11): the same computation.

Scatter 10->11::          Scatter(data, idx, upd, axis=a)          ->  ScatterElements(..., axis=a)
ScatterElements 11->10::  ScatterElements(data, idx, upd, axis=a)  ->  Scatter(..., axis=a)
"""

from __future__ import annotations

import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.registry import adapter


@adapter("Scatter", 10, 11)
def scatter_10_11(node: ir.Node, step: Step) -> None:
    step.replace_with([step.op("ScatterElements", list(node.inputs), {"axis": step.attr("axis", 0)})])


@adapter("ScatterElements", 11, 10)
def scatter_elements_11_10(node: ir.Node, step: Step) -> None:
    axis = step.attr("axis", 0)
    if axis < 0:
        rank = step.rank(node.inputs[0])
        if rank is None:
            step.refuse("negative axis needs a known rank before opset 11")
        axis %= rank
    step.replace_with([step.op("Scatter", list(node.inputs), {"axis": axis})])
