"""ZipMap and CastMap: the ML domain's maps, which no tensor runtime holds.

ZipMap::   probabilities [N, C] -> ZipMap -> [{label: p, ...}, ...]
After::    probabilities [N, C]                (columns in the order of ZipMap's labels)

The output keeps its name and becomes the plain probability matrix; the column order is the
stated host-side mapping (``LowerReport.zipmap_columns``), with which a runner turns the original
model's list of dicts into the same matrix for comparison.

CastMap turns a map input into a tensor; a map can't be a Core ML or TensorRT input, so the model
must take the dense tensor itself (feed the values in key order): refused with that hint.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from unframe.passes.ml_to_tensor.registry import LowerContext, Unsupported, attr_value, lowering


def _check_zipmap(node: ir.Node) -> list[str]:
    out = node.outputs[0]
    if out.uses():
        return ["ZipMap's output feeds other nodes; only a ZipMap on a graph output is removed"]
    return []


@lowering("ZipMap", check=_check_zipmap, summary="removed: the probability tensor itself")
def zipmap(ctx: LowerContext) -> Sequence[ir.Value]:
    labels = attr_value(ctx.node, "classlabels_strings") or attr_value(ctx.node, "classlabels_int64s")
    if labels is None:
        raise Unsupported("ZipMap without class labels")
    ctx.zipmap_columns = list(labels)
    x = ctx.x
    out = ctx.emit.op("Identity", [x], dtype=x.dtype or ir.DataType.FLOAT)
    out.shape = x.shape
    return [out]


def _check_cast_map(node: ir.Node) -> list[str]:
    return ["a map input can't reach a tensor runtime; export the model with a dense tensor "
            "input (the values in key order) instead of CastMap"]


@lowering("CastMap", check=_check_cast_map, summary="refused: take the dense tensor as the input")
def cast_map(ctx: LowerContext) -> Sequence[ir.Value]:
    raise Unsupported(_check_cast_map(ctx.node)[0])
