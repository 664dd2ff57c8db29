"""LinearRegressor and LinearClassifier, computed in float32 as onnxruntime does.

Before::   X -> LinearClassifier -> (label, scores)
After::    X -> Cast(float) -> MatMul(coefficients^T) -> Add(intercepts) -> s
             s -> ArgMax -> Gather(classlabels) -> label ; s -> post transform -> scores

One row of coefficients with two labels is a binary classifier: the label is ``s > 0``, and the
scores are ``[1 - p, p]`` with ``p = sigmoid(s)`` under LOGISTIC and ``p = s`` otherwise (the
other transforms are not applied; measured on onnxruntime 1.31).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

import unframe.passes.ml_to_tensor.scores as scores
from unframe.passes.ml_to_tensor.builder import Emitter
from unframe.passes.ml_to_tensor.registry import LowerContext, Unsupported, attr_value, lowering

F = ir.DataType.FLOAT
B = ir.DataType.BOOL
I64 = ir.DataType.INT64


def _weights(ctx: LowerContext, rows: int) -> tuple[np.ndarray, np.ndarray]:
    coef = np.asarray(ctx.attr("coefficients", []), np.float32)
    intercepts = np.asarray(ctx.attr("intercepts", []) or [0.0] * rows, np.float32)
    if rows <= 0 or coef.size % rows:
        raise Unsupported(f"{coef.size} coefficients do not split into {rows} rows")
    return coef.reshape(rows, -1), intercepts


def affine(emit: Emitter, x: ir.Value, coef: np.ndarray, intercepts: np.ndarray) -> ir.Value:
    """Cast(x, float) @ coef^T + intercepts: [N, rows]."""
    x = emit.cast(x, F)
    if x.shape is not None and len(x.shape) == 1:
        x = emit.unsqueeze(x, [0])
    s = emit.op("MatMul", [x, emit.const(np.ascontiguousarray(coef.T), "coefficients")], dtype=F)
    return emit.op("Add", [s, emit.const(intercepts.reshape(1, -1), "intercepts")], dtype=F)


def _check_regressor(node: ir.Node) -> list[str]:
    post = attr_value(node, "post_transform", "NONE")
    targets = int(attr_value(node, "targets", 1))
    if targets == 1 and post not in ("NONE", "PROBIT"):
        return [f"post_transform {post} on a single target"]
    return []


@lowering("LinearRegressor", check=_check_regressor,
          summary="MatMul + Add, then the post transform")
def linear_regressor(ctx: LowerContext) -> Sequence[ir.Value]:
    targets = int(ctx.attr("targets", 1))
    coef, intercepts = _weights(ctx, targets)
    s = affine(ctx.emit, ctx.x, coef, intercepts)
    return [scores.transform(ctx.emit, s, ctx.attr("post_transform", "NONE"))]


def _labels(node: ir.Node) -> tuple[np.ndarray, bool]:
    strings = attr_value(node, "classlabels_strings")
    if strings:
        return np.asarray(strings, dtype=object), True
    return np.asarray(attr_value(node, "classlabels_ints", []), np.int64), False


def _check_classifier(node: ir.Node) -> list[str]:
    labels, _ = _labels(node)
    rows = len(attr_value(node, "intercepts", []) or [])
    post = attr_value(node, "post_transform", "NONE")
    if rows == 1 and post == "PROBIT":
        return ["PROBIT on a binary classifier (onnxruntime writes undefined scores)"]
    if rows == 1 and len(labels) != 2 or rows > len(labels):
        return [f"{rows} rows of coefficients for {len(labels)} class labels"]
    return []


@lowering("LinearClassifier", check=_check_classifier,
          summary="MatMul + Add, ArgMax to the label, the post transform on the scores")
def linear_classifier(ctx: LowerContext) -> Sequence[ir.Value]:
    emit = ctx.emit
    rows = len(ctx.attr("intercepts", []) or [])
    coef, intercepts = _weights(ctx, rows)
    labels, _ = _labels(ctx.node)
    s = affine(emit, ctx.x, coef, intercepts)
    post = ctx.attr("post_transform", "NONE")
    table = emit.const(labels, "labels")
    if rows == 1:
        index = emit.squeeze(emit.cast(emit.op("Greater", [s, emit.scalar(0.0, np.float32)],
                                                dtype=B), I64), [1])
        p = scores.logistic(emit, s) if post == "LOGISTIC" else s
        z = emit.op("Concat", [emit.op("Sub", [emit.scalar(1.0, np.float32), p], dtype=F), p],
                    {"axis": 1}, dtype=F)
        return [emit.gather(table, index), z]
    index = emit.op("ArgMax", [s], {"axis": 1, "keepdims": 0}, dtype=I64)
    return [emit.gather(table, index), scores.transform(emit, s, post)]
