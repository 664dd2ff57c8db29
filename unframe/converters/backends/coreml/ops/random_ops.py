"""Random ops: RandomUniformLike RandomUniform RandomNormalLike RandomNormal Bernoulli, as MIL's
random_uniform / random_normal.

Their values can't be compared with another runtime's: parity can only check what is
deterministic about them (shape, dtype, and for the uniform ones the range). A ``seed``
attribute is passed on (Core ML's generator is not onnxruntime's: the same seed gives other
numbers); without one each run draws anew.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.converters.backends.coreml.context import TranslateContext
from unframe.converters.backends.coreml.ops import translator
from unframe.converters.backends.coreml.ops._util import cast, mb, shape_of


def _seed(ctx: TranslateContext) -> int:
    seed = ctx.attr("seed")
    return -1 if seed is None else int(seed)


def _shape(ctx: TranslateContext) -> Any:
    if ctx.node.op_type.endswith("Like"):
        return shape_of(ctx.x(0))
    return np.array([int(d) for d in ctx.attr("shape")], np.int32)


def _typed(ctx: TranslateContext, values: Any) -> Any:
    """MIL draws float32; an fp16 output (the dtype attribute) is cast."""
    return cast(values, "fp16") if ctx.onnx_out_type(0) == ir.DataType.FLOAT16 else values


@translator("RandomUniformLike", "RandomUniform")
def random_uniform(ctx: TranslateContext) -> Any:
    return _typed(ctx, mb().random_uniform(shape=_shape(ctx), low=np.float32(ctx.attr("low", 0.0)),
                                           high=np.float32(ctx.attr("high", 1.0)), seed=_seed(ctx)))


@translator("RandomNormalLike", "RandomNormal")
def random_normal(ctx: TranslateContext) -> Any:
    return _typed(ctx, mb().random_normal(shape=_shape(ctx), mean=np.float32(ctx.attr("mean", 0.0)),
                                          stddev=np.float32(ctx.attr("scale", 1.0)), seed=_seed(ctx)))


@translator("Bernoulli")
def bernoulli(ctx: TranslateContext) -> Any:
    """1 where a uniform draw in [0, 1) falls below the element's probability (MIL's
    random_bernoulli takes one constant probability, not one per element)."""
    m, p = mb(), ctx.x(0)
    draw = m.random_uniform(shape=shape_of(p), low=np.float32(0.0), high=np.float32(1.0), seed=_seed(ctx))
    hit = m.less(x=draw, y=cast(p, "fp32"))
    out = ctx.onnx_out_type(0)
    if out == ir.DataType.BOOL:
        return hit
    return m.cast(x=hit, dtype="int32" if out is not None and not out.is_floating_point() else "fp32")
