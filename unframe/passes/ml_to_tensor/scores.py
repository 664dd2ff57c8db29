"""Score post-transforms of the ONNX-ML classifiers and regressors, as onnxruntime computes them.

``NONE``, ``LOGISTIC`` (a sigmoid per score), ``SOFTMAX`` (over the classes), ``SOFTMAX_ZERO``
(a softmax that leaves scores within 1e-7 of zero out of the sum and scales them by
``exp(-max)`` instead) and ``PROBIT`` (``sqrt(2) * erfinv(2p - 1)``, with onnxruntime's closed-form
approximation of erfinv, Winitzki's with a = 0.147, so that the numbers are the runtime's).
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from unframe.passes.ml_to_tensor.builder import Emitter

F = ir.DataType.FLOAT
B = ir.DataType.BOOL
SOFTMAX_ZERO_EPS = 1e-7
_ERFINV_A = 0.147


def transform(emit: Emitter, z: ir.Value, post: str) -> ir.Value:
    """``z`` [N, C] float32 after ``post`` (the several-scores form)."""
    if post == "NONE":
        return z
    if post == "LOGISTIC":
        return emit.op("Sigmoid", [z], dtype=F)
    if post == "SOFTMAX":
        return emit.op("Softmax", [z], {"axis": -1}, dtype=F)
    if post == "SOFTMAX_ZERO":
        return softmax_zero(emit, z)
    if post == "PROBIT":
        return probit(emit, z)
    raise ValueError(f"unknown post_transform {post!r}")


def softmax_zero(emit: Emitter, z: ir.Value) -> ir.Value:
    f32 = np.float32
    vmax = emit.reduce("ReduceMax", z, [-1], keepdims=True)
    nonzero = emit.op("Greater", [emit.op("Abs", [z], dtype=F), emit.scalar(SOFTMAX_ZERO_EPS, f32)],
                      dtype=B)
    shifted = emit.op("Exp", [emit.op("Sub", [z, vmax], dtype=F)], dtype=F)
    scaled = emit.op("Mul", [z, emit.op("Exp", [emit.op("Neg", [vmax], dtype=F)], dtype=F)], dtype=F)
    e = emit.where(nonzero, shifted, scaled)
    total = emit.reduce("ReduceSum", emit.where(nonzero, shifted, emit.scalar(0.0, f32)), [-1],
                        keepdims=True)
    return emit.op("Div", [e, total], dtype=F)


def probit(emit: Emitter, p: ir.Value) -> ir.Value:
    """sqrt(2) * erfinv(2p - 1), erfinv(x) ~ sgn(x) sqrt(sqrt(v^2 - ln(1-x^2)/a) - v),
    v = 2/(pi a) + ln(1-x^2)/2."""
    f32 = np.float32
    x = emit.op("Sub", [emit.op("Mul", [p, emit.scalar(2.0, f32)], dtype=F), emit.scalar(1.0, f32)],
                dtype=F)
    sign = emit.where(emit.op("Less", [x, emit.scalar(0.0, f32)], dtype=B), emit.scalar(-1.0, f32),
                      emit.scalar(1.0, f32))
    one_minus = emit.op("Mul", [emit.op("Sub", [emit.scalar(1.0, f32), x], dtype=F),
                                emit.op("Add", [emit.scalar(1.0, f32), x], dtype=F)], dtype=F)
    log = emit.op("Log", [one_minus], dtype=F)
    v = emit.op("Add", [emit.scalar(2.0 / (math.pi * _ERFINV_A), f32),
                        emit.op("Mul", [emit.scalar(0.5, f32), log], dtype=F)], dtype=F)
    v2 = emit.op("Mul", [emit.scalar(1.0 / _ERFINV_A, f32), log], dtype=F)
    inner = emit.op("Sqrt", [emit.op("Sub", [emit.op("Mul", [v, v], dtype=F), v2], dtype=F)],
                    dtype=F)
    root = emit.op("Sqrt", [emit.op("Sub", [inner, v], dtype=F)], dtype=F)
    return emit.op("Mul", [emit.op("Mul", [sign, root], dtype=F), emit.scalar(math.sqrt(2.0), f32)],
                   dtype=F)


def logistic(emit: Emitter, z: ir.Value) -> ir.Value:
    return emit.op("Sigmoid", [z], dtype=F)
