"""Nearest-neighbor search structures: ``KDTree`` and ``BallTree`` (KNeighbors*, RadiusNeighbors*,
NearestNeighbors, LocalOutlierFactor, KNeighborsTransformer...) and their distance metrics.

A query walks the tree's heap layout (children of node i are 2i+1 and 2i+2) and reads
``data[idx_array[k]]`` for k in each node's [idx_start, idx_end) without bounds checks; a radius
query writes every point it accepts into a buffer of n_samples entries, so node ranges must
partition the points (a point in two leaves would be written twice, past the buffer's end).
A metric reads per-feature weights (``w``, ``V``, ``VI``) for as many features as the data has.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from unframe.converters.frontends._sklearn.validators import _skops as sk
from unframe.converters.frontends._sklearn.validators.registry import require, validates

_METRICS = "sklearn.metrics._dist_metrics."
# The metrics a tree class accepts (scikit-learn's VALID_METRICS, without PyFuncDistance, which
# calls a Python function from the file, and the deprecated WMinkowskiDistance).
KD_METRICS = ("EuclideanDistance64", "ManhattanDistance64", "ChebyshevDistance64",
              "MinkowskiDistance64")
BALL_METRICS = KD_METRICS + (
    "SEuclideanDistance64", "MahalanobisDistance64", "HaversineDistance64", "HammingDistance64",
    "CanberraDistance64", "BrayCurtisDistance64", "JaccardDistance64", "DiceDistance64",
    "RogersTanimotoDistance64", "RussellRaoDistance64", "SokalMichenerDistance64",
    "SokalSneathDistance64")
# p of the metrics whose p the KD tree's bounds read (Minkowski's is its parameter).
FIXED_P = {"EuclideanDistance64": 2.0, "ManhattanDistance64": 1.0, "ChebyshevDistance64": math.inf}
STATS = ("n_trims", "n_leaves", "n_splits", "n_calls")


@validates(*(_METRICS + m for m in BALL_METRICS))
def distance_metric(node: Any) -> None:
    """A metric from the allow-list by exact type name (never PyFuncDistance); state (p, w/V,
    VI) with p as the metric defines it (Minkowski: finite, > 0), float64 weight arrays of one
    dimension (w, V) and a square matrix (VI), all finite. Their length must match the data
    width, checked with the tree that holds the metric."""
    name = node.class_name
    p, vec, mat = _metric_state(node)
    if name in FIXED_P:
        if p != FIXED_P[name]:
            raise sk.Invalid(f"p is {p} for {name}, expected {FIXED_P[name]}")
    elif name == "MinkowskiDistance64":
        if not (math.isfinite(p) and p > 0):
            raise sk.Invalid(f"Minkowski p is {p}, expected a finite p > 0")
    if name == "MahalanobisDistance64":
        if not (mat.shape[0] == mat.shape[1] >= 1):
            raise sk.Invalid(f"VI has shape {list(mat.shape)}, expected square")
    require(np.isfinite(vec).all() and np.isfinite(mat).all(), "weights hold NaN or infinity")


def _metric_state(node: Any) -> tuple[float, np.ndarray, np.ndarray]:
    sk.expect(node, "ObjectNode")
    require(node.attrs is not None, "the metric has no state")
    p_node, vec_node, mat_node = sk.sequence(node.attrs, "the metric's state", 3)
    p = sk.value(p_node)
    if type(p) not in (int, float):
        raise sk.Invalid(f"p is {p!r}, expected a number")
    vec = sk.array(vec_node, "the metric's vector", "f", ndim=1)
    mat = sk.array(mat_node, "the metric's matrix", "f", ndim=2)
    require(vec.dtype.itemsize == 8 and mat.dtype.itemsize == 8, "metric weights are not float64")
    return float(p), vec, mat


def metric_width(node: Any) -> int | None:
    """The data width a metric's weights fix (None: any width)."""
    name = node.class_name
    _, vec, mat = _metric_state(node)
    if name == "MinkowskiDistance64":
        return vec.shape[0] or None  # no weights: any width
    if name == "SEuclideanDistance64":
        return vec.shape[0]
    if name == "MahalanobisDistance64":
        return mat.shape[0]
    if name == "HaversineDistance64":
        return 2  # latitude and longitude
    return None


@validates("sklearn.neighbors._kd_tree.KDTree", "sklearn.neighbors._ball_tree.BallTree")
def binary_tree(node: Any) -> None:
    """data float64 [n_samples, n_features]; idx_array a permutation of range(n_samples);
    n_nodes = len(node_data) = 2**n_levels - 1; node ranges inside [0, n_samples), the root's
    all points, every split node's children inside the array and splitting its range exactly;
    radii finite and non-negative; node_bounds (2 for KD, 1 for Ball, n_nodes, n_features);
    leaf_size >= 1; a metric the tree type accepts, its weights as wide as the data;
    sample_weight None or one per sample."""
    kd = node.class_name == "KDTree"
    sk.expect(node, "ObjectNode")
    require(node.attrs is not None, "the tree has no state")
    state = sk.sequence(node.attrs, "the tree's state", 13)
    data = sk.array(state[0], "data", "f", ndim=2)
    require(data.dtype.itemsize == 8 and data.size >= 1, "data is not a non-empty float64 matrix")
    n_samples, n_features = data.shape
    idx = sk.array(state[1], "idx_array", "i", ndim=1)
    require(idx.shape == (n_samples,) and np.array_equal(np.sort(idx), np.arange(n_samples)),
            "idx_array is not a permutation of the sample indices")
    nodes = sk.array(state[2], "node_data", "V", ndim=1)
    if nodes.dtype.names != ("idx_start", "idx_end", "is_leaf", "radius"):
        raise sk.Invalid(f"node_data has fields {nodes.dtype.names}")
    n_nodes = nodes.shape[0]
    require(sk.integer(state[6], "n_nodes", 1) == n_nodes, "n_nodes differs from node_data")
    n_levels = sk.integer(state[5], "n_levels", 1, 62)
    if not (n_nodes == 2**n_levels - 1):
        raise sk.Invalid(f"{n_nodes} nodes for {n_levels} levels")
    bounds = sk.array(state[3], "node_bounds", "f", ndim=3)
    if bounds.shape != (2 if kd else 1, n_nodes, n_features):
        raise sk.Invalid(f"node_bounds has shape {list(bounds.shape)}")
    sk.integer(state[4], "leaf_size", 1)
    for i, stat in enumerate(STATS, start=7):
        sk.integer(state[i], stat, 0, 2**62)
    _check_nodes(nodes, n_samples)
    metric = state[11]
    valid = KD_METRICS if kd else BALL_METRICS
    if sk.type_name(metric) not in {_METRICS + m for m in valid}:
        raise sk.Invalid(f"metric {sk.type_name(metric)} is not one unframe accepts for a {node.class_name}")
    width = metric_width(metric)
    if not (width is None or width == n_features):
        raise sk.Invalid(f"the metric is for {width} features, the data has {n_features}")
    if not sk.is_none(state[12]):
        weights = sk.array(state[12], "sample_weight", "f", ndim=1)
        require(weights.shape == (n_samples,), "sample_weight is not one weight per sample")


def _check_nodes(nodes: np.ndarray, n_samples: int) -> None:
    start = nodes["idx_start"].astype(np.int64)
    end = nodes["idx_end"].astype(np.int64)
    leaf = nodes["is_leaf"].astype(np.int64)
    require(np.isin(leaf, (0, 1)).all(), "is_leaf is not 0/1")
    require(((start >= 0) & (start <= end) & (end <= n_samples)).all(),
            "a node's point range is outside [0, n_samples)")
    radius = nodes["radius"].astype(np.float64)
    require((np.isfinite(radius) & (radius >= 0)).all(), "a node radius is negative or not finite")
    require(start[0] == 0 and end[0] == n_samples, "the root does not hold every point")
    n = nodes.shape[0]
    reachable = np.zeros(n, dtype=bool)
    reachable[0] = True
    first = 1
    while first < n:  # level by level: node i's parent is (i - 1) // 2
        level = np.arange(first, min(2 * first + 1, n))
        parent = (level - 1) // 2
        reachable[level] = reachable[parent] & (leaf[parent] == 0)
        first = 2 * first + 1
    split = np.flatnonzero(reachable & (leaf == 0))
    require(not split.size or 2 * split.max() + 2 < n, "a split node's children are past the "
                                                       "node array")
    lo, hi = 2 * split + 1, 2 * split + 2
    require((start[lo] == start[split]).all() and (end[lo] == start[hi]).all()
            and (end[hi] == end[split]).all(), "a split node's children do not split its "
                                               "point range")
