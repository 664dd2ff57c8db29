"""Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax, ArgMin."""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.context import TranslateContext
from unframe.converters.backends.coreml.ops import translator
from unframe.converters.backends.coreml.ops._util import mb, norm_axis

_REDUCE = {
    "ReduceSum": "reduce_sum", "ReduceMean": "reduce_mean", "ReduceMax": "reduce_max",
    "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod", "ReduceL1": "reduce_l1_norm",
    "ReduceL2": "reduce_l2_norm", "ReduceLogSum": "reduce_log_sum",
    "ReduceLogSumExp": "reduce_log_sum_exp", "ReduceSumSquare": "reduce_sum_square",
}


def _reduce(mil_op: str) -> Any:
    def fn(ctx: TranslateContext) -> Any:
        x = ctx.x(0)
        keep = bool(int(ctx.attr("keepdims", 1)))
        axes = ctx.ints(1) if ctx.has(1) else None
        if ctx.has(1) and axes is None:
            raise ctx.err("reduction axes must be constant")
        if not axes:
            if int(ctx.attr("noop_with_empty_axes", 0)):
                return mb().identity(x=x)
            axes = list(range(ctx.rank(0)))
        rank = ctx.rank(0)
        if rank == 0:
            return mb().identity(x=x)
        axes = sorted(norm_axis(a, rank) for a in axes)
        # ReduceL2 and ReduceLogSum run in float32 (validate.rounding.FLOAT32_INSIDE: the graph walk)
        return getattr(mb(), mil_op)(x=x, axes=axes, keep_dims=keep)

    fn.__name__ = f"translate_{mil_op}"
    return fn


for _onnx, _mil in _REDUCE.items():
    translator(_onnx)(_reduce(_mil))


def _arg(mil_op: str) -> Any:
    def fn(ctx: TranslateContext) -> Any:
        m, x = mb(), ctx.x(0)
        axis = norm_axis(int(ctx.attr("axis", 0)), ctx.rank(0))
        keep = bool(int(ctx.attr("keepdims", 1)))
        if not int(ctx.attr("select_last_index", 0)):
            return getattr(m, mil_op)(x=x, axis=axis, keep_dims=keep)
        # the last extreme index: search the reversed tensor, then mirror the index
        size = x.shape[axis]
        if not isinstance(size, (int, np.integer)):
            raise ctx.err("select_last_index needs a static size on the reduced axis")
        idx = getattr(m, mil_op)(x=m.reverse(x=x, axes=[axis]), axis=axis, keep_dims=keep)
        return m.sub(x=np.int32(int(size) - 1), y=idx)

    fn.__name__ = f"translate_{mil_op}"
    return fn


translator("ArgMax")(_arg("reduce_argmax"))
translator("ArgMin")(_arg("reduce_argmin"))
