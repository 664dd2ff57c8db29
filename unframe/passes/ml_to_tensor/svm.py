"""SVMRegressor and SVMClassifier (linear, poly, rbf, sigmoid kernels), in float32 as
onnxruntime computes them.

Before::   X -> SVMClassifier -> (label, scores)
After::    X -> kernel K(X, support vectors) [N, S]
             -> MatMul(pairwise coefficients) + rho -> one-vs-one decision values [N, P]
             -> votes (d > 0: the first class of the pair) -> ArgMax -> Gather(labels) -> label
             -> scores: the decision values (several pairs), or [-d, d] / [1 - p, p] (one pair)

Kernels: LINEAR x.sv, POLY (gamma x.sv + coef0)^degree, SIGMOID tanh(gamma x.sv + coef0), RBF
exp(-gamma sum((x - sv)^2)) from the differences themselves (as onnxruntime does, not the
expanded ``|x|^2 + |sv|^2 - 2 x.sv``, which loses digits when x lies near a support vector).
Without support vectors the model is liblinear's: one row of coefficients per class.
Probability estimates (``prob_a``/``prob_b``, ``SVC(probability=True)``): libsvm's pairwise
coupling, a Loop of its coordinate-descent sweeps (``coupling.py``); the label stays the vote's,
as in libsvm and onnxruntime.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

import unframe.passes.ml_to_tensor.coupling as coupling
import unframe.passes.ml_to_tensor.scores as scores
from unframe.passes.ml_to_tensor.builder import Emitter
from unframe.passes.ml_to_tensor.registry import LowerContext, Unsupported, attr_value, lowering

F = ir.DataType.FLOAT
B = ir.DataType.BOOL
I64 = ir.DataType.INT64
KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")


def _floats(node: ir.Node, name: str) -> np.ndarray:
    return np.asarray(attr_value(node, name, []) or [], np.float32)


def kernel(emit: Emitter, x: ir.Value, vectors: np.ndarray, kind: str,
           params: np.ndarray) -> ir.Value:
    """K(x, sv) for every row and support vector: [N, S]."""
    gamma, coef0, degree = (list(params) + [0.0, 0.0, 0.0])[:3]
    x = emit.cast(x, F)
    if kind == "RBF":
        diff = emit.op("Sub", [emit.unsqueeze(x, [1]), emit.const(vectors[None], "support_vectors")],
                       dtype=F)
        dist = emit.reduce("ReduceSum", emit.op("Mul", [diff, diff], dtype=F), [2], keepdims=False)
        return emit.op("Exp", [emit.op("Mul", [dist, emit.scalar(-gamma, np.float32)], dtype=F)],
                       dtype=F)
    dot = emit.op("MatMul", [x, emit.const(np.ascontiguousarray(vectors.T), "support_vectors")],
                  dtype=F)
    if kind == "LINEAR":
        return dot
    inner = emit.op("Add", [emit.op("Mul", [dot, emit.scalar(gamma, np.float32)], dtype=F),
                            emit.scalar(coef0, np.float32)], dtype=F)
    if kind == "POLY":
        return emit.op("Pow", [inner, emit.scalar(degree, np.float32)], dtype=F)
    return emit.op("Tanh", [inner], dtype=F)


def _kind(node: ir.Node) -> str:
    kind = str(attr_value(node, "kernel_type", "LINEAR"))
    if kind not in KERNELS:
        raise Unsupported(f"unknown kernel_type {kind!r}")
    return kind


# -- SVMRegressor ----------------------------------------------------------------------------------

def _check_regressor(node: ir.Node) -> list[str]:
    post = attr_value(node, "post_transform", "NONE")
    if post not in ("NONE", "PROBIT"):
        return [f"post_transform {post} on an SVM regressor"]
    try:
        _kind(node)
    except Unsupported as why:
        return [why.reason]
    return []


@lowering("SVMRegressor", check=_check_regressor,
          summary="kernel, MatMul with the dual coefficients, + rho (one-class: sign)")
def svm_regressor(ctx: LowerContext) -> Sequence[ir.Value]:
    emit = ctx.emit
    node = ctx.node
    coef = _floats(node, "coefficients")
    rho = _floats(node, "rho")
    n_sv = int(ctx.attr("n_supports", 0))
    vectors = _floats(node, "support_vectors")
    bias = emit.scalar(float(rho[0]) if rho.size else 0.0, np.float32)
    if n_sv > 0:
        k = kernel(emit, ctx.x, vectors.reshape(n_sv, -1), _kind(node), _floats(node, "kernel_params"))
        y = emit.op("MatMul", [k, emit.const(coef.reshape(-1, 1), "coefficients")], dtype=F)
    else:  # liblinear: x . coefficients
        y = emit.op("MatMul", [emit.cast(ctx.x, F), emit.const(coef.reshape(-1, 1), "coefficients")],
                    dtype=F)
    y = emit.op("Add", [y, bias], dtype=F)
    if int(ctx.attr("one_class", 0)):
        positive = emit.op("Greater", [y, emit.scalar(0.0, np.float32)], dtype=B)
        y = emit.where(positive, emit.scalar(1.0, np.float32), emit.scalar(-1.0, np.float32))
    if ctx.attr("post_transform", "NONE") == "PROBIT":
        y = scores.probit(emit, y)
    return [y]


# -- SVMClassifier ---------------------------------------------------------------------------------

def _labels(node: ir.Node) -> np.ndarray:
    strings = attr_value(node, "classlabels_strings")
    if strings:
        return np.asarray(strings, dtype=object)
    return np.asarray(attr_value(node, "classlabels_ints", []), np.int64)


def _check_classifier(node: ir.Node) -> list[str]:
    out = []
    out.extend(_check_probabilities(node))
    try:
        _kind(node)
    except Unsupported as why:
        out.append(why.reason)
    if len(_labels(node)) < 2:
        out.append("fewer than two class labels")
    if len(_labels(node)) == 2 and attr_value(node, "post_transform", "NONE") == "PROBIT":
        out.append("PROBIT on a two-class SVM (onnxruntime leaves the second score undefined)")
    return out


def _check_probabilities(node: ir.Node) -> list[str]:
    """What libsvm's coupling needs: one (A, B) per pair, scores written as they come."""
    prob_a, prob_b = attr_value(node, "prob_a") or [], attr_value(node, "prob_b") or []
    per_class = attr_value(node, "vectors_per_class") or []
    if not prob_a or not sum(int(v) for v in per_class):
        return []  # liblinear models: onnxruntime ignores the estimates, and so does the lowering
    c = len(_labels(node))
    out = []
    if len(prob_a) != c * (c - 1) // 2 or len(prob_b) != len(prob_a):
        out.append(f"{len(prob_a)} prob_a / {len(prob_b)} prob_b values for {c} classes "
                   f"(one per pair: {c * (c - 1) // 2})")
    post = attr_value(node, "post_transform", "NONE")
    if post != "NONE":
        out.append(f"post_transform {post} on probability estimates")
    return out


@lowering("SVMClassifier", check=_check_classifier,
          summary="kernel, one-vs-one decision values by MatMul, votes, ArgMax; probability "
                  "estimates by libsvm's pairwise coupling (a Loop of its sweeps)")
def svm_classifier(ctx: LowerContext) -> Sequence[ir.Value]:
    node = ctx.node
    labels = _labels(node)
    per_class = [int(v) for v in ctx.attr("vectors_per_class", []) or []]
    if sum(per_class) > 0:
        return _one_vs_one(ctx, labels, per_class)
    return _liblinear(ctx, labels)


def _one_vs_one(ctx: LowerContext, labels: np.ndarray, per_class: list[int]) -> list[ir.Value]:
    emit = ctx.emit
    node = ctx.node
    c = len(labels)
    n_sv = sum(per_class)
    coef = _floats(node, "coefficients").reshape(-1, n_sv)  # [classes - 1, S]
    rho = _floats(node, "rho")
    starts = np.concatenate([[0], np.cumsum(per_class)[:-1]]).astype(int)
    pairs = [(i, j) for i in range(c - 1) for j in range(i + 1, c)]
    weights = np.zeros((n_sv, len(pairs)), np.float32)
    first = np.zeros((len(pairs), c), np.float32)
    second = np.zeros((len(pairs), c), np.float32)
    for k, (i, j) in enumerate(pairs):
        si, sj = starts[i], starts[j]
        weights[si:si + per_class[i], k] = coef[j - 1, si:si + per_class[i]]
        weights[sj:sj + per_class[j], k] = coef[i, sj:sj + per_class[j]]
        first[k, i] = 1.0
        second[k, j] = 1.0
    vectors = _floats(node, "support_vectors").reshape(n_sv, -1)
    k_mat = kernel(emit, ctx.x, vectors, _kind(node), _floats(node, "kernel_params"))
    d = emit.op("MatMul", [k_mat, emit.const(weights, "pair_coefficients")], dtype=F)
    d = emit.op("Add", [d, emit.const(rho[:len(pairs)].reshape(1, -1), "rho")], dtype=F)
    positive = emit.cast(emit.op("Greater", [d, emit.scalar(0.0, np.float32)], dtype=B), F)
    negative = emit.op("Sub", [emit.scalar(1.0, np.float32), positive], dtype=F)
    votes = emit.op("Add", [emit.op("MatMul", [positive, emit.const(first, "first")], dtype=F),
                            emit.op("MatMul", [negative, emit.const(second, "second")], dtype=F)],
                    dtype=F)
    index = emit.op("ArgMax", [votes], {"axis": 1, "keepdims": 0}, dtype=I64)
    label = emit.gather(emit.const(labels, "labels"), index)
    if attr_value(node, "prob_a"):  # the label stays the vote's, as in libsvm
        prob_a, prob_b = _floats(node, "prob_a"), _floats(node, "prob_b")
        return [label, coupling.probabilities(emit, d, prob_a, prob_b, c)]
    post = ctx.attr("post_transform", "NONE")
    if len(pairs) > 1:
        return [label, scores.transform(emit, d, post)]
    # one pair (measured on onnxruntime 1.31): [-d, d] without a transform, [1 - p, p] with one,
    # p = sigmoid(d) under LOGISTIC and d itself under the others
    if post == "NONE":
        return [label, emit.op("Concat", [emit.op("Neg", [d], dtype=F), d], {"axis": 1}, dtype=F)]
    p = scores.logistic(emit, d) if post == "LOGISTIC" else d
    lead = emit.op("Sub", [emit.scalar(1.0, np.float32), p], dtype=F)
    return [label, emit.op("Concat", [lead, p], {"axis": 1}, dtype=F)]


def _liblinear(ctx: LowerContext, labels: np.ndarray) -> list[ir.Value]:
    emit = ctx.emit
    node = ctx.node
    c = len(labels)
    coef = _floats(node, "coefficients").reshape(c, -1)
    rho = _floats(node, "rho")
    s = emit.op("MatMul", [emit.cast(ctx.x, F), emit.const(np.ascontiguousarray(coef.T), "coefficients")],
                dtype=F)
    s = emit.op("Add", [s, emit.scalar(float(rho[0]) if rho.size else 0.0, np.float32)], dtype=F)
    index = emit.op("ArgMax", [s], {"axis": 1, "keepdims": 0}, dtype=I64)
    if c == 2:  # onnxruntime's binary rule on the best score
        best = emit.reduce("ReduceMax", s, [1], keepdims=False)
        all_positive = bool(np.all(coef >= 0))
        cut = emit.scalar(0.5, np.float32) if all_positive else emit.scalar(0.0, np.float32)
        op = "GreaterOrEqual" if all_positive else "Greater"
        wins = emit.op(op, [best, cut], dtype=B)
        index = emit.where(wins, emit.const(np.asarray(1, np.int64), "one"), index)
    label = emit.gather(emit.const(labels, "labels"), index)
    return [label, scores.transform(emit, s, ctx.attr("post_transform", "NONE"))]
