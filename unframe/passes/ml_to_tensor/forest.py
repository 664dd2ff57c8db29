"""Tree ensembles read from their ``ai.onnx.ml`` attributes into one normalized form.

Three operators describe trees: ``TreeEnsembleClassifier`` and ``TreeEnsembleRegressor`` (every
node listed with ``(tree id, node id)``, leaves included, weights attached to leaves through
``class_*``/``target_*``) and ai.onnx.ml 5's ``TreeEnsemble`` (interior nodes and leaves in
separate arrays, ``tree_roots``, set-membership nodes). ``read_forest`` turns any of them into a
``Forest`` that the strategies in ``compile.py`` evaluate, following onnxruntime's reading:

* a tree starts at the first node listed for its tree id (not at node id 0);
* thresholds are held in the input's precision: float32 for float and integer inputs, float64
  for double inputs (``*_as_tensor`` values are rounded to float32 for float inputs);
* a ``BRANCH_MEMBER`` node is a chain of ``BRANCH_EQ`` nodes, one per member, as in onnxruntime.

Normalization makes every comparison node one ``LessOrEqual`` on either ``x`` or ``-x``, with its
children swapped where needed, so one comparison op evaluates a whole level of mixed modes and
missing-value rules exactly (``nxt`` is ``nextafter(t, -inf)`` in the input's precision)::

    mode  missing->true?  becomes            mode  missing->true?  becomes
    LEQ   no              x <= t             GTE   no              -x <= -t
    LEQ   yes             swap, -x <= nxt(-t) GTE   yes             swap, x <= nxt(t)
    LT    no              x <= nxt(t)        GT    no              -x <= nxt(-t)
    LT    yes             swap, -x <= -t     GT    yes             swap, x <= t

NaN compares false, so it lands where the ONNX-ML spec sends it. ``nxt(-inf)`` is taken as NaN
("never"). ``BRANCH_EQ`` stays an equality (``NEQ`` is an ``EQ`` with its children swapped); an
``EQ`` whose missing values go to the true branch adds an ``IsNaN`` test.

``BRANCH_MEMBER`` as onnxruntime 1.31 evaluates it (measured; its loader fuses the equality
chain into a bit mask when it can, else into a set of int32 keyed by the truncated ``x``): a set
of one value, or of at most 30 integers in [0, 30], is an exact equality test; any other set
holds the integer part of ``x`` (truncated toward zero), so 1.5 is a member of {1, 33}. Such a
chain of equalities reads the truncated view of ``x``. (Chains of ``BRANCH_EQ`` in the older
operators stay exact equalities.)
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.passes.ml_to_tensor.attrs import Unsupported, attr_value, float_attr

V3_MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4,
            "BRANCH_NEQ": 5}
MEMBER = 6
AGGREGATES = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}
# TreeEnsemble's post_transform codes as onnxruntime 1.31 reads them (measured): its enum order
# (NONE, LOGISTIC, SOFTMAX, ...), where the ONNX-ML spec lists 1 = SOFTMAX, 2 = LOGISTIC.
# onnxruntime is the reference every parity check compares with, so its reading is followed.
POST_TRANSFORMS = {0: "NONE", 1: "LOGISTIC", 2: "SOFTMAX", 3: "SOFTMAX_ZERO", 4: "PROBIT"}


RAW, NEGATED, TRUNCATED = 0, 1, 2  # which view of x a node compares


def leaf_ref(leaf: int) -> int:
    """Child references: interior nodes are >= 0, leaves are encoded as ~index (< 0)."""
    return ~leaf


@dataclass
class Tree:
    feature: list[int] = field(default_factory=list)
    view: list[int] = field(default_factory=list)  # RAW, NEGATED or TRUNCATED
    threshold: list[float] = field(default_factory=list)
    is_eq: list[bool] = field(default_factory=list)
    eq_nan: list[bool] = field(default_factory=list)  # an EQ node whose missing values go true
    true_ref: list[int] = field(default_factory=list)
    false_ref: list[int] = field(default_factory=list)
    root: int = 0
    leaves: list[list[tuple[int, float]]] = field(default_factory=list)  # (target, weight)

    def add_node(self, feature: int, view: int, threshold: float, is_eq: bool,
                 eq_nan: bool) -> int:
        self.feature.append(feature)
        self.view.append(view)
        self.threshold.append(threshold)
        self.is_eq.append(is_eq)
        self.eq_nan.append(eq_nan)
        self.true_ref.append(0)
        self.false_ref.append(0)
        return len(self.feature) - 1

    def add_leaf(self, weights: list[tuple[int, float]]) -> int:
        self.leaves.append(weights)
        return leaf_ref(len(self.leaves) - 1)

    def depth(self) -> int:
        """Interior nodes on the longest root-to-leaf path."""
        best, stack = 0, [(self.root, 0)]
        while stack:
            ref, d = stack.pop()
            if ref < 0:
                best = max(best, d)
            else:
                stack += [(self.true_ref[ref], d + 1), (self.false_ref[ref], d + 1)]
        return best


@dataclass
class Forest:
    trees: list[Tree]
    n_targets: int
    dtype: np.dtype  # the thresholds' and accumulation's precision
    n_features: int  # max feature id + 1

    @property
    def depth(self) -> int:
        return max((t.depth() for t in self.trees), default=0)

    @property
    def views(self) -> list[int]:
        """The views of x some node reads, in RAW, NEGATED, TRUNCATED order."""
        used = {v for t in self.trees for v in t.view} | {RAW}
        return sorted(used)

    @property
    def has_eq(self) -> bool:
        return any(any(t.is_eq) for t in self.trees)

    @property
    def has_eq_nan(self) -> bool:
        return any(any(t.eq_nan) for t in self.trees)

    def has_score(self, target: int) -> bool | None:
        """Whether every row gets a weight for ``target``: True (some tree has one on every leaf),
        False (no leaf has one), None (it depends on the row)."""
        anywhere = False
        for tree in self.trees:
            marks = [any(t == target for t, _ in leaf) for leaf in tree.leaves]
            if marks and all(marks):
                return True
            anywhere = anywhere or any(marks)
        return None if anywhere else False


def compute_dtype(node: ir.Node) -> np.dtype:
    x = node.inputs[0]
    return np.dtype(np.float64) if x is not None and x.dtype == ir.DataType.DOUBLE \
        else np.dtype(np.float32)


def below(value: float, dtype: np.dtype) -> float:
    """The largest ``dtype`` number below ``value``; NaN (never true) below -inf."""
    v = dtype.type(value)
    if np.isneginf(v):
        return float("nan")
    return float(np.nextafter(v, dtype.type(-np.inf)))


def normalize(mode: int, t: float, tracks_true: bool, dtype: np.dtype
              ) -> tuple[int, float, bool, bool, bool]:
    """(view of x, threshold, swap children, is EQ, EQ-NaN-goes-true) of one comparison node."""
    t = float(dtype.type(t))
    if np.isnan(t):
        raise Unsupported("a node threshold is NaN")
    m = bool(tracks_true)
    table = {
        (0, False): (RAW, t, False), (0, True): (NEGATED, below(-t, dtype), True),
        (1, False): (RAW, below(t, dtype), False), (1, True): (NEGATED, -t, True),
        (2, False): (NEGATED, -t, False), (2, True): (RAW, below(t, dtype), True),
        (3, False): (NEGATED, below(-t, dtype), False), (3, True): (RAW, t, True),
    }
    if mode in (0, 1, 2, 3):
        neg, thr, swap = table[(mode, m)]
        return neg, thr, swap, False, False
    if mode == 4:
        return RAW, t, False, True, m
    if mode == 5:  # NaN != t is true: NaN reaches the true branch either way
        return RAW, t, True, True, False
    raise Unsupported(f"unknown node mode {mode}")


# -- TreeEnsembleClassifier / TreeEnsembleRegressor (ai.onnx.ml 1-4) ----------------------------

def read_v3(node: ir.Node, classifier: bool) -> Forest:
    dtype = compute_dtype(node)
    tree_ids = [int(v) for v in attr_value(node, "nodes_treeids", [])]
    node_ids = [int(v) for v in attr_value(node, "nodes_nodeids", [])]
    modes = list(attr_value(node, "nodes_modes", []))
    features = [int(v) for v in attr_value(node, "nodes_featureids", [])]
    values = float_attr(node, "nodes_values")
    if values is None:
        values = np.zeros(len(tree_ids))
    true_ids = [int(v) for v in attr_value(node, "nodes_truenodeids", [])]
    false_ids = [int(v) for v in attr_value(node, "nodes_falsenodeids", [])]
    missing = [int(v) for v in attr_value(node, "nodes_missing_value_tracks_true", [])]
    prefix = "class" if classifier else "target"
    w_trees = attr_value(node, f"{prefix}_treeids", [])
    w_nodes = attr_value(node, f"{prefix}_nodeids", [])
    w_ids = attr_value(node, f"{prefix}_ids", [])
    weights = float_attr(node, f"{prefix}_weights")
    if len({len(tree_ids), len(node_ids), len(modes), len(features), len(true_ids),
            len(false_ids)}) != 1 or len(values) != len(tree_ids):
        raise Unsupported("the nodes_* attributes have different lengths")
    if weights is None or not (len(w_trees) == len(w_nodes) == len(w_ids) == len(weights)):
        raise Unsupported(f"the {prefix}_* attributes have different lengths")
    position: dict[tuple[int, int], int] = {}
    for i, key in enumerate(zip(tree_ids, node_ids, strict=True)):
        if key in position:
            raise Unsupported(f"node {key[1]} of tree {key[0]} is listed twice")
        position[key] = i
    leaf_weights: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for t, n, target, w in sorted(zip(w_trees, w_nodes, w_ids, weights, strict=True),
                                  key=lambda e: (int(e[0]), int(e[1]))):
        i = position.get((int(t), int(n)))
        if i is not None and modes[i] == "LEAF":  # weights on interior nodes are ignored
            leaf_weights[i].append((int(target), float(dtype.type(w))))
    starts = [i for i in range(len(tree_ids)) if i == 0 or tree_ids[i] != tree_ids[i - 1]]
    trees = []
    for start in starts:
        tree = Tree()
        done: dict[int, int] = {}

        def build(i: int, tree: Tree = tree, done: dict[int, int] = done) -> int:
            return _build_v3(i, tree, done, position, tree_ids, modes, features, values,
                             true_ids, false_ids, missing, leaf_weights, dtype)

        tree.root = build(start)
        trees.append(tree)
    if classifier:
        labels = attr_value(node, "classlabels_strings") or attr_value(node, "classlabels_int64s") or []
        n_targets = len(labels)
    else:
        n_targets = int(attr_value(node, "n_targets", 0) or 0)
    if n_targets <= 0:
        raise Unsupported("no classes or targets")
    return Forest(trees, n_targets, dtype, max(features, default=0) + 1)


def _build_v3(i: int, tree: Tree, done: dict[int, int], position: dict[tuple[int, int], int],
              tree_ids: list[int], modes: list[Any], features: list[int], values: np.ndarray,
              true_ids: list[int], false_ids: list[int], missing: list[int],
              leaf_weights: dict[int, list[tuple[int, float]]], dtype: np.dtype) -> int:
    """The reference of listed node ``i`` in ``tree`` (built depth first, iteratively)."""
    order, stack, seen = [], [i], set()
    while stack:  # post-order without recursion: trees can be thousands of nodes deep
        j = stack.pop()
        if j in done or j in seen:
            continue
        seen.add(j)
        order.append(j)
        if modes[j] != "LEAF":
            for child_id in (true_ids[j], false_ids[j]):
                child = position.get((tree_ids[j], child_id))
                if child is None:
                    raise Unsupported(f"tree {tree_ids[j]} node {child_id} is referenced but "
                                      "not listed")
                stack.append(child)
    for j in reversed(order):
        if j in done:
            continue
        if modes[j] == "LEAF":
            done[j] = tree.add_leaf(leaf_weights.get(j, []))
            continue
        if modes[j] not in V3_MODES:
            raise Unsupported(f"unknown node mode {modes[j]!r}")
        tracks = j < len(missing) and missing[j] == 1
        neg, thr, swap, is_eq, eq_nan = normalize(V3_MODES[modes[j]], values[j], tracks, dtype)
        k = tree.add_node(features[j], neg, thr, is_eq, eq_nan)
        t_ref = done.get(position[(tree_ids[j], true_ids[j])])
        f_ref = done.get(position[(tree_ids[j], false_ids[j])])
        if t_ref is None or f_ref is None:
            raise Unsupported(f"tree {tree_ids[j]} has a cycle")
        tree.true_ref[k], tree.false_ref[k] = (f_ref, t_ref) if swap else (t_ref, f_ref)
        done[j] = k
    return done[i]


# -- TreeEnsemble (ai.onnx.ml 5) -----------------------------------------------------------------

def _required(node: ir.Node, name: str) -> Any:
    value = attr_value(node, name)
    if value is None:  # onnx's schema doesn't mark them required; the op can't work without
        raise Unsupported(f"{node.op_type} has no {name}")
    return value


def read_v5(node: ir.Node) -> Forest:
    dtype = compute_dtype(node)
    roots = [int(v) for v in attr_value(node, "tree_roots", [])]
    modes = np.asarray(_required(node, "nodes_modes"), dtype=np.int64).reshape(-1)
    features = [int(v) for v in attr_value(node, "nodes_featureids", [])]
    splits = np.asarray(_required(node, "nodes_splits"), dtype=np.float64).reshape(-1)
    true_ids = [int(v) for v in attr_value(node, "nodes_truenodeids", [])]
    false_ids = [int(v) for v in attr_value(node, "nodes_falsenodeids", [])]
    true_leaf = [int(v) for v in attr_value(node, "nodes_trueleafs", [])]
    false_leaf = [int(v) for v in attr_value(node, "nodes_falseleafs", [])]
    missing = [int(v) for v in attr_value(node, "nodes_missing_value_tracks_true", []) or []]
    leaf_targets = [int(v) for v in attr_value(node, "leaf_targetids", [])]
    leaf_weights = np.asarray(_required(node, "leaf_weights"), dtype=np.float64).reshape(-1)
    members = attr_value(node, "membership_values")
    n = len(features)
    if len({n, len(modes), len(splits), len(true_ids), len(false_ids), len(true_leaf),
            len(false_leaf)}) != 1 or len(leaf_targets) != len(leaf_weights):
        raise Unsupported("the nodes_*/leaf_* attributes have different lengths")
    sets = _membership_sets(modes, members)
    trees = []
    for root in roots:
        tree = Tree()
        tree.root = _build_v5(root, tree, modes, features, splits, true_ids, false_ids,
                              true_leaf, false_leaf, missing, leaf_targets, leaf_weights, sets,
                              dtype)
        trees.append(tree)
    n_targets = int(attr_value(node, "n_targets", 0) or 0)
    if n_targets <= 0:
        raise Unsupported("n_targets is missing")
    return Forest(trees, n_targets, dtype, max(features, default=0) + 1)


def _membership_sets(modes: np.ndarray, members: Any) -> dict[int, list[float]]:
    """The member values of each BRANCH_MEMBER node (NaN separates them, in node order)."""
    values = [] if members is None else np.asarray(members, dtype=np.float64).reshape(-1).tolist()
    out: dict[int, list[float]] = {}
    pos = 0
    for i, mode in enumerate(modes.tolist()):
        if mode != MEMBER:
            continue
        chunk = []
        while pos < len(values) and not np.isnan(values[pos]):
            chunk.append(values[pos])
            pos += 1
        pos += 1
        if not chunk:
            raise Unsupported(f"BRANCH_MEMBER node {i} has no member values")
        if len(chunk) > 1 and not all(float(v).is_integer() and abs(v) < 2**31 for v in chunk):
            raise Unsupported(f"BRANCH_MEMBER node {i} has non-integer member values "
                              "(onnxruntime refuses them too)")
        out[i] = chunk
    return out


MASKABLE = 30  # onnxruntime's bit-mask form of a set: integers in [0, 30], at most 30 of them


def _exact_member_set(values: list[float]) -> bool:
    if len(values) == 1:
        return True
    return len(values) <= MASKABLE and all(float(v).is_integer() and 0 <= v <= MASKABLE
                                           for v in values)


def _build_v5(root: int, tree: Tree, modes: np.ndarray, features: list[int], splits: np.ndarray,
              true_ids: list[int], false_ids: list[int], true_leaf: list[int],
              false_leaf: list[int], missing: list[int], leaf_targets: list[int],
              leaf_weights: np.ndarray, sets: dict[int, list[float]], dtype: np.dtype) -> int:
    leaves: dict[int, int] = {}

    def leaf(index: int) -> int:
        if index not in leaves:
            if not 0 <= index < len(leaf_targets):
                raise Unsupported(f"leaf {index} is out of range")
            leaves[index] = tree.add_leaf([(leaf_targets[index],
                                            float(dtype.type(leaf_weights[index])))])
        return leaves[index]

    built: dict[int, int] = {}
    order, stack, seen = [], [root], set()
    while stack:
        j = stack.pop()
        if j in seen:
            continue
        if not 0 <= j < len(features):
            raise Unsupported(f"node {j} is out of range")
        seen.add(j)
        order.append(j)
        stack += [c for c, is_leaf in ((true_ids[j], true_leaf[j]), (false_ids[j], false_leaf[j]))
                  if not is_leaf]
    for j in reversed(order):
        t_ref = leaf(true_ids[j]) if true_leaf[j] else built.get(true_ids[j])
        f_ref = leaf(false_ids[j]) if false_leaf[j] else built.get(false_ids[j])
        if t_ref is None or f_ref is None:
            raise Unsupported("a tree has a cycle")
        tracks = j < len(missing) and missing[j] == 1
        mode = int(modes[j])
        if mode == MEMBER:  # x in {a, b, c}: EQ a ? T : (EQ b ? T : (EQ c ? T : F))
            chain = f_ref
            view = RAW if _exact_member_set(sets[j]) else TRUNCATED
            for value in reversed(sets[j]):
                k = tree.add_node(features[j], view, float(dtype.type(value)), True, tracks)
                tree.true_ref[k], tree.false_ref[k] = t_ref, chain
                chain = k
            built[j] = chain
            continue
        neg, thr, swap, is_eq, eq_nan = normalize(mode, splits[j], tracks, dtype)
        k = tree.add_node(features[j], neg, thr, is_eq, eq_nan)
        tree.true_ref[k], tree.false_ref[k] = (f_ref, t_ref) if swap else (t_ref, f_ref)
        built[j] = k
    return built[root]
