"""Max, Min, Sum, Mean: multidirectional broadcasting from opset 8.

7->8::  unchanged (8 accepts everything 7 does).
8->7::  unchanged when every input has the same known shape; refused otherwise.
"""

from __future__ import annotations

import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.generic import generic_step
from unframe.version_converter.registry import adapter


def _upgrade(node: ir.Node, step: Step) -> None:
    generic_step(node, step, semantics_handled=True)


def _downgrade(node: ir.Node, step: Step) -> None:
    shapes = [step.static_shape(v) for v in node.inputs if v is not None]
    if any(s is None for s in shapes) or len(set(shapes)) > 1:
        step.refuse("inputs broadcast (or have unknown shapes); opset 7 needs equal shapes")
    generic_step(node, step, semantics_handled=True)


for _op in ("Max", "Min", "Sum", "Mean"):
    adapter(_op, 7, 8)(_upgrade)
    adapter(_op, 8, 7)(_downgrade)
