"""Activations: Relu, Sigmoid, Tanh, LeakyRelu, Elu, Selu, Celu, PRelu, HardSigmoid, HardSwish,
Softplus, Softsign, ThresholdedRelu, Mish, Gelu, Erf, Shrink, Softmax, LogSoftmax, Hardmax."""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.context import TranslateContext
from unframe.converters.backends.coreml.ops import translator
from unframe.converters.backends.coreml.ops._util import mb, norm_axis, scalar


def _unary(mil_op: str) -> Any:
    def fn(ctx: TranslateContext) -> Any:
        return getattr(mb(), mil_op)(x=ctx.x(0))

    fn.__name__ = f"translate_{mil_op}"
    return fn


for _onnx, _mil in {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Softsign": "softsign",
                    "Erf": "erf"}.items():
    translator(_onnx)(_unary(_mil))


@translator("Softplus")
def softplus(ctx: TranslateContext) -> Any:
    # log(1 + exp(x)) written stably: max(x, 0) + log(1 + exp(-|x|))
    m, x = mb(), ctx.x(0)
    pos = m.relu(x=x)
    tail = m.log(x=m.add(x=m.exp(x=m.mul(x=m.abs(x=x), y=scalar(-1, x))), y=scalar(1, x)))
    return m.add(x=pos, y=tail)


@translator("LeakyRelu")
def leaky_relu(ctx: TranslateContext) -> Any:
    return mb().leaky_relu(x=ctx.x(0), alpha=float(ctx.attr("alpha", 0.01)))


@translator("Elu")
def elu(ctx: TranslateContext) -> Any:
    return mb().elu(x=ctx.x(0), alpha=float(ctx.attr("alpha", 1.0)))


@translator("Selu")
def selu(ctx: TranslateContext) -> Any:
    alpha = float(ctx.attr("alpha", 1.67326319217681884765625))
    gamma = float(ctx.attr("gamma", 1.05070102214813232421875))
    return mb().mul(x=mb().elu(x=ctx.x(0), alpha=alpha), y=scalar(gamma, ctx.x(0)))


@translator("Celu")
def celu(ctx: TranslateContext) -> Any:
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)) == elu(x / alpha) * alpha."""
    m, x = mb(), ctx.x(0)
    alpha = float(ctx.attr("alpha", 1.0))
    return m.mul(x=m.elu(x=m.real_div(x=x, y=scalar(alpha, x)), alpha=1.0), y=scalar(alpha, x))


@translator("PRelu")
def prelu(ctx: TranslateContext) -> Any:
    m, x, slope = mb(), ctx.x(0), ctx.x(1)
    return m.select(cond=m.less(x=x, y=scalar(0, x)), a=m.mul(x=x, y=slope), b=x)


@translator("HardSigmoid")
def hard_sigmoid(ctx: TranslateContext) -> Any:
    return mb().sigmoid_hard(x=ctx.x(0), alpha=float(ctx.attr("alpha", 0.2)),
                             beta=float(ctx.attr("beta", 0.5)))


@translator("HardSwish")
def hard_swish(ctx: TranslateContext) -> Any:
    x = ctx.x(0)
    return mb().mul(x=x, y=mb().sigmoid_hard(x=x, alpha=1.0 / 6, beta=0.5))


@translator("ThresholdedRelu")
def thresholded_relu(ctx: TranslateContext) -> Any:
    m, x = mb(), ctx.x(0)
    alpha = float(ctx.attr("alpha", 1.0))
    return m.select(cond=m.greater(x=x, y=scalar(alpha, x)), a=x, b=scalar(0, x))


@translator("Mish")
def mish(ctx: TranslateContext) -> Any:
    x = ctx.x(0)
    return mb().mul(x=x, y=mb().tanh(x=softplus(ctx)))


def _gelu_check(node: Any) -> list[str]:
    a = node.attributes.get("approximate")
    mode = a.value if a is not None else "none"
    return [] if mode in ("none", "tanh") else [f"approximate={mode!r} is not a Gelu mode"]


@translator("Gelu", check=_gelu_check)
def gelu(ctx: TranslateContext) -> Any:
    mode = "TANH_APPROXIMATION" if ctx.attr("approximate", "none") == "tanh" else "EXACT"
    return mb().gelu(x=ctx.x(0), mode=mode)


@translator("Shrink")
def shrink(ctx: TranslateContext) -> Any:
    m, x = mb(), ctx.x(0)
    bias, lambd = float(ctx.attr("bias", 0.0)), float(ctx.attr("lambd", 0.5))
    low = m.select(cond=m.less(x=x, y=scalar(-lambd, x)), a=m.add(x=x, y=scalar(bias, x)), b=scalar(0, x))
    return m.select(cond=m.greater(x=x, y=scalar(lambd, x)), a=m.sub(x=x, y=scalar(bias, x)), b=low)


@translator("Softmax")
def softmax(ctx: TranslateContext) -> Any:
    return mb().softmax(x=ctx.x(0), axis=int(ctx.attr("axis", -1)))


@translator("LogSoftmax")
def log_softmax(ctx: TranslateContext) -> Any:
    m, x = mb(), ctx.x(0)
    axis = int(ctx.attr("axis", -1))
    return m.sub(x=x, y=m.reduce_log_sum_exp(x=x, axes=[axis], keep_dims=True))


@translator("Hardmax")
def hardmax(ctx: TranslateContext) -> Any:
    m, x = mb(), ctx.x(0)
    axis = norm_axis(int(ctx.attr("axis", -1)), ctx.rank(0))
    depth = x.shape[axis]
    if not isinstance(depth, (int, np.integer)):
        raise ctx.err("Hardmax needs a static size on its axis")
    idx = m.reduce_argmax(x=x, axis=axis, keep_dims=False)
    return m.one_hot(indices=idx, one_hot_vector_size=int(depth), axis=axis,
                     on_value=scalar(1, x), off_value=scalar(0, x))
