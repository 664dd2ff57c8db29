"""TopK: ``k`` attribute -> input at 10.

9->10::  TopK(x, k=3)        ->  TopK(x, Constant([3]))
10->9::  TopK(x, k_input)    ->  TopK(x, k=folded)   (refused when not foldable)
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.moves import input_to_attr, require_types
from unframe.version_converter.registry import adapter


@adapter("TopK", 9, 10)
def topk_9_10(node: ir.Node, step: Step) -> None:
    k = step.drop_attr("k")
    node.resize_inputs(2)
    node.replace_input_with(1, step.const(np.asarray([k], dtype=np.int64)))


@adapter("TopK", 10, 9)
def topk_10_9(node: ir.Node, step: Step) -> None:
    require_types(step)
    input_to_attr(step, 1, "k", kind="int")
