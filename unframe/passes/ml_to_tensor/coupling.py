"""libsvm's probability estimates for a one-vs-one SVC (``SVC(probability=True)``), in standard ops.

Each pair (i, j) of classes gives a Platt-scaled probability that the sample is of class i rather
than j, from its decision value d::

    r_ij = clip(1 / (1 + exp(d A_ij + B_ij)), 1e-7, 1 - 1e-7),    r_ji = 1 - r_ij

and the class probabilities p couple those pairwise estimates (Wu, Lin and Weng 2004, method 2):
p minimizes p'Qp subject to sum(p) = 1, with ``Q_tt = sum_{j != t} r_jt^2`` and
``Q_tj = -r_jt r_tj``. libsvm's ``multiclass_probability`` (and onnxruntime's SVMClassifier, and
scikit-learn's ``predict_proba``, which calls libsvm) solves it by coordinate descent from
``p = 1/k``, at most ``max(100, k)`` sweeps, stopping a sample as soon as
``max_t |(Qp)_t - p'Qp| < 0.005 / k``.

Here the sweeps are an ONNX ``Loop`` with that fixed trip count over all samples at once; a
sample that meets the stopping rule keeps its p from then on (a per-row ``done`` flag), so each
row stops at the sweep libsvm stops at. Every number is float32, as in onnxruntime's kernel
(libsvm computes in double; the two agree to ~1e-7 unless a row's error sits within rounding of
the threshold and stops one sweep apart).

Before::  SVMClassifier(X, prob_a, prob_b) -> label, probabilities
After::   d [N, P] (one-vs-one decision values, ``svm.py``) -> r -> Q [N, k, k]
            -> Loop(M = max(100, k)) body: one sweep (the k coordinate steps in order),
               p = Where(done, p, p_swept) -> probabilities [N, k]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.passes.ml_to_tensor.builder import Emitter

F = ir.DataType.FLOAT
B = ir.DataType.BOOL
I64 = ir.DataType.INT64
MIN_PROB = 1e-7
f32 = np.float32


def max_sweeps(k: int) -> int:
    return max(100, k)


class _BodyEmitter(Emitter):
    """Writes a Loop body's nodes; its constants go to the outer graph (read from outer scope)."""

    def __init__(self, body: ir.Graph, anchor: ir.Node, outer: Emitter) -> None:
        super().__init__(body, anchor, outer.opset, outer.names)
        self.prefix = outer.prefix
        self.outer = outer

    def const(self, array: Any, hint: str = "table", dtype: Any = None) -> ir.Value:
        return self.outer.const(array, hint, dtype)


def pairwise(emit: Emitter, d: ir.Value, prob_a: np.ndarray, prob_b: np.ndarray) -> ir.Value:
    """r_ij for every pair, [N, P]: ``1 - sigmoid(d A + B)`` clipped as libsvm clips it."""
    z = emit.op("Add", [emit.op("Mul", [d, emit.const(prob_a.reshape(1, -1).astype(f32), "prob_a")], dtype=F),
                        emit.const(prob_b.reshape(1, -1).astype(f32), "prob_b")], dtype=F)
    r = emit.op("Sigmoid", [emit.op("Neg", [z], dtype=F)], dtype=F)
    return emit.op("Clip", [r, _scalar(emit, f32(MIN_PROB), "min_prob"), _scalar(emit, f32(1 - MIN_PROB), "max_prob")],
                   dtype=F)


def coupling_matrix(emit: Emitter, r: ir.Value, k: int) -> ir.Value:
    """Q [N, k, k] from the pairwise estimates, as linear maps of r, r^2 and (1 - r)^2."""
    pairs = [(i, j) for i in range(k - 1) for j in range(i + 1, k)]
    # pair (i, j), i < j, r = R[i][j], 1 - r = R[j][i]: Q_ij = Q_ji = -r(1 - r); Q_jj, the sum
    # of R[.][j]^2, takes r^2; Q_ii, the sum of R[.][i]^2, takes (1 - r)^2
    off = np.zeros((len(pairs), k * k), f32)
    diag_second = np.zeros((len(pairs), k * k), f32)
    diag_first = np.zeros((len(pairs), k * k), f32)
    for p, (i, j) in enumerate(pairs):
        off[p, i * k + j] = off[p, j * k + i] = -1.0
        diag_second[p, j * k + j] = 1.0
        diag_first[p, i * k + i] = 1.0
    one = emit.scalar(1.0, f32)
    rest = emit.op("Sub", [one, r], dtype=F)
    terms = [(emit.op("Mul", [r, rest], dtype=F), off), (emit.op("Mul", [r, r], dtype=F), diag_second),
             (emit.op("Mul", [rest, rest], dtype=F), diag_first)]
    flat = None
    for value, table in terms:
        mapped = emit.op("MatMul", [value, emit.const(table, "coupling")], dtype=F)
        flat = mapped if flat is None else emit.op("Add", [flat, mapped], dtype=F)
    assert flat is not None
    return emit.reshape(flat, [-1, k, k])


def probabilities(emit: Emitter, d: ir.Value, prob_a: np.ndarray, prob_b: np.ndarray, k: int) -> ir.Value:
    """p [N, k] from the one-vs-one decision values d [N, P], as libsvm couples them."""
    q = coupling_matrix(emit, pairwise(emit, d, prob_a, prob_b), k)
    rows = [emit.op("Gather", [q, _scalar(emit, np.int64(t), "row")], {"axis": 1}, dtype=F)
            for t in range(k)]  # Q[:, t, :] [N, k]
    diagonal = [emit.op("Gather", [row, emit.const(np.asarray([t], np.int64), "col")], {"axis": 1}, dtype=F)
                for t, row in enumerate(rows)]  # Q_tt [N, 1]
    n = emit.op("Slice", [emit.op("Shape", [d], dtype=I64), emit.const(np.asarray([0], np.int64), "start"),
                          emit.const(np.asarray([1], np.int64), "end")], dtype=I64)
    p0 = emit.op("Expand", [emit.const(np.full((1, k), 1.0 / k, f32), "uniform"),
                            emit.op("Concat", [n, emit.const(np.asarray([k], np.int64), "k")], {"axis": 0},
                                    dtype=I64)], dtype=F)
    done0 = emit.op("Expand", [emit.const(np.zeros((1, 1), np.bool_), "not_done"),
                               emit.op("Concat", [n, emit.const(np.asarray([1], np.int64), "one")],
                                       {"axis": 0}, dtype=I64)], dtype=B)
    body = _sweep_body(emit, q, rows, diagonal, k)
    trips = _scalar(emit, np.int64(max_sweeps(k)), "sweeps")
    p, _ = emit.op("Loop", [trips, None, p0, done0], {"body": body}, outputs=2)
    p.type = ir.TensorType(F)
    return p


def _scalar(emit: Emitter, number: np.generic, hint: str) -> ir.Value:
    """A 0-d initializer (``Emitter.const`` makes 1-d ones): a Gather index that drops its axis,
    and a Loop's trip count."""
    name = emit.names.fresh(f"{emit.prefix}_{hint}")
    value = ir.Value(name=name, const_value=ir.Tensor(np.asarray(number), name=name),
                     type=ir.TensorType(ir.DataType.from_numpy(np.asarray(number).dtype)), shape=ir.Shape([]))
    emit.graph.register_initializer(value)
    return value


def _sweep_body(outer: Emitter, q: ir.Value, rows: list[ir.Value], diagonal: list[ir.Value],
                k: int) -> ir.Graph:
    """One sweep of libsvm's coordinate descent (the stopping test first), for every row."""
    def value(name: str, dtype: ir.DataType, shape: list[Any]) -> ir.Value:
        return ir.Value(name=outer.names.fresh(f"{outer.prefix}_{name}"), type=ir.TensorType(dtype),
                        shape=ir.Shape(shape))

    inputs = [value("sweep", I64, []), value("go", B, []), value("p", F, [None, k]), value("done", B, [None, 1])]
    # the body's condition output: a constant (a loop without a condition input leaves the
    # body's incoming one unregistered in TensorRT's parser: "Node input was not registered")
    anchor = ir.node("Constant", [], {"value": ir.Tensor(np.array(True))},
                     name=outer.names.fresh(f"{outer.prefix}_go_on"))
    anchor.outputs[0].name = outer.names.fresh(f"{outer.prefix}_go_on")
    anchor.outputs[0].type = ir.TensorType(B)
    body = ir.Graph(inputs, [], nodes=[anchor], name=outer.names.fresh(f"{outer.prefix}_coupling"))
    emit = _BodyEmitter(body, anchor, outer)
    p, done = inputs[2], inputs[3]
    qp = emit.squeeze(emit.op("MatMul", [q, emit.unsqueeze(p, [2])], dtype=F), [2])  # [N, k]
    pqp = emit.reduce("ReduceSum", emit.op("Mul", [p, qp], dtype=F), [1], keepdims=True)  # [N, 1]
    error = emit.reduce("ReduceMax", emit.op("Abs", [emit.op("Sub", [qp, pqp], dtype=F)], dtype=F), [1],
                        keepdims=True)
    stop = emit.op("Or", [done, emit.op("Less", [error, emit.scalar(0.005 / k, f32)], dtype=B)], dtype=B)
    swept = p
    one, two = emit.scalar(1.0, f32), emit.scalar(2.0, f32)
    for t in range(k):
        qp_t = emit.op("Gather", [qp, emit.const(np.asarray([t], np.int64), "col")], {"axis": 1}, dtype=F)
        diff = emit.op("Div", [emit.op("Sub", [pqp, qp_t], dtype=F), diagonal[t]], dtype=F)
        unit = np.zeros((1, k), f32)
        unit[0, t] = 1.0
        swept = emit.op("Add", [swept, emit.op("Mul", [diff, emit.const(unit, "unit")], dtype=F)], dtype=F)
        grow = emit.op("Add", [one, diff], dtype=F)
        step = emit.op("Mul", [diff, emit.op("Add", [emit.op("Mul", [diff, diagonal[t]], dtype=F),
                                                     emit.op("Mul", [two, qp_t], dtype=F)], dtype=F)], dtype=F)
        pqp = emit.op("Div", [emit.op("Add", [pqp, step], dtype=F), emit.op("Mul", [grow, grow], dtype=F)],
                      dtype=F)
        swept = emit.op("Div", [swept, grow], dtype=F)
        qp = emit.op("Div", [emit.op("Add", [qp, emit.op("Mul", [diff, rows[t]], dtype=F)], dtype=F), grow],
                     dtype=F)
    body.outputs.extend([anchor.outputs[0], emit.where(stop, p, swept), stop])
    return body
