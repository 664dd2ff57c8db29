"""DepthToSpace ``mode`` (added at opset 11) and SpaceToDepth ``mode`` (added at opset 28).

Both modes default to DCR, the only order before; CRD is written out as the spec's
Reshape / Transpose / Reshape (bs = blocksize; a 0 in a Reshape shape copies the batch)::

DepthToSpace 11->10, mode=CRD:
    DepthToSpace(x[b,c,h,w])  ->  Reshape(Transpose(Reshape(x, [0, c/bs², bs, bs, h, w]),
                                                    [0, 1, 4, 2, 5, 3]), [0, c/bs², h*bs, w*bs])
SpaceToDepth 28->27, mode=CRD:
    SpaceToDepth(x[b,c,h,w])  ->  Reshape(Transpose(Reshape(x, [0, c, h/bs, bs, w/bs, bs]),
                                                    [0, 1, 3, 5, 2, 4]), [0, c*bs², h/bs, w/bs])

Static sizes go into constant shapes; sizes known only at run time come from Shape(x) (Gather, Mul,
Div, Concat). mode=DCR: the generic step drops the default.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.generic import generic_step
from unframe.version_converter.moves import require_types
from unframe.version_converter.registry import adapter

Dim = int | ir.Value  # a static size, or a run-time [1] int64 tensor


def _dims(step: Step, x: ir.Value) -> list[Dim]:
    """c, h, w of an NCHW input: ints where static, Gathers of Shape(x) where not."""
    shape = list(x.shape) if x.shape is not None else []
    if len(shape) == 4 and all(isinstance(d, int) for d in shape[1:]):
        return shape[1:]
    shape_of = step.op("Shape", [x])
    shape_of.type, shape_of.shape = ir.TensorType(ir.DataType.INT64), ir.Shape([4])
    out: list[Dim] = []
    for i in (1, 2, 3):
        if len(shape) == 4 and isinstance(shape[i], int):
            out.append(shape[i])
            continue
        dim = step.op("Gather", [shape_of, step.const(np.asarray([i], dtype=np.int64))], {"axis": 0})
        dim.type, dim.shape = ir.TensorType(ir.DataType.INT64), ir.Shape([1])
        out.append(dim)
    return out


def _scaled(step: Step, dim: Dim, factor: int, op: str) -> Dim:
    if isinstance(dim, int):
        return dim * factor if op == "Mul" else dim // factor
    out = step.op(op, [dim, step.const(np.asarray([factor], dtype=np.int64))])
    out.type, out.shape = dim.type, dim.shape
    return out


def _shape(step: Step, parts: list[Dim]) -> ir.Value:
    if all(isinstance(p, int) for p in parts):
        return step.const(np.asarray(parts, dtype=np.int64))
    pieces = [p if isinstance(p, ir.Value) else step.const(np.asarray([p], dtype=np.int64)) for p in parts]
    out = step.op("Concat", pieces, {"axis": 0})
    out.type, out.shape = ir.TensorType(ir.DataType.INT64), ir.Shape([len(parts)])
    return out


def _rearrange(node: ir.Node, step: Step, plan: Callable[[Step, list[Dim], int], tuple[list[Dim], list[Dim]]],
               perm: list[int]) -> None:
    """Reshape / Transpose / Reshape with the two shapes ``plan`` builds from (c, h, w) and blocksize."""
    x = node.inputs[0]
    if step.rank(x) not in (None, 4):
        step.refuse(f"{node.op_type} takes a 4-D input")
    require_types(step)
    first, second = plan(step, _dims(step, x), int(step.attr("blocksize")))
    tmp = step.op("Reshape", [x, _shape(step, first)])
    tmp.type = x.type
    moved = step.op("Transpose", [tmp], {"perm": perm})
    moved.type = x.type
    step.replace_with([step.op("Reshape", [moved, _shape(step, second)])])


def _depth_to_space_crd(step: Step, dims: list[Dim], bs: int) -> tuple[list[Dim], list[Dim]]:
    c, h, w = dims
    depth = _scaled(step, c, bs * bs, "Div")
    return [0, depth, bs, bs, h, w], [0, depth, _scaled(step, h, bs, "Mul"), _scaled(step, w, bs, "Mul")]


def _space_to_depth_crd(step: Step, dims: list[Dim], bs: int) -> tuple[list[Dim], list[Dim]]:
    c, h, w = dims
    rows, cols = _scaled(step, h, bs, "Div"), _scaled(step, w, bs, "Div")
    return [0, c, rows, bs, cols, bs], [0, _scaled(step, c, bs * bs, "Mul"), rows, cols]


@adapter("DepthToSpace", 11, 10)
def depth_to_space_11_10(node: ir.Node, step: Step) -> None:
    if step.attr("mode", "DCR") != "CRD":
        generic_step(node, step)
        return
    _rearrange(node, step, _depth_to_space_crd, [0, 1, 4, 2, 5, 3])


@adapter("SpaceToDepth", 28, 27)
def space_to_depth_28_27(node: ir.Node, step: Step) -> None:
    if step.attr("mode", "DCR") != "CRD":
        generic_step(node, step)
        return
    _rearrange(node, step, _space_to_depth_crd, [0, 1, 3, 5, 2, 4])
