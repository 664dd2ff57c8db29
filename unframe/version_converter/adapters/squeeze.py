"""Squeeze / Unsqueeze: ``axes`` attribute -> input at 13.

12->13::  Unsqueeze(x, axes=[0])   ->  Unsqueeze(x, Constant([0]))
13->12::  Unsqueeze(x, axes_input) ->  Unsqueeze(x, axes=folded)   (refused when not foldable)
"""

from __future__ import annotations

import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.moves import attr_to_input, input_to_attr, require_types
from unframe.version_converter.registry import adapter


def _upgrade(node: ir.Node, step: Step) -> None:
    attr_to_input(step, "axes", 1)


def _downgrade(node: ir.Node, step: Step) -> None:
    require_types(step)
    present = input_to_attr(step, 1, "axes")
    if not present and node.op_type == "Unsqueeze":
        step.refuse("Unsqueeze without axes")


for _op in ("Squeeze", "Unsqueeze"):
    adapter(_op, 12, 13)(_upgrade)
    adapter(_op, 13, 12)(_downgrade)
