"""Tree ensembles lowered to standard ONNX give onnxruntime's ai.onnx.ml results: every node mode,
missing-value rule, aggregate, post transform, base values, multi-target, the binary classifier
rules, TreeEnsemble (ai.onnx.ml 5) with set membership, float and double inputs, with each of the
three strategies. Inputs come from the grid the thresholds come from (so rows sit exactly on
thresholds) with NaN and +-inf mixed in."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from mlt_models import (
    GRID,
    assert_same,
    grid_inputs,
    lowered,
    random_tree,
    run_ort,
    single_node_model,
    v3_node,
    v5_node,
    varies,
)
from onnx import TensorProto as TP

from unframe.passes.ml_to_tensor import check, choose_strategy, has_ml_ops

F = 4
STRATEGIES = ("gemm", "perfect", "traversal")
ALL_MODES = [0, 1, 2, 3, 4, 5]


def compare(proto: Any, x: np.ndarray, strategies: tuple[str, ...] = STRATEGIES) -> None:
    ref = run_ort(proto, {"X": x})
    assert varies([r for r in ref if r.dtype.kind == "f"]), "the reference scores are constant"
    for strategy in strategies:
        low, report = lowered(proto, tree_strategy=strategy)
        assert report.lowered and strategy in report.strategies()[0]
        assert_same(ref, run_ort(low, {"X": x}), strategy)


def forest(seed: int, n: int, depth: int, targets: int, modes: list[int], missing: float,
           leaves: str = "all") -> list[Any]:
    rng = np.random.default_rng(seed)
    return [random_tree(rng, depth, F, targets, modes, missing, leaves) for _ in range(n)]


def test_inputs_sit_on_thresholds() -> None:
    """The premise of the exactness tests: many inputs equal a threshold exactly."""
    x = grid_inputs(np.random.default_rng(0), 300, F)
    assert np.isin(x, GRID).mean() > 0.5 and np.isnan(x).any() and np.isinf(x).any()


REGRESSORS = [
    # (targets, aggregate, post, base, leaf targets, modes, missing rate)
    (1, "SUM", "NONE", None, "all", [0], 0.0),
    (1, "SUM", "NONE", [0.5], "all", [0], 0.5),
    (1, "AVERAGE", "NONE", None, "all", [0, 1, 2, 3], 0.5),
    (1, "MIN", "NONE", [0.25], "all", ALL_MODES, 0.5),
    (1, "MAX", "PROBIT", None, "all", [0, 1], 0.5),
    (1, "SUM", "LOGISTIC", None, "all", [0, 1], 0.5),  # ignored on one target, as onnxruntime
    (3, "SUM", "NONE", [0.1, 0.2, 0.3], "all", ALL_MODES, 0.5),
    (3, "AVERAGE", "SOFTMAX", None, "some", [0, 3], 0.5),
    (3, "MIN", "LOGISTIC", [1.0, 2.0, 3.0], "some", [0, 3], 0.5),
    (3, "MAX", "SOFTMAX_ZERO", None, "some", [0, 3], 0.5),
    (2, "SUM", "PROBIT", None, "all", [0], 0.5),
]


@pytest.mark.parametrize("case", REGRESSORS, ids=[f"{c[0]}t-{c[1]}-{c[2]}-{c[4]}-m{len(c[5])}"
                                                    for c in REGRESSORS])
def test_tree_ensemble_regressor(case: tuple) -> None:
    targets, aggregate, post, base, leaves, modes, missing = case
    trees = forest(1, 6, 4, targets, modes, missing, leaves)
    node = v3_node(trees, "TreeEnsembleRegressor", n_targets=targets, aggregate=aggregate,
                   post=post, base=base)
    compare(single_node_model(node, F), grid_inputs(np.random.default_rng(2), 300, F))


CLASSIFIERS = [
    # (classes, post, base, leaf targets, modes, missing, weight sign)
    (3, "NONE", None, "all", [0], 0.0, "any"),
    (3, "SOFTMAX", [0.1, 0.2, 0.3], "all", [0, 1, 2, 3], 0.5, "any"),
    (3, "LOGISTIC", None, "some", [0, 4, 5], 0.5, "any"),
    (2, "NONE", None, "all", [0], 0.5, "any"),
    (2, "SOFTMAX", [0.3, 0.4], "all", [0], 0.5, "any"),
    (2, "NONE", None, "one", [0], 0.5, "positive"),     # skl2onnx's random forests
    (2, "LOGISTIC", None, "one", [0], 0.5, "any"),      # gradient boosting, binary
    (2, "LOGISTIC", [0.3], "one", [0], 0.5, "any"),
    (2, "NONE", [0.3, 0.4], "one", [0], 0.5, "positive"),
    (2, "SOFTMAX_ZERO", None, "one", [0], 0.5, "any"),
]


@pytest.mark.parametrize("case", CLASSIFIERS, ids=[f"{c[0]}c-{c[1]}-b{len(c[2] or [])}-{c[3]}-{c[6]}"
                                                     for c in CLASSIFIERS])
def test_tree_ensemble_classifier(case: tuple) -> None:
    classes, post, base, leaves, modes, missing, sign = case
    trees = forest(3, 6, 4, classes, modes, missing, leaves)
    if sign == "positive":
        for tree in trees:
            tree.weights = [{k: abs(w) for k, w in ws.items()} for ws in tree.weights]
    node = v3_node(trees, "TreeEnsembleClassifier", n_targets=classes, post=post, base=base,
                   labels=[3, 7] if classes == 2 else None)
    model = single_node_model(node, F, outputs=[("label", TP.INT64), ("scores", TP.FLOAT)])
    compare(model, grid_inputs(np.random.default_rng(4), 300, F))


def test_binary_classifier_scoring_only_the_second_class() -> None:
    trees = forest(5, 5, 3, 2, [0], 0.5)
    for tree in trees:
        tree.weights = [{1: w[0]} if w else {} for w in tree.weights]
    for base in (None, [0.25, 0.5]):
        node = v3_node(trees, "TreeEnsembleClassifier", n_targets=2, base=base, labels=[3, 7])
        model = single_node_model(node, F, outputs=[("label", TP.INT64), ("scores", TP.FLOAT)])
        compare(model, grid_inputs(np.random.default_rng(6), 300, F))


def test_string_class_labels() -> None:
    trees = forest(7, 5, 4, 3, [0], 0.3)
    node = v3_node(trees, "TreeEnsembleClassifier", n_targets=3, post="SOFTMAX",
                   labels=["cat", "dog", "eel"])
    model = single_node_model(node, F, outputs=[("label", TP.STRING), ("scores", TP.FLOAT)])
    compare(model, grid_inputs(np.random.default_rng(8), 300, F), ("perfect",))


V5 = [  # (targets, aggregate, post) with ai.onnx.ml 5's integer codes
    (1, 1, 0), (1, 0, 0), (1, 2, 0), (1, 3, 4), (3, 1, 1), (3, 0, 2), (3, 3, 3), (2, 2, 0)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float", "double"])
@pytest.mark.parametrize("case", V5, ids=[f"{t}t-agg{a}-post{p}" for t, a, p in V5])
def test_tree_ensemble_v5(case: tuple, dtype: type) -> None:
    """Every mode including BRANCH_MEMBER (small sets in [0, 30] and larger ones, which
    onnxruntime tests differently), missing values, aggregates and post transforms."""
    targets, aggregate, post = case
    rng = np.random.default_rng(9)
    trees = [random_tree(rng, 3, F, targets, ALL_MODES, 0.5, "some", member=True) for _ in range(5)]
    node = v5_node(trees, n_targets=targets, aggregate=aggregate, post=post, dtype=dtype)
    t = TP.DOUBLE if dtype == np.float64 else TP.FLOAT
    model = single_node_model(node, F, in_type=t, outputs=[("scores", t)], ml_opset=5)
    compare(model, grid_inputs(np.random.default_rng(10), 300, F, dtype=dtype), ("perfect", "traversal"))


def test_double_inputs_compare_in_double() -> None:
    """Thresholds between two float32 numbers: a float32 comparison would move rows."""
    rng = np.random.default_rng(11)
    trees = [random_tree(rng, 4, F, 1, [0, 1], 0.2) for _ in range(5)]
    for tree in trees:
        tree.thresholds = [t + 1e-9 for t in tree.thresholds]
    node = v3_node(trees, "TreeEnsembleRegressor", n_targets=1, double_attrs=True)
    model = single_node_model(node, F, in_type=TP.DOUBLE)
    x = grid_inputs(rng, 300, F, dtype=np.float64)
    x[:50] += 1e-9  # exactly on the shifted thresholds
    compare(model, x)


def test_deep_trees_choose_traversal_and_match() -> None:
    trees = forest(12, 3, 12, 1, [0, 1, 2, 3], 0.5)
    node = v3_node(trees, "TreeEnsembleRegressor", n_targets=1)
    model = single_node_model(node, F)
    low, report = lowered(model)
    depth = int(report.strategies()[0].split("depth ")[1].split(":")[0])
    assert depth > 10 and report.strategies()[0].endswith("traversal")
    x = grid_inputs(np.random.default_rng(13), 300, F)
    assert_same(run_ort(model, {"X": x}), run_ort(low, {"X": x}), "traversal")


@pytest.mark.parametrize("depth, strategy", [(0, "gemm"), (3, "gemm"), (4, "perfect"), (10, "perfect"),
                                             (11, "traversal")])
def test_strategy_by_depth(depth: int, strategy: str) -> None:
    assert choose_strategy(depth) == strategy


def test_forced_strategy_refuses_trees_too_deep_for_it() -> None:
    from unframe.errors import UnsupportedError

    trees = forest(12, 3, 12, 1, [0], 0.0)
    model = single_node_model(v3_node(trees, "TreeEnsembleRegressor", n_targets=1), F)
    _, report = lowered(model, tree_strategy="traversal")
    assert int(report.strategies()[0].split("depth ")[1].split(":")[0]) > 8
    with pytest.raises(UnsupportedError, match="gemm strategy takes trees up to depth 8"):
        lowered(model, tree_strategy="gemm")


def test_lowered_model_has_no_ml_ops_and_no_ml_import() -> None:
    import onnx_ir as ir

    trees = forest(15, 3, 3, 1, [0], 0.0)
    model = single_node_model(v3_node(trees, "TreeEnsembleRegressor", n_targets=1), F)
    low, _ = lowered(model)
    lowered_ir = ir.serde.deserialize_model(low)
    assert not has_ml_ops(lowered_ir) and "ai.onnx.ml" not in lowered_ir.opset_imports
    assert all(n.metadata_props.get("unframe.keep_fp32") == "1" for n in lowered_ir.graph)


def test_check_names_every_refused_node() -> None:
    """A single-target ensemble with a leaf without weight, and a classifier whose second class
    scores on some rows only: both refused, each with its reason, before anything changes."""
    import onnx_ir as ir

    trees = forest(16, 2, 3, 1, [0], 0.0)
    trees[0].weights = [{} for _ in trees[0].weights]
    reg = v3_node(trees, "TreeEnsembleRegressor", n_targets=1)
    mixed = forest(17, 2, 3, 2, [0], 0.0)
    mixed[0].weights = [{0: 1.0} if w else {} for w in mixed[0].weights]
    mixed[1].weights = [({1: 1.0} if i % 2 else {0: 1.0}) if w else {}
                        for i, w in enumerate(mixed[1].weights)]
    clf = v3_node(mixed, "TreeEnsembleClassifier", n_targets=2, labels=[0, 1])
    for node, reason in ((reg, "leaf that has no weight"), (clf, "some rows only")):
        blockers = check(ir.serde.deserialize_model(single_node_model(
            node, F, outputs=[(o, TP.FLOAT if o == "scores" else TP.INT64) for o in node.output])))
        assert len(blockers) == 1 and reason in blockers[0].reason
        assert blockers[0].domain == "ai.onnx.ml" and blockers[0].op == node.op_type
