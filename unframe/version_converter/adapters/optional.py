"""OptionalHasElement / OptionalGetElement: from opset 18 they also take no input (HasElement) or a
plain tensor or sequence, where 15-17 take only an optional.

18->17 (no input: the optional is empty)::
    b = OptionalHasElement()           ->  b = Constant(False)
18->17 (a tensor or sequence, never empty)::
    b = OptionalHasElement(x)          ->  b = Constant(True)
    y = OptionalGetElement(x)          ->  y = Identity(x)
An optional input keeps the node as it is.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.generic import generic_step
from unframe.version_converter.registry import adapter


def _plain(step: Step, value: ir.Value) -> bool:
    """True for a tensor or sequence, False for an optional; refuses when the type is unknown."""
    if value.type is None:
        step.refuse("needs the type of its input (an optional or not) below opset 18")
    return not isinstance(value.type, ir.OptionalType)


@adapter("OptionalHasElement", 18, 17)
def optional_has_element_18_17(node: ir.Node, step: Step) -> None:
    value = step.input(0)
    if value is not None and not _plain(step, value):
        generic_step(node, step)
        return
    flag = step.const(np.asarray(value is not None, dtype=np.bool_))
    step.replace_with([step.op("Identity", [flag])])


@adapter("OptionalGetElement", 18, 17)
def optional_get_element_18_17(node: ir.Node, step: Step) -> None:
    value = node.inputs[0]
    if not _plain(step, value):
        generic_step(node, step)
        return
    step.replace_with([step.op("Identity", [value])])
