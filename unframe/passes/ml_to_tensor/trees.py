"""TreeEnsembleRegressor, TreeEnsembleClassifier (ai.onnx.ml 1-4) and TreeEnsemble (5).

Before::   X -> TreeEnsembleClassifier -> (label, probabilities)
After::    X -> [strategy: the leaf each row reaches per tree, see compile.py]
             -> Gather(leaf weights) [N, T, C] -> ReduceSum/Min/Max over trees
             -> base values, AVERAGE's division, post transform -> scores
             -> ArgMax / the binary rule -> Gather(class labels) -> label

The aggregation follows onnxruntime's reading of the spec, which is the reference the parity
stage checks against: a single-target ensemble keeps one weight per leaf, adds a lone base value
and applies only PROBIT; a classifier always sums; a two-class classifier whose weights name one
class scores that class and derives the other (``1 - p`` for non-negative weights, ``-s``
otherwise), choosing the label by ``p > 0.5`` or ``s > 0``. Scores accumulate in the input's
precision (float64 for double inputs) and leave as float32 (TreeEnsemble: the input type).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

import unframe.passes.ml_to_tensor.compile as tc
import unframe.passes.ml_to_tensor.scores as scores
from unframe.passes.ml_to_tensor.builder import Emitter, ir_dtype
from unframe.passes.ml_to_tensor.forest import (
    AGGREGATES,
    POST_TRANSFORMS,
    Forest,
    read_v3,
    read_v5,
)
from unframe.passes.ml_to_tensor.registry import (
    LowerContext,
    Unsupported,
    attr_value,
    float_attr,
    lowering,
)

F = ir.DataType.FLOAT
B = ir.DataType.BOOL
I64 = ir.DataType.INT64
TREE_OPS = ("TreeEnsembleRegressor", "TreeEnsembleClassifier", "TreeEnsemble")


@dataclass
class Ensemble:
    forest: Forest
    aggregate: str
    post: str
    base: np.ndarray  # in the compute precision
    out_dtype: ir.DataType


def read(node: ir.Node) -> Ensemble:
    """The ensemble of any of the three tree operators (raises Unsupported)."""
    op = node.op_type
    if op == "TreeEnsemble":
        forest = read_v5(node)
        aggregate = AGGREGATES.get(int(attr_value(node, "aggregate_function", 1)))
        post = POST_TRANSFORMS.get(int(attr_value(node, "post_transform", 0)))
        if aggregate is None or post is None:
            raise Unsupported("unknown aggregate_function or post_transform")
        out = ir.DataType.DOUBLE if forest.dtype == np.float64 else F
        return Ensemble(forest, aggregate, post, np.zeros(0, forest.dtype), out)
    forest = read_v3(node, classifier=op == "TreeEnsembleClassifier")
    aggregate = "SUM" if op == "TreeEnsembleClassifier" else str(attr_value(node, "aggregate_function", "SUM"))
    post = str(attr_value(node, "post_transform", "NONE"))
    if aggregate not in AGGREGATES.values() or post not in POST_TRANSFORMS.values():
        raise Unsupported(f"unknown aggregate_function {aggregate!r} or post_transform {post!r}")
    base = float_attr(node, "base_values")
    base = np.zeros(0) if base is None else base
    return Ensemble(forest, aggregate, post, base.astype(forest.dtype), F)


def check_trees(node: ir.Node) -> list[str]:
    try:
        ens = read(node)
        _refusals(node, ens)
    except Unsupported as why:
        return [why.reason]
    x = node.inputs[0]
    if x is not None and x.shape is not None and len(x.shape) != 2:
        return [f"the input has rank {len(x.shape)}; the lowering takes [N, features]"]
    return []


def _refusals(node: ir.Node, ens: Ensemble) -> None:
    forest = ens.forest
    if not forest.trees:
        raise Unsupported("the ensemble has no trees")
    if forest.n_targets == 1:
        for tree in forest.trees:
            if any(len(leaf) != 1 for leaf in tree.leaves):
                raise Unsupported("a single-target ensemble with a leaf that has no weight or "
                                  "several")
    if node.op_type == "TreeEnsembleClassifier":
        _classifier_refusals(node, ens)


# -- the lowering -------------------------------------------------------------------------------

def strategy_of(forest: Forest, options: dict) -> str:
    forced = options.get("tree_strategy")
    if forced and forced != "auto":
        if forced not in tc.STRATEGIES:
            raise Unsupported(f"unknown tree strategy {forced!r} (use {', '.join(tc.STRATEGIES)})")
        limit = tc.MAX_DEPTH.get(str(forced))
        if limit is not None and forest.depth > limit:
            raise Unsupported(f"the {forced} strategy takes trees up to depth {limit} (its tables "
                              f"grow as 2^depth); this ensemble has depth {forest.depth}")
        return str(forced)
    return tc.choose_strategy(forest.depth, options.get("gemm_max_depth", tc.GEMM_MAX_DEPTH))


def describe(forest: Forest, options: dict) -> str:
    return f"{len(forest.trees)} trees, depth {forest.depth}: {strategy_of(forest, options)}"


@lowering(*TREE_OPS, check=check_trees,
          summary="GEMM (depth <= 3, GPU runtimes), perfect tree traversal (<= 10) or tree traversal, then "
                  "Gather/Reduce of leaf weights and the post transform")
def lower_trees(ctx: LowerContext) -> Sequence[ir.Value | None]:
    ens = read(ctx.node)
    _refusals(ctx.node, ens)
    forest = ens.forest
    strategy = strategy_of(forest, ctx.options)
    ctx.notes.append(describe(forest, ctx.options))
    reached = tc.reach(ctx.emit, ctx.x, forest, strategy)
    agg = Aggregated.of(ctx.emit, ens, reached)
    if ctx.node.op_type == "TreeEnsembleClassifier":
        return classify(ctx, ens, agg)
    return [regress(ctx.emit, ens, agg)]


@dataclass
class Aggregated:
    """Per-row scores [N, C] before base values, and which rows got a weight per target."""

    score: ir.Value
    has: list[bool | ir.Value]  # per target: always, never, or [N] bool

    @staticmethod
    def of(emit: Emitter, ens: Ensemble, reached: tc.Reached) -> Aggregated:
        forest = ens.forest
        c = forest.n_targets
        single = c == 1
        n_trees = len(forest.trees)
        fill = {"MIN": np.inf, "MAX": -np.inf}.get(ens.aggregate, 0.0)
        table = np.full((reached.width, n_trees, c), fill, forest.dtype)
        has_table = np.zeros((reached.width, n_trees, c), np.float32)
        for t, slots in enumerate(reached.leaves):
            for slot, leaf in enumerate(slots):
                if leaf is None:
                    continue
                weights = forest.trees[t].leaves[leaf]
                for target, w in weights[:1] if single else weights:
                    target = 0 if single else target
                    if not 0 <= target < c:
                        raise Unsupported(f"a leaf weight names target {target} of {c}")
                    table[slot, t, target] = _combine(ens.aggregate, table[slot, t, target], w)
                    has_table[slot, t, target] = 1.0
        op = {"MIN": "ReduceMin", "MAX": "ReduceMax"}.get(ens.aggregate, "ReduceSum")
        score = _over_trees(emit, table, reached.slot, op)  # [N, C]
        if ens.aggregate == "AVERAGE":
            score = emit.op("Div", [score, emit.scalar(n_trees, forest.dtype)])
        statics = [True if single else forest.has_score(k) for k in range(c)]
        has: list[bool | ir.Value] = []
        dynamic_table = None
        for k, known in enumerate(statics):
            if known is not None:
                has.append(known)
                continue
            if dynamic_table is None:
                hit = _over_trees(emit, has_table, reached.slot, "ReduceMax")
                dynamic_table = emit.op("Greater", [hit, emit.scalar(0.5, np.float32)], dtype=B)
            has.append(_column(emit, dynamic_table, k))
        return Aggregated(score, has)


def _over_trees(emit: Emitter, table: np.ndarray, slot: ir.Value, reduce: str) -> ir.Value:
    """``reduce_t table[slot[n, t], t, k]`` for a table [width, T, C]: [N, C]. One
    GatherElements and one reduction per target: cheaper than gathering [N, T, C] at once."""
    dtype = ir_dtype(table.dtype)
    columns = []
    for k in range(table.shape[2]):
        got = emit.op("GatherElements", [emit.const(table[:, :, k], "leaf_weights"), slot],
                      {"axis": 0}, dtype=dtype)
        columns.append(emit.reduce(reduce, got, [1], keepdims=True))
    return columns[0] if len(columns) == 1 else emit.op("Concat", columns, {"axis": 1}, dtype=dtype)


def _combine(aggregate: str, old: float, new: float) -> float:
    if aggregate == "MIN":
        return min(old, new)
    if aggregate == "MAX":
        return max(old, new)
    return old + new


def _column(emit: Emitter, x: ir.Value, k: int) -> ir.Value:
    """Column k of [N, C] as [N, 1]."""
    return emit.op("Gather", [x, emit.const(np.asarray([k], np.int64), "column")], {"axis": 1},
                   dtype=x.dtype)


def _mask(emit: Emitter, has: bool | ir.Value, value: ir.Value, otherwise: ir.Value) -> ir.Value:
    """``value`` where a row has a weight, else ``otherwise`` (a scalar), shaped like ``value``."""
    if has is True:
        return value
    if has is False:
        has = emit.const(np.zeros((1, 1), bool), "never")
    return emit.where(has, value, otherwise)


# -- regressors ---------------------------------------------------------------------------------

def regress(emit: Emitter, ens: Ensemble, agg: Aggregated) -> ir.Value:
    forest = ens.forest
    dtype = forest.dtype
    score = agg.score
    if forest.n_targets == 1:
        if ens.base.size == 1:  # onnxruntime adds a lone base value to a single target
            score = emit.op("Add", [score, emit.const(ens.base.reshape(1, 1), "base")])
        out = emit.cast(score, F)
        out = scores.probit(emit, out) if ens.post == "PROBIT" else out
        return emit.cast(out, ens.out_dtype)
    if ens.base.size == forest.n_targets:
        score = emit.op("Add", [score, emit.const(ens.base.reshape(1, -1), "base")])
    if not all(h is True for h in agg.has):  # onnxruntime writes 0 for a target without weight
        zero = emit.scalar(0.0, dtype)
        score = emit.op("Concat", [_mask(emit, h, _column(emit, score, k), zero)
                                   for k, h in enumerate(agg.has)], {"axis": 1})
    out = scores.transform(emit, emit.cast(score, F), ens.post)
    return emit.cast(out, ens.out_dtype)


# -- classifiers --------------------------------------------------------------------------------

def _labels(node: ir.Node) -> tuple[np.ndarray, bool]:
    strings = attr_value(node, "classlabels_strings")
    if strings:
        return np.asarray(strings, dtype=object), True
    return np.asarray(attr_value(node, "classlabels_int64s", []), dtype=np.int64), False


def _class_ids(node: ir.Node) -> set[int]:
    return {int(v) for v in attr_value(node, "class_ids", [])}


def _classifier_refusals(node: ir.Node, ens: Ensemble) -> None:
    forest = ens.forest
    if forest.n_targets == 1:
        raise Unsupported("a classifier with a single class label")
    if forest.n_targets == 2:
        if forest.has_score(1) is None:
            raise Unsupported("a two-class classifier whose second class gets a weight on some "
                              "rows only (onnxruntime's scores are undefined there)")
        if forest.has_score(1) is False and len(_class_ids(node)) != 1:
            raise Unsupported("a two-class classifier with one score column and weights for "
                              "both classes")
        if forest.has_score(1) is False and ens.post == "PROBIT":
            raise Unsupported("PROBIT on a two-class classifier with one score column "
                              "(onnxruntime leaves the second column undefined)")


def classify(ctx: LowerContext, ens: Ensemble, agg: Aggregated) -> list[ir.Value]:
    labels, strings = _labels(ctx.node)
    literal = False
    if ens.forest.n_targets == 2:
        index, z, literal = _binary(ctx, ens, agg)
    else:
        index, z = _multiclass(ctx.emit, ens, agg)
    if literal and not strings:
        return [index, z]
    return [ctx.emit.gather(ctx.emit.const(labels, "labels"), index), z]


def _multiclass(emit: Emitter, ens: Ensemble, agg: Aggregated) -> tuple[ir.Value, ir.Value]:
    forest = ens.forest
    c = forest.n_targets
    dtype = forest.dtype
    score = agg.score
    has = list(agg.has)
    if ens.base.size:
        base = np.zeros(c, dtype)
        base[:ens.base.size] = ens.base[:c]
        score = emit.op("Add", [score, emit.const(base.reshape(1, -1), "base")])
        has = [True if k < ens.base.size else h for k, h in enumerate(has)]
    ranked = score
    if not all(h is True for h in has):  # classes without a weight take no part in the argmax
        low = emit.scalar(-np.inf, dtype)
        ranked = emit.op("Concat", [_mask(emit, h, _column(emit, score, k), low)
                                    for k, h in enumerate(has)], {"axis": 1})
    index = emit.op("ArgMax", [ranked], {"axis": 1, "keepdims": 0}, dtype=I64)
    return index, scores.transform(emit, emit.cast(score, F), ens.post)


def _binary(ctx: LowerContext, ens: Ensemble, agg: Aggregated
            ) -> tuple[ir.Value, ir.Value, bool]:
    """onnxruntime's two-class rules, measured on onnxruntime 1.31 (the module docstring has the
    gist). A class without a weight on a row is written as 0. The third value says the label is
    the literal 1 or 0 (onnxruntime's answer when both classes have weights)."""
    emit = ctx.emit
    dtype = ens.forest.dtype
    s0, s1 = _column(emit, agg.score, 0), _column(emit, agg.score, 1)
    h0, h1 = agg.has
    base = ens.base
    if base.size == 2 and h1 is True:  # onnxruntime: p1 = base[1] + s0, p0 = -p1
        s1 = emit.op("Add", [s0, emit.scalar(base[1], dtype)])
        s0 = emit.op("Neg", [s1])
    elif base.size == 2:
        s0 = emit.op("Add", [s0, emit.scalar(base[0], dtype)])
    elif base.size == 1 and h1 is not True:
        s0 = emit.op("Add", [s0, emit.scalar(base[0], dtype)])
    zero = emit.scalar(0.0, dtype)
    positive = s1 if h1 is True else _mask(emit, h0, s0, zero)
    weights = float_attr(ctx.node, "class_weights")
    all_positive = weights is None or bool(np.all(weights >= 0))
    binary_case = len(_class_ids(ctx.node)) == 1
    cut = 0.5 if binary_case and all_positive else 0.0
    above = emit.op("Greater", [positive, emit.scalar(cut, dtype)], dtype=B)
    index = emit.squeeze(emit.cast(above, I64), [1])
    literal = not binary_case
    if h1 is True or base.size == 2:
        z = emit.op("Concat", [_mask(emit, h0, s0, zero), _mask(emit, h1, s1, zero)], {"axis": 1})
        return index, scores.transform(emit, emit.cast(z, F), ens.post), literal
    s = emit.cast(s0, F)
    if all_positive:
        p = scores.logistic(emit, s) if ens.post == "LOGISTIC" else s
        z = emit.op("Concat", [emit.op("Sub", [emit.scalar(1.0, np.float32), p], dtype=F), p],
                    {"axis": 1}, dtype=F)
    elif ens.post == "LOGISTIC":
        z = emit.op("Concat", [scores.logistic(emit, emit.op("Neg", [s], dtype=F)),
                               scores.logistic(emit, s)], {"axis": 1}, dtype=F)
    else:
        z = emit.op("Concat", [emit.op("Neg", [s], dtype=F), s], {"axis": 1}, dtype=F)
    return index, z, literal
