"""Decision-tree storage: scikit-learn's ``Tree`` (decision trees, random forests, extra trees,
gradient boosting, isolation forests, AdaBoost and bagging of trees) and HistGradientBoosting's
``TreePredictor`` and ``_BinMapper``.

scikit-learn walks these node arrays in Cython without bounds checks: a child index out of
range reads outside the array, a cycle never ends, a feature index past the input's width
reads outside the row. ``tree_depths`` proves the arrays are one tree rooted at node 0 (the
boosters' validators use it too); each validator adds its format's own fields.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.frontends._sklearn.validators import _skops as sk
from unframe.converters.frontends._sklearn.validators import require, validates

TREE_LEAF = -1  # scikit-learn's child index of a leaf
MAX_OUTPUTS = 2**20


def tree_depths(left: np.ndarray, right: np.ndarray, internal: np.ndarray) -> np.ndarray:
    """The depth of every node, after proving that the child arrays are one tree rooted at node
    0: the children of internal nodes are in [1, n), every node but the root is the child of
    exactly one node, and following parents from any node reaches the root (no cycle).

    Vectorized: a bincount for the parent counts, then pointer jumping (each step doubles the
    distance to a node's known ancestor), so a tree of n nodes costs O(n log n) numpy work."""
    n = int(internal.shape[0])
    require(n >= 1, "the tree has no nodes")
    idx = np.flatnonzero(internal)
    left_kids = left[idx].astype(np.int64)
    right_kids = right[idx].astype(np.int64)
    kids = np.concatenate([left_kids, right_kids])
    bad = np.flatnonzero((kids < 1) | (kids >= n))
    if bad.size:
        k = int(bad[0])
        raise sk.Invalid(f"node {int(idx[k % idx.size])} has child index {int(kids[k])}, "
                         f"outside [1, {n})")
    counts = np.bincount(kids, minlength=n)
    twice = np.flatnonzero(counts > 1)
    require(not twice.size, f"node {int(twice[0]) if twice.size else 0} is the child of "
                            f"{int(counts[twice[0]]) if twice.size else 0} nodes")
    orphans = np.flatnonzero(counts[1:] == 0) + 1
    require(not orphans.size, f"node {int(orphans[0]) if orphans.size else 0} is not "
                              "reachable from the root")
    parent = np.zeros(n, dtype=np.int64)
    parent[left_kids] = idx
    parent[right_kids] = idx
    depth = (np.arange(n) != 0).astype(np.int64)
    for _ in range(n.bit_length() + 1):
        if not parent.any():
            break
        depth = depth + depth[parent]
        parent = parent[parent]
    cyclic = np.flatnonzero(parent)
    require(not cyclic.size, f"node {int(cyclic[0]) if cyclic.size else 0} is on a cycle, "
                             "not reachable from the root")
    return depth


def check_dtype(got: np.dtype, expected: np.dtype, what: str,
                index_fields: tuple[str, ...] = ()) -> None:
    """Same field names as the library's record; each field of the same kind and size (either
    byte order; ``index_fields`` may be 4- or 8-byte integers, as the library converts them)."""
    require(got.names == expected.names,
            f"{what} has fields {got.names}, expected {expected.names}")
    for name in expected.names:
        want, have = expected.fields[name][0], got.fields[name][0]
        sizes = (4, 8) if name in index_fields else (want.itemsize,)
        require(have.kind == want.kind and have.itemsize in sizes and have.shape == want.shape,
                f"{what} field {name!r} is {have}, expected {want}")


def finite_or_inf(values: np.ndarray, what: str) -> None:
    """Split thresholds: numbers, or +inf (the split that sends only missing values right)."""
    bad = np.flatnonzero(np.isnan(values) | (values == -np.inf))
    require(not bad.size, f"{what} {float(values[bad[0]]) if bad.size else 0.0} at split "
                          f"{int(bad[0]) if bad.size else 0} (expected a number)")


def in_range(values: np.ndarray, low: int, high: int, what: str) -> None:
    bad = np.flatnonzero((values < low) | (values >= high))
    require(not bad.size, f"{what} {int(values[bad[0]]) if bad.size else 0} is outside "
                          f"[{low}, {high})")


@validates("sklearn.tree._tree.Tree", loaders=("TreeNode",))
def sklearn_tree(node: Any) -> None:
    """node_count equals the node array's length; children in range (-1 for a leaf, both or
    neither), every node reached once from the root, no cycle, max_depth at least the depth;
    feature indices in [0, n_features); thresholds numbers or +inf; missing-value flags 0/1;
    values of shape (n_nodes, n_outputs, max n_classes), finite; n_classes one per output."""
    from sklearn.tree._tree import NODE_DTYPE

    f_node, c_node, o_node = sk.sequence(node.args, "Tree's arguments", 3)
    n_features = sk.integer(f_node, "n_features", 1)
    n_outputs = sk.integer(o_node, "n_outputs", 1, MAX_OUTPUTS)
    n_classes = sk.array(c_node, "n_classes", "iu", ndim=1)
    require(n_classes.shape == (n_outputs,),
            f"n_classes has {n_classes.size} entries for {n_outputs} outputs")
    require(((n_classes >= 1) & (n_classes < 2**31)).all(), "n_classes must be positive")
    state = sk.mapping(node.attrs, "Tree's state")
    require(set(state) == {"max_depth", "node_count", "nodes", "values"},
            f"Tree's state has keys {sorted(state)}")
    nodes = sk.array(state["nodes"], "nodes", "V", ndim=1)
    check_dtype(nodes.dtype, NODE_DTYPE, "nodes",
                ("left_child", "right_child", "feature", "n_node_samples"))
    n = nodes.shape[0]
    count = sk.integer(state["node_count"], "node_count", 1, 2**62)
    require(count == n, f"node_count is {count} but the node array has {n} nodes")
    values = sk.array(state["values"], "values", "f", ndim=3)
    shape = (n, n_outputs, int(n_classes.max()))
    require(values.dtype.itemsize == 8 and values.shape == shape,
            f"values are {values.dtype}{list(values.shape)}, expected float64{list(shape)}")
    require(np.isfinite(values).all(), "values hold NaN or infinity")

    left, right = nodes["left_child"], nodes["right_child"]
    leaf = left == TREE_LEAF
    one = np.flatnonzero((right == TREE_LEAF) != leaf)
    require(not one.size, f"node {int(one[0]) if one.size else 0} has one child (a leaf has none, "
                          "a split two)")
    depth = tree_depths(left, right, ~leaf)
    max_depth = sk.integer(state["max_depth"], "max_depth", 0, 2**31)
    require(max_depth >= depth.max(), f"max_depth is {max_depth} but the tree is "
                                      f"{int(depth.max())} deep")
    split = nodes[~leaf]
    in_range(split["feature"], 0, n_features, "feature index")
    finite_or_inf(split["threshold"].astype(np.float64), "threshold")
    require(np.isin(nodes["missing_go_to_left"], (0, 1)).all(), "missing_go_to_left is not 0/1")


@validates("sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor")
def hist_gradient_boosting_predictor(node: Any) -> None:
    """children in range for split nodes, every node reached once from the root, no cycle;
    is_leaf, is_categorical and missing_go_to_left 0/1; feature indices non-negative (their
    upper bound is the estimator's width, checked once it is built); numeric thresholds numbers
    or +inf; leaf values finite; category bitsets uint32 of shape (k, 8) and every categorical
    split's bitset_idx < k."""
    from sklearn.ensemble._hist_gradient_boosting.common import PREDICTOR_RECORD_DTYPE

    state = sk.object_state(node, "TreePredictor")
    require(set(state) == {"nodes", "binned_left_cat_bitsets", "raw_left_cat_bitsets"},
            f"TreePredictor's state has keys {sorted(state)}")
    nodes = sk.array(state["nodes"], "nodes", "V", ndim=1)
    check_dtype(nodes.dtype, PREDICTOR_RECORD_DTYPE, "nodes")
    bitsets = [sk.array(state[k], k, "u", ndim=2) for k in ("binned_left_cat_bitsets",
                                                            "raw_left_cat_bitsets")]
    for name, b in zip(("binned_left_cat_bitsets", "raw_left_cat_bitsets"), bitsets, strict=True):
        require(b.dtype.itemsize == 4 and b.shape[1] == 8 and b.flags.c_contiguous,
                f"{name} is {b.dtype}{list(b.shape)}, expected uint32[k, 8]")
    for flag in ("is_leaf", "is_categorical", "missing_go_to_left"):
        require(np.isin(nodes[flag], (0, 1)).all(), f"{flag} is not 0/1")
    internal = nodes["is_leaf"] == 0
    tree_depths(nodes["left"], nodes["right"], internal)
    split = nodes[internal]
    require((split["feature_idx"] >= 0).all(), "a split has a negative feature index")
    numeric = split[split["is_categorical"] == 0]
    finite_or_inf(numeric["num_threshold"].astype(np.float64), "threshold")
    categorical = split[split["is_categorical"] == 1]
    in_range(categorical["bitset_idx"], 0, min(b.shape[0] for b in bitsets), "bitset_idx")
    require(np.isfinite(nodes["value"][~internal]).all(), "leaf values hold NaN or infinity")


@validates("sklearn.ensemble._hist_gradient_boosting.binning._BinMapper")
def hist_gradient_boosting_binning(node: Any) -> None:
    """is_categorical_ one 0/1 flag per feature; n_bins_non_missing_ and bin_thresholds_ one
    entry per feature (1-D float thresholds); missing_values_bin_idx_ a uint8 bin; n_bins in
    [3, 256]."""
    state = sk.object_state(node, "_BinMapper")
    sk.integer(state["n_bins"], "n_bins", 3, 256)
    if "is_categorical_" not in state:
        return  # not fitted: nothing predicts with it
    flags = sk.array(state["is_categorical_"], "is_categorical_", "u", ndim=1)
    require(np.isin(flags, (0, 1)).all(), "is_categorical_ is not 0/1")
    n_bins = sk.array(state["n_bins_non_missing_"], "n_bins_non_missing_", "iu", ndim=1)
    require(n_bins.shape == flags.shape, "n_bins_non_missing_ and is_categorical_ differ in length")
    thresholds = sk.sequence(state["bin_thresholds_"], "bin_thresholds_", flags.size)
    for i, t in enumerate(thresholds):
        sk.array(t, f"bin_thresholds_[{i}]", "f", ndim=1)
    sk.integer(state["missing_values_bin_idx_"], "missing_values_bin_idx_", 0, 255)
