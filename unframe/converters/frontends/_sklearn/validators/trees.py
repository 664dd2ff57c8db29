"""Decision-tree storage: scikit-learn's ``Tree`` (decision trees, random forests, extra trees,
gradient boosting, isolation forests, AdaBoost and bagging of trees) and HistGradientBoosting's
``TreePredictor`` and ``_BinMapper``.

scikit-learn walks these node arrays in Cython without bounds checks: a child index out of
range reads outside the array, a cycle never ends, a feature index past the input's width
reads outside the row. ``forest_depths`` proves the arrays are trees rooted at node 0 (the
boosters' validators use it too); each validator adds its format's own fields.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.frontends._sklearn.validators import _skops as sk
from unframe.converters.frontends._sklearn.validators.registry import require, validates

TREE_LEAF = -1  # scikit-learn's child index of a leaf
MAX_OUTPUTS = 2**20


def forest_depths(left: np.ndarray, right: np.ndarray, internal: np.ndarray,
                  sizes: np.ndarray) -> np.ndarray:
    """The depth of every node of trees stored back to back (tree t's nodes follow tree t-1's;
    child indices are local to their tree), after proving each is one tree rooted at its node 0:
    the children of internal nodes are in [1, size), every node but a root is the child of
    exactly one node, and following parents from any node reaches its root (no cycle).

    Vectorized over all trees at once: a bincount for the parent counts, then pointer jumping
    (each step doubles the distance to a node's known ancestor): O(n log n) numpy work for n
    nodes, a few dozen numpy calls whatever the number of trees. A failure names the node and
    carries its tree as ``Invalid.index``."""
    sizes = np.asarray(sizes, dtype=np.int64)
    bad_size = np.flatnonzero(sizes < 1)
    if bad_size.size:
        raise sk.Invalid("the tree has no nodes", int(bad_size[0]))
    n = int(sizes.sum())
    offsets = np.cumsum(sizes) - sizes
    tree_of = np.repeat(np.arange(sizes.size), sizes)
    idx = np.flatnonzero(internal)
    base = offsets[tree_of[idx]]
    size = sizes[tree_of[idx]]
    kids = np.concatenate([left[idx], right[idx]]).astype(np.int64)
    bad = np.flatnonzero((kids < 1) | (kids >= np.concatenate([size, size])))
    if bad.size:
        node = int(idx[bad[0] % idx.size])
        t = int(tree_of[node])
        raise sk.Invalid(f"node {node - int(offsets[t])} has child index {int(kids[bad[0]])}, "
                         f"outside [1, {int(sizes[t])})", t)
    kids += np.concatenate([base, base])
    counts = np.bincount(kids, minlength=n)
    is_root = np.zeros(n, dtype=bool)
    is_root[offsets] = True
    first_bad((counts != 1) & ~is_root, tree_of, offsets,
              "is the child of {} nodes (expected 1)", counts)
    parent = np.arange(n, dtype=np.int64)  # a root is its own parent
    parent[kids[:idx.size]] = idx
    parent[kids[idx.size:]] = idx
    root = offsets[tree_of]
    depth = (~is_root).astype(np.int64)
    for _ in range(int(sizes.max()).bit_length() + 1):
        if (parent == root).all():
            break
        depth += depth[parent]
        parent = parent[parent]
    first_bad(parent != root, tree_of, offsets, "is on a cycle, not reachable from the root")
    return depth


def first_bad(bad: np.ndarray, tree_of: np.ndarray, offsets: np.ndarray, what: str,
              values: np.ndarray | None = None) -> None:
    """Refuse with the first offending node (``{}`` in ``what``: its value), its tree as the
    index."""
    hits = np.flatnonzero(bad)
    if hits.size:
        hit = int(hits[0])
        t = int(tree_of[hit])
        text = what.format(values[hit].item()) if values is not None else what
        raise sk.Invalid(f"node {hit - int(offsets[t])} {text}", t)


def in_trees(check: Any, items: list[Any]) -> list[Any]:
    """``check(item)`` for each object of a batch; a failure carries the object's index."""
    out = []
    for k, item in enumerate(items):
        try:
            out.append(check(item))
        except sk.Invalid as exc:
            raise sk.Invalid(str(exc), k) from None
    return out


def stacked(arrays: list[np.ndarray], field: str) -> np.ndarray:
    return np.concatenate([a[field] for a in arrays])


def flags(values: np.ndarray, what: str) -> None:
    if not (((values == 0) | (values == 1)).all()):
        raise sk.Invalid(f"{what} is not 0/1")


def check_dtype(got: np.dtype, expected: np.dtype, what: str,
                index_fields: tuple[str, ...] = ()) -> None:
    """Same field names as the library's record; each field of the same kind and size (either
    byte order; ``index_fields`` may be 4- or 8-byte integers, as the library converts them)."""
    if got == expected:
        return
    if got.names != expected.names:
        raise sk.Invalid(f"{what} has fields {got.names}, expected {expected.names}")
    for name in expected.names:
        want, have = expected.fields[name][0], got.fields[name][0]
        sizes = (4, 8) if name in index_fields else (want.itemsize,)
        if not (have.kind == want.kind and have.itemsize in sizes and have.shape == want.shape):
            raise sk.Invalid(f"{what} field {name!r} is {have}, expected {want}")


def in_range(values: np.ndarray, low: int, high: int, what: str) -> None:
    bad = np.flatnonzero((values < low) | (values >= high))
    if bad.size:
        raise sk.Invalid(f"{what} {int(values[bad[0]])} is outside "
                         f"[{low}, {high})")


@validates("sklearn.tree._tree.Tree", loaders=("TreeNode",), many=True)
def sklearn_trees(nodes: list[Any]) -> None:
    """node_count equals the node array's length; children in range (-1 for a leaf, both or
    neither), every node reached once from the root, no cycle, max_depth at least the depth;
    feature indices in [0, n_features); thresholds numbers or +inf; missing-value flags 0/1;
    values of shape (n_nodes, n_outputs, max n_classes), finite; n_classes one per output.
    All the trees of a file are checked at once."""
    trees = in_trees(_sklearn_tree_arrays, nodes)
    arrays = [t[0] for t in trees]
    sizes = np.array([a.shape[0] for a in arrays], dtype=np.int64)
    offsets = np.cumsum(sizes) - sizes
    tree_of = np.repeat(np.arange(sizes.size), sizes)
    left, right = stacked(arrays, "left_child"), stacked(arrays, "right_child")
    leaf = left == TREE_LEAF
    first_bad((right == TREE_LEAF) != leaf, tree_of, offsets,
              "has one child (a leaf has none, a split two)")
    depth = forest_depths(left, right, ~leaf, sizes)
    deepest = np.maximum.reduceat(depth, offsets)
    max_depth = np.array([t[1] for t in trees])
    short = np.flatnonzero(max_depth < deepest)
    if short.size:
        k = int(short[0])
        raise sk.Invalid(f"max_depth is {max_depth[k]} but the tree is {deepest[k]} deep", k)
    feature = stacked(arrays, "feature")
    width = np.repeat(np.array([t[2] for t in trees]), sizes)
    first_bad(~leaf & ((feature < 0) | (feature >= width)), tree_of, offsets,
              "splits on feature index {}, outside [0, n_features)", feature)
    threshold = stacked(arrays, "threshold").astype(np.float64)
    first_bad(~leaf & (np.isnan(threshold) | (threshold == -np.inf)), tree_of, offsets,
              "has threshold {} (expected a number)", threshold)
    missing = stacked(arrays, "missing_go_to_left")
    first_bad((missing != 0) & (missing != 1), tree_of, offsets, "has missing_go_to_left {}",
              missing)


def _sklearn_tree_arrays(node: Any) -> tuple[np.ndarray, int, int]:
    """One Tree's own checks; its node array, max_depth and n_features."""
    from sklearn.tree._tree import NODE_DTYPE

    f_node, c_node, o_node = sk.sequence(node.args, "Tree's arguments", 3)
    n_features = sk.integer(f_node, "n_features", 1)
    n_outputs = sk.integer(o_node, "n_outputs", 1, MAX_OUTPUTS)
    n_classes = sk.array(c_node, "n_classes", "iu", ndim=1)
    if n_classes.shape != (n_outputs,):
        raise sk.Invalid(f"n_classes has {n_classes.size} entries for {n_outputs} outputs")
    require(((n_classes >= 1) & (n_classes < 2**31)).all(), "n_classes must be positive")
    state = sk.mapping(node.attrs, "Tree's state")
    if set(state) != {"max_depth", "node_count", "nodes", "values"}:
        raise sk.Invalid(f"Tree's state has keys {sorted(state)}")
    nodes = sk.array(state["nodes"], "nodes", "V", ndim=1)
    check_dtype(nodes.dtype, NODE_DTYPE, "nodes",
                ("left_child", "right_child", "feature", "n_node_samples"))
    n = nodes.shape[0]
    count = sk.integer(state["node_count"], "node_count", 1, 2**62)
    if count != n:
        raise sk.Invalid(f"node_count is {count} but the node array has {n} nodes")
    values = sk.array(state["values"], "values", "f", ndim=3)
    shape = (n, n_outputs, int(n_classes.max()))
    if values.dtype.itemsize != 8 or values.shape != shape:
        raise sk.Invalid(f"values are {values.dtype}{list(values.shape)}, "
                         f"expected float64{list(shape)}")
    require(np.isfinite(values).all(), "values hold NaN or infinity")
    return nodes, sk.integer(state["max_depth"], "max_depth", 0, 2**31), n_features


BITSETS = ("binned_left_cat_bitsets", "raw_left_cat_bitsets")


@validates("sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor", many=True)
def hist_gradient_boosting_predictors(nodes: list[Any]) -> None:
    """children in range for split nodes, every node reached once from the root, no cycle;
    is_leaf, is_categorical and missing_go_to_left 0/1; feature indices non-negative (their
    upper bound is the estimator's width, checked once it is built); numeric thresholds numbers
    or +inf; leaf values finite; category bitsets uint32 of shape (k, 8) and every categorical
    split's bitset_idx < k. All the predictors of a file are checked at once."""
    trees = in_trees(_predictor_arrays, nodes)
    arrays = [t[0] for t in trees]
    sizes = np.array([a.shape[0] for a in arrays], dtype=np.int64)
    offsets = np.cumsum(sizes) - sizes
    tree_of = np.repeat(np.arange(sizes.size), sizes)
    col = {f: stacked(arrays, f) for f in ("is_leaf", "is_categorical", "missing_go_to_left",
                                           "left", "right", "feature_idx", "num_threshold",
                                           "bitset_idx", "value")}
    for flag in ("is_leaf", "is_categorical", "missing_go_to_left"):
        first_bad((col[flag] != 0) & (col[flag] != 1), tree_of, offsets, f"has {flag} {{}}",
                  col[flag])
    split = col["is_leaf"] == 0
    forest_depths(col["left"], col["right"], split, sizes)
    first_bad(split & (col["feature_idx"] < 0), tree_of, offsets,
              "splits on a negative feature index {}", col["feature_idx"])
    threshold = col["num_threshold"].astype(np.float64)
    numeric = split & (col["is_categorical"] == 0)
    first_bad(numeric & (np.isnan(threshold) | (threshold == -np.inf)), tree_of, offsets,
              "has threshold {} (expected a number)", threshold)
    rows = np.repeat(np.array([t[1] for t in trees]), sizes)
    first_bad(split & (col["is_categorical"] == 1) & (col["bitset_idx"] >= rows), tree_of,
              offsets, "has bitset_idx {}, outside the category bitsets", col["bitset_idx"])
    value = col["value"].astype(np.float64)
    first_bad(~split & ~np.isfinite(value), tree_of, offsets, "is a leaf of value {}", value)


def _predictor_arrays(node: Any) -> tuple[np.ndarray, int]:
    """One TreePredictor's own checks; its node array and number of category bitsets."""
    from sklearn.ensemble._hist_gradient_boosting.common import PREDICTOR_RECORD_DTYPE

    state = sk.object_state(node, "TreePredictor")
    if set(state) != {"nodes", *BITSETS}:
        raise sk.Invalid(f"TreePredictor's state has keys {sorted(state)}")
    nodes = sk.array(state["nodes"], "nodes", "V", ndim=1)
    check_dtype(nodes.dtype, PREDICTOR_RECORD_DTYPE, "nodes")
    rows = []
    for name in BITSETS:
        b = sk.array(state[name], name, "u", ndim=2)
        if b.dtype.itemsize != 4 or b.shape[1] != 8 or not b.flags.c_contiguous:
            raise sk.Invalid(f"{name} is {b.dtype}{list(b.shape)}, expected uint32[k, 8]")
        rows.append(b.shape[0])
    return nodes, min(rows)


@validates("sklearn.ensemble._hist_gradient_boosting.binning._BinMapper")
def hist_gradient_boosting_binning(node: Any) -> None:
    """is_categorical_ one 0/1 flag per feature; n_bins_non_missing_ and bin_thresholds_ one
    entry per feature (1-D float thresholds); missing_values_bin_idx_ a uint8 bin; n_bins in
    [3, 256]."""
    state = sk.object_state(node, "_BinMapper")
    sk.integer(state["n_bins"], "n_bins", 3, 256)
    if "is_categorical_" not in state:
        return  # not fitted: nothing predicts with it
    is_categorical = sk.array(state["is_categorical_"], "is_categorical_", "u", ndim=1)
    flags(is_categorical, "is_categorical_")
    n_bins = sk.array(state["n_bins_non_missing_"], "n_bins_non_missing_", "iu", ndim=1)
    require(n_bins.shape == is_categorical.shape,
            "n_bins_non_missing_ and is_categorical_ differ in length")
    thresholds = sk.sequence(state["bin_thresholds_"], "bin_thresholds_", is_categorical.size)
    for i, t in enumerate(thresholds):
        sk.array(t, f"bin_thresholds_[{i}]", "f", ndim=1)
    sk.integer(state["missing_values_bin_idx_"], "missing_values_bin_idx_", 0, 255)
