"""Tree ensembles as tensor programs: which leaf each row reaches in each tree.

The strategy is chosen by the deepest tree, as hummingbird does (Nakandala et al., "A Tensor
Compiler for Unified Machine Learning Prediction Serving", OSDI 2020):

* ``gemm`` (depth <= 3): every node's comparison at once, then a batched matrix product with a
  node-by-leaf path matrix (+1 the leaf lies under the true branch, -1 under the false one); the
  leaf whose sum equals its count of true branches is the one reached;
* ``perfect`` (depth <= 10): trees padded to perfect binary trees, one level per step; the slot
  index at the next level is ``2 * slot + condition``, so a step needs no child tables;
* ``traversal`` (deeper): every tree walked node by node through child tables, a step per level
  of the deepest tree (leaves point at themselves).

Every strategy gathers ``x`` by feature index (a matrix product with a one-hot matrix would turn a
NaN in any feature into a NaN everywhere) and compares with ``LessOrEqual`` on ``[x, -x]`` (see
``forest.py``), so NaN handling and thresholds are exact. Each returns the row of the leaf table
reached per row and tree (``Reached``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from unframe.passes.ml_to_tensor.builder import Emitter, ir_dtype
from unframe.passes.ml_to_tensor.forest import NEGATED, TRUNCATED, Forest, Tree

GEMM_MAX_DEPTH = 3
PERFECT_MAX_DEPTH = 10
STRATEGIES = ("gemm", "perfect", "traversal")
MAX_DEPTH = {"gemm": 8, "perfect": 16}  # when forced: beyond these the tables outgrow memory
_NEVER = 1_000_000.0  # a path count no padded leaf can reach
I32 = ir.DataType.INT32  # slot and column indices: half the memory traffic of int64


def choose_strategy(depth: int, gemm_max_depth: int = GEMM_MAX_DEPTH) -> str:
    """hummingbird's rule by default. ``gemm_max_depth=0`` leaves GEMM out: on a CPU runtime
    (onnxruntime, one thread) perfect traversal ran a 100-tree depth-3 forest 3-5x faster than
    GEMM (bench/ml_to_tensor.py); GEMM's dense products pay off on a GPU."""
    if depth <= gemm_max_depth:
        return "gemm"
    return "perfect" if depth <= PERFECT_MAX_DEPTH else "traversal"


@dataclass
class Reached:
    """Which leaf slot each row reaches in each tree: ``slot`` [N, T] (int32/int64) holds per-tree slot
    numbers (0..width-1); ``leaves[t][slot]`` is the leaf in that slot of tree t (None: a slot no
    row reaches). Per-tree tables are laid out [width, T] and read with ``GatherElements`` along
    axis 0, which onnxruntime runs several times faster than ``Gather`` on a flat table."""

    slot: ir.Value
    width: int
    leaves: list[list[int | None]]


class Features:
    """``x`` as the comparisons read it: cast to the thresholds' precision, with ``-x`` and
    ``trunc(x)`` appended when some node reads them (the feature index then adds ``width`` per
    view before it)."""

    def __init__(self, emit: Emitter, x: ir.Value, forest: Forest) -> None:
        self.emit = emit
        dtype = ir_dtype(forest.dtype)
        value = emit.cast(x, dtype)
        width = _static_width(x)
        if width is None:  # keep the columns the trees read, so -x sits at a known offset
            width = forest.n_features
            value = emit.op("Slice", [value, emit.const(np.asarray([0], np.int64), "starts"),
                                      emit.const(np.asarray([width], np.int64), "ends"),
                                      emit.const(np.asarray([1], np.int64), "axes")], dtype=dtype)
        self.width = width
        views = forest.views
        self.offset = {view: k * width for k, view in enumerate(views)}
        if len(views) > 1:
            blocks = [value]
            if NEGATED in views:
                blocks.append(emit.op("Neg", [value], dtype=dtype))
            if TRUNCATED in views:  # toward zero: Floor above 0, Ceil below (NaN stays NaN)
                negative = emit.op("Less", [value, emit.scalar(0.0, forest.dtype)],
                                   dtype=ir.DataType.BOOL)
                blocks.append(emit.where(negative, emit.op("Ceil", [value], dtype=dtype),
                                         emit.op("Floor", [value], dtype=dtype)))
            value = emit.op("Concat", blocks, {"axis": 1}, dtype=dtype)
        self.value = value

    def column(self, tree: Tree, node: int) -> int:
        return tree.feature[node] + self.offset[tree.view[node]]


def _static_width(x: ir.Value) -> int | None:
    if x.shape is None or len(x.shape) != 2:
        return None
    dim = x.shape[1]
    return dim if isinstance(dim, int) else None


def condition(emit: Emitter, v: ir.Value, thr: ir.Value, is_eq: ir.Value | None,
              eq_nan: ir.Value | None) -> ir.Value:
    """``v <= thr``, or ``v == thr`` where ``is_eq``; or NaN where ``eq_nan`` (masks combined
    with And/Or: onnxruntime has no boolean Where)."""
    bool_ = ir.DataType.BOOL
    c = emit.op("LessOrEqual", [v, thr], dtype=bool_)
    if is_eq is not None:
        eq = emit.op("And", [is_eq, emit.op("Equal", [v, thr], dtype=bool_)], dtype=bool_)
        leq = emit.op("And", [emit.op("Not", [is_eq], dtype=bool_), c], dtype=bool_)
        c = emit.op("Or", [eq, leq], dtype=bool_)
    if eq_nan is not None:
        nan = emit.op("And", [emit.op("IsNaN", [v], dtype=ir.DataType.BOOL), eq_nan],
                      dtype=ir.DataType.BOOL)
        c = emit.op("Or", [c, nan], dtype=ir.DataType.BOOL)
    return c


def reach(emit: Emitter, x: ir.Value, forest: Forest, strategy: str) -> Reached:
    features = Features(emit, x, forest)
    if strategy == "gemm":
        return _gemm(emit, features, forest)
    if strategy == "perfect":
        return _perfect(emit, features, forest)
    if strategy == "traversal":
        return _traversal(emit, features, forest)
    raise ValueError(f"unknown tree strategy {strategy!r}")


# -- gemm ----------------------------------------------------------------------------------------

def _paths(tree: Tree) -> list[tuple[int, list[tuple[int, int]]]]:
    """(leaf, [(node, +1 true branch / -1 false branch), ...]) for every leaf, root first."""
    out, stack = [], [(tree.root, [])]
    while stack:
        ref, path = stack.pop()
        if ref < 0:
            out.append((~ref, path))
            continue
        stack.append((tree.false_ref[ref], [*path, (ref, -1)]))
        stack.append((tree.true_ref[ref], [*path, (ref, 1)]))
    return out


def _gemm(emit: Emitter, features: Features, forest: Forest) -> Reached:
    trees = forest.trees
    n_nodes = max(1, max(len(t.feature) for t in trees))
    paths = [_paths(t) for t in trees]
    n_leaves = max(len(p) for p in paths)
    n_trees = len(trees)
    cols = np.zeros((n_trees, n_nodes), np.int64)
    thr = np.zeros((n_trees, n_nodes), forest.dtype)
    eq = np.zeros((n_trees, n_nodes), bool)
    eq_nan = np.zeros((n_trees, n_nodes), bool)
    path_matrix = np.zeros((n_trees, n_nodes, n_leaves), np.float32)
    counts = np.full((n_trees, 1, n_leaves), _NEVER, np.float32)
    leaves: list[list[int | None]] = [[None] * n_leaves for _ in trees]
    for t, (tree, leaf_paths) in enumerate(zip(trees, paths, strict=True)):
        for i in range(len(tree.feature)):
            cols[t, i] = features.column(tree, i)
            thr[t, i], eq[t, i], eq_nan[t, i] = tree.threshold[i], tree.is_eq[i], tree.eq_nan[i]
        for slot, (leaf, path) in enumerate(leaf_paths):
            for node, sign in path:
                path_matrix[t, node, slot] = sign
            counts[t, 0, slot] = sum(1 for _, s in path if s > 0)
            leaves[t][slot] = leaf
    v = emit.gather(features.value, emit.const(cols.reshape(-1), "features"), axis=1)
    c = condition(emit, v, emit.const(thr.reshape(-1), "thresholds"),
                  emit.const(eq.reshape(-1), "is_eq") if eq.any() else None,
                  emit.const(eq_nan.reshape(-1), "eq_nan") if eq_nan.any() else None)
    c = emit.cast(c, ir.DataType.FLOAT)
    c = emit.op("Transpose", [emit.reshape(c, [-1, n_trees, n_nodes])], {"perm": [1, 0, 2]})
    sums = emit.op("MatMul", [c, emit.const(path_matrix, "paths")])  # [T, N, L]
    hit = emit.cast(emit.op("Equal", [sums, emit.const(counts, "counts")]), ir.DataType.FLOAT)
    slot = emit.op("ArgMax", [hit], {"axis": 2, "keepdims": 0}, dtype=ir.DataType.INT64)
    slot = emit.op("Transpose", [slot], {"perm": [1, 0]}, dtype=ir.DataType.INT64)
    return Reached(slot, n_leaves, leaves)


# -- perfect tree traversal ----------------------------------------------------------------------

def _levels(tree: Tree, depth: int) -> list[list[int]]:
    """The reference in every slot of every level of the tree padded to ``depth``: a leaf
    reached early fills its slot and, below it, both children of that slot."""
    levels = [[tree.root]]
    for _ in range(depth):
        below = []
        for ref in levels[-1]:
            # slot 2s+1 is reached when the condition holds, 2s when it does not
            below += [ref, ref] if ref < 0 else [tree.false_ref[ref], tree.true_ref[ref]]
        levels.append(below)
    return levels


def _perfect(emit: Emitter, features: Features, forest: Forest) -> Reached:
    depth = max(1, forest.depth)
    trees = forest.trees
    n_trees = len(trees)
    levels = [_levels(t, depth) for t in trees]
    slot: ir.Value | None = None
    for d in range(depth):
        width = 2 ** d
        cols = np.zeros((width, n_trees), np.int32)
        thr = np.zeros((width, n_trees), forest.dtype)
        eq = np.zeros((width, n_trees), bool)
        eq_nan = np.zeros((width, n_trees), bool)
        for t, tree in enumerate(trees):
            for s, ref in enumerate(levels[t][d]):
                if ref >= 0:
                    cols[s, t] = features.column(tree, ref)
                    thr[s, t], eq[s, t], eq_nan[s, t] = tree.threshold[ref], tree.is_eq[ref], \
                        tree.eq_nan[ref]
        slot = _step(emit, features, slot, cols, thr, eq, eq_nan)
    assert slot is not None
    leaves = [[~ref for ref in levels[t][depth]] for t in range(n_trees)]
    return Reached(slot, 2 ** depth, leaves)


def _lookup(emit: Emitter, table: np.ndarray, slot: ir.Value, hint: str) -> ir.Value:
    """``table[slot[n, t], t]`` for a per-tree table [width, T]."""
    return emit.op("GatherElements", [emit.const(table, hint), slot], {"axis": 0},
                   dtype=ir_dtype(table.dtype))


def _step(emit: Emitter, features: Features, slot: ir.Value | None, cols: np.ndarray,
          thr: np.ndarray, eq: np.ndarray, eq_nan: np.ndarray) -> ir.Value:
    """One level: the condition at each row's slot, then the slot one level down
    (``2 * slot + condition``: the true child sits at the odd slot)."""
    is_eq = eq.any()
    nan = eq_nan.any()
    if slot is None:  # level 0: every row sits at the root, so the tables are broadcast
        v = emit.gather(features.value, emit.const(cols[0], "features"), axis=1)
        c = condition(emit, v, emit.const(thr[0], "thresholds"),
                      emit.const(eq[0], "is_eq") if is_eq else None,
                      emit.const(eq_nan[0], "eq_nan") if nan else None)
        return emit.cast(c, I32)
    col = _lookup(emit, cols, slot, "features")
    v = emit.op("GatherElements", [features.value, col], {"axis": 1}, dtype=features.value.dtype)
    c = condition(emit, v, _lookup(emit, thr, slot, "thresholds"),
                  _lookup(emit, eq, slot, "is_eq") if is_eq else None,
                  _lookup(emit, eq_nan, slot, "eq_nan") if nan else None)
    twice = emit.op("Add", [slot, slot], dtype=I32)
    return emit.op("Add", [twice, emit.cast(c, I32)], dtype=I32)


# -- tree traversal ------------------------------------------------------------------------------

def _traversal(emit: Emitter, features: Features, forest: Forest) -> Reached:
    """Per tree: interior nodes, then leaves (pointing at themselves), padded to the largest."""
    trees = forest.trees
    width = max(len(t.feature) + len(t.leaves) for t in trees)
    shape = (width, len(trees))
    cols, thr = np.zeros(shape, np.int32), np.zeros(shape, forest.dtype)
    eq, eq_nan = np.zeros(shape, bool), np.zeros(shape, bool)
    true_next, false_next = np.zeros(shape, np.int32), np.zeros(shape, np.int32)
    leaves: list[list[int | None]] = []
    roots = []
    for t, tree in enumerate(trees):
        n_inner = len(tree.feature)

        def index(ref: int, n_inner: int = n_inner) -> int:
            return ref if ref >= 0 else n_inner + ~ref

        for i in range(n_inner):
            cols[i, t] = features.column(tree, i)
            thr[i, t], eq[i, t], eq_nan[i, t] = tree.threshold[i], tree.is_eq[i], tree.eq_nan[i]
            true_next[i, t], false_next[i, t] = index(tree.true_ref[i]), index(tree.false_ref[i])
        slots: list[int | None] = [None] * width
        for leaf in range(len(tree.leaves)):
            me = index(~leaf)
            true_next[me, t] = false_next[me, t] = me
            slots[me] = leaf
        for pad in range(n_inner + len(tree.leaves), width):  # unused: point at themselves
            true_next[pad, t] = false_next[pad, t] = pad
        leaves.append(slots)
        roots.append(index(tree.root))
    root_index = np.asarray(roots, np.int64)
    is_eq, nan = eq.any(), eq_nan.any()
    slot: ir.Value | None = None
    for _ in range(max(1, forest.depth)):
        if slot is None:  # every row at its tree's root: read whole columns
            v = emit.gather(features.value, emit.const(cols[root_index, range(len(trees))],
                                                       "features"), axis=1)
            c = condition(emit, v, emit.const(thr[root_index, range(len(trees))], "thresholds"),
                          emit.const(eq[root_index, range(len(trees))], "is_eq") if is_eq else None,
                          emit.const(eq_nan[root_index, range(len(trees))], "eq_nan") if nan else None)
            slot = emit.where(c, emit.const(true_next[root_index, range(len(trees))], "true_next"),
                              emit.const(false_next[root_index, range(len(trees))], "false_next"))
            continue
        col = _lookup(emit, cols, slot, "features")
        v = emit.op("GatherElements", [features.value, col], {"axis": 1},
                    dtype=features.value.dtype)
        c = condition(emit, v, _lookup(emit, thr, slot, "thresholds"),
                      _lookup(emit, eq, slot, "is_eq") if is_eq else None,
                      _lookup(emit, eq_nan, slot, "eq_nan") if nan else None)
        slot = emit.where(c, _lookup(emit, true_next, slot, "true_next"),
                          _lookup(emit, false_next, slot, "false_next"))
    assert slot is not None
    return Reached(slot, width, leaves)
