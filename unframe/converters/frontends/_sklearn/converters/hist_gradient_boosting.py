"""HistGradientBoostingClassifier/Regressor, registered with skl2onnx's own hook.

Why: skl2onnx 1.20's converter fails with scikit-learn 1.9. Its tree walker sets
``nodes_missing_value_tracks_true`` to the Python ``False`` on leaves and to the node's
``missing_go_to_left`` (a numpy uint8) on branches; protobuf refuses a bool in an INT list
("Field onnx.AttributeProto.ints: Expected an int, got a boolean"), so node creation fails.

This converter reads the fitted predictors' ``nodes`` arrays directly and emits the raw scores
(baseline + sum of trees), then the link function::

    X --TreeEnsembleRegressor(n_targets=K)--> raw --Add(baseline)--> scores
    regressor:  scores                                           -> variable [N, 1]
    binary:     Sigmoid(scores) -> [1-p, p]                      -> probabilities [N, 2]
    multiclass: Softmax(scores)                                  -> probabilities [N, K]
    classifier: ArgMax(probabilities) -> ArrayFeatureExtractor(classes) -> label [N]

On the double-precision route (input declared as double) the trees go in one ``ai.onnx.ml``
opset-5 ``TreeEnsemble`` node with float64 splits and leaf weights, so that thresholds keep
scikit-learn's float64 values; the float route uses the widely supported
``TreeEnsembleRegressor`` (ai.onnx.ml 1/3) with float32 thresholds, each the largest float32 at or
below scikit-learn's float64 one (so that float32 inputs lying on a threshold go where
scikit-learn sends them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class FlatTree:
    """One predictor's nodes split into interior nodes and leaves (original ids kept)."""

    features: list[int] = field(default_factory=list)
    thresholds: list[float] = field(default_factory=list)
    left: list[int] = field(default_factory=list)
    right: list[int] = field(default_factory=list)
    missing_left: list[int] = field(default_factory=list)
    is_leaf: list[bool] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


def check_supported(model: Any) -> None:
    """Categorical splits use bitsets TreeEnsemble can only express by enumeration: refuse them."""
    cats = getattr(model, "is_categorical_", None)
    if cats is not None and np.any(cats):
        raise NotImplementedError(
            f"{type(model).__name__} with categorical features has no ONNX converter "
            "(one-hot or ordinal-encode the categories in a Pipeline instead)")


def flatten(predictor: Any) -> FlatTree:
    nodes = predictor.nodes
    return FlatTree(
        features=nodes["feature_idx"].astype(np.int64).tolist(),
        thresholds=nodes["num_threshold"].astype(np.float64).tolist(),
        left=nodes["left"].astype(np.int64).tolist(),
        right=nodes["right"].astype(np.int64).tolist(),
        missing_left=nodes["missing_go_to_left"].astype(np.int64).tolist(),
        is_leaf=nodes["is_leaf"].astype(bool).tolist(),
        values=nodes["value"].astype(np.float64).tolist(),
    )


def trees_by_target(model: Any) -> list[tuple[int, FlatTree]]:
    """(target index, tree) for every predictor; iteration i, class k -> target k."""
    check_supported(model)
    return [(k, flatten(pred)) for iteration in model._predictors for k, pred in enumerate(iteration)]


def baseline(model: Any) -> np.ndarray:
    return np.asarray(model._baseline_prediction, dtype=np.float64).reshape(-1)


def regressor_attributes(trees: list[tuple[int, FlatTree]], n_targets: int) -> dict[str, Any]:
    """Attributes of ai.onnx.ml TreeEnsembleRegressor (float thresholds)."""
    a: dict[str, list[Any]] = {k: [] for k in (
        "nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
        "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true",
        "nodes_hitrates", "target_treeids", "target_nodeids", "target_ids", "target_weights")}
    for tree_id, (target, tree) in enumerate(trees):
        for node_id, leaf in enumerate(tree.is_leaf):
            a["nodes_treeids"].append(tree_id)
            a["nodes_nodeids"].append(node_id)
            a["nodes_hitrates"].append(1.0)
            if leaf:
                a["nodes_featureids"].append(0)
                a["nodes_modes"].append("LEAF")
                a["nodes_values"].append(0.0)
                a["nodes_truenodeids"].append(0)
                a["nodes_falsenodeids"].append(0)
                a["nodes_missing_value_tracks_true"].append(0)
                a["target_treeids"].append(tree_id)
                a["target_nodeids"].append(node_id)
                a["target_ids"].append(target)
                a["target_weights"].append(tree.values[node_id])
            else:
                a["nodes_featureids"].append(tree.features[node_id])
                a["nodes_modes"].append("BRANCH_LEQ")
                a["nodes_values"].append(tree.thresholds[node_id])
                a["nodes_truenodeids"].append(tree.left[node_id])
                a["nodes_falsenodeids"].append(tree.right[node_id])
                a["nodes_missing_value_tracks_true"].append(tree.missing_left[node_id])
    out: dict[str, Any] = dict(a)
    out["nodes_values"] = float32_below(np.asarray(a["nodes_values"], dtype=np.float64))
    out["target_weights"] = np.asarray(a["target_weights"], dtype=np.float32)
    out["nodes_hitrates"] = np.asarray(a["nodes_hitrates"], dtype=np.float32)
    out.update(n_targets=n_targets, aggregate_function="SUM", post_transform="NONE")
    return out


def float32_below(thresholds: np.ndarray) -> np.ndarray:
    """The largest float32 at or below each float64 threshold. For a float32 input x,
    ``x <= t`` and ``x <= float32_below(t)`` agree exactly; rounding to nearest instead would
    move the rows lying on a threshold whose float32 rounds up."""
    rounded = thresholds.astype(np.float32)
    up = rounded.astype(np.float64) > thresholds
    rounded[up] = np.nextafter(rounded[up], np.float32(-np.inf))
    return rounded


def tree_ensemble_attributes(trees: list[tuple[int, FlatTree]], n_targets: int,
                             dtype: type) -> dict[str, Any]:
    """Attributes of ai.onnx.ml opset-5 TreeEnsemble: interior nodes and leaves in separate
    arrays; a child reference is a leaf index when its ``*leafs`` flag is 1."""
    from onnx import numpy_helper

    roots, feats, splits, modes, missing = [], [], [], [], []
    true_ids, true_leaf, false_ids, false_leaf = [], [], [], []
    leaf_targets, leaf_weights = [], []
    for target, tree in trees:
        node_index: dict[int, int] = {}
        leaf_index: dict[int, int] = {}
        for i, leaf in enumerate(tree.is_leaf):
            if leaf:
                leaf_index[i] = len(leaf_targets)
                leaf_targets.append(target)
                leaf_weights.append(tree.values[i])
        if tree.is_leaf[0]:
            # A tree that is a single leaf still needs an interior root: both branches -> leaf.
            roots.append(len(feats))
            feats.append(0), splits.append(0.0), modes.append(0), missing.append(0)
            true_ids.append(leaf_index[0]), true_leaf.append(1)
            false_ids.append(leaf_index[0]), false_leaf.append(1)
            continue
        for i, leaf in enumerate(tree.is_leaf):
            if not leaf:
                node_index[i] = len(feats) + len(node_index)
        roots.append(node_index[0])
        for i in sorted(node_index):
            feats.append(tree.features[i])
            splits.append(tree.thresholds[i])
            modes.append(0)  # BRANCH_LEQ
            missing.append(tree.missing_left[i])
            for child, ids, flags in ((tree.left[i], true_ids, true_leaf),
                                      (tree.right[i], false_ids, false_leaf)):
                if tree.is_leaf[child]:
                    ids.append(leaf_index[child]), flags.append(1)
                else:
                    ids.append(node_index[child]), flags.append(0)
    return {
        "tree_roots": roots, "nodes_featureids": feats,
        "nodes_modes": numpy_helper.from_array(np.asarray(modes, dtype=np.uint8), "nodes_modes"),
        "nodes_splits": numpy_helper.from_array(np.asarray(splits, dtype=dtype), "nodes_splits"),
        "nodes_truenodeids": true_ids, "nodes_trueleafs": true_leaf,
        "nodes_falsenodeids": false_ids, "nodes_falseleafs": false_leaf,
        "nodes_missing_value_tracks_true": missing,
        "leaf_targetids": leaf_targets,
        "leaf_weights": numpy_helper.from_array(np.asarray(leaf_weights, dtype=dtype), "leaf_weights"),
        "n_targets": n_targets, "aggregate_function": 1, "post_transform": 0,
    }


def fix_ml_opset(proto: Any) -> bool:
    """Raise the ai.onnx.ml import to 5 when a TreeEnsemble node (new in ml opset 5) is present.
    Returns whether the model was changed."""
    if not any(n.op_type == "TreeEnsemble" and n.domain == "ai.onnx.ml" for n in proto.graph.node):
        return False
    for imp in proto.opset_import:
        if imp.domain == "ai.onnx.ml" and imp.version < 5:
            imp.version = 5
            return True
    return False


def _input_dtype(operator: Any) -> type:
    from skl2onnx.common.data_types import guess_numpy_type

    return np.float64 if guess_numpy_type(operator.inputs[0].type) == np.float64 else np.float32


def add_raw_scores(scope: Any, operator: Any, container: Any, n_targets: int) -> str:
    """Emit the trees plus the baseline; return the name of the [N, n_targets] score tensor."""
    from onnx import TensorProto

    model = operator.raw_operator
    dtype = _input_dtype(operator)
    trees = trees_by_target(model)
    raw = scope.get_unique_variable_name("hgb_raw")
    x = operator.inputs[0].full_name
    if dtype == np.float64:
        attrs = tree_ensemble_attributes(trees, n_targets, np.float64)
        # skl2onnx refuses to declare ai.onnx.ml 5; declare 3 and let fix_ml_opset() raise it.
        container.add_node("TreeEnsemble", x, raw, op_domain="ai.onnx.ml", op_version=3,
                           name=scope.get_unique_operator_name("TreeEnsemble"), **attrs)
    else:
        if operator.inputs[0].type.__class__.__name__ != "FloatTensorType":
            cast = scope.get_unique_variable_name("hgb_cast")
            container.add_node("Cast", x, cast, to=TensorProto.FLOAT,
                               name=scope.get_unique_operator_name("Cast"))
            x = cast
        attrs = regressor_attributes(trees, n_targets)
        container.add_node("TreeEnsembleRegressor", x, raw, op_domain="ai.onnx.ml", op_version=1,
                           name=scope.get_unique_operator_name("TreeEnsembleRegressor"), **attrs)
    base = scope.get_unique_variable_name("hgb_baseline")
    onnx_type = TensorProto.DOUBLE if dtype == np.float64 else TensorProto.FLOAT
    container.add_initializer(base, onnx_type, [1, n_targets], baseline(model).astype(dtype).tolist())
    scores = scope.get_unique_variable_name("hgb_scores")
    container.add_node("Add", [raw, base], scores, name=scope.get_unique_operator_name("Add"))
    return scores


def convert_regressor(scope: Any, operator: Any, container: Any) -> None:
    model = operator.raw_operator
    scores = add_raw_scores(scope, operator, container, int(model.n_trees_per_iteration_))
    # poisson and gamma losses predict through a log link: prediction = exp(raw score)
    link = type(getattr(getattr(model, "_loss", None), "link", None)).__name__
    op_type = "Exp" if link == "LogLink" else "Identity"
    container.add_node(op_type, scores, operator.outputs[0].full_name,
                       name=scope.get_unique_operator_name(op_type))


def convert_classifier(scope: Any, operator: Any, container: Any) -> None:
    model = operator.raw_operator
    k = int(model.n_trees_per_iteration_)
    scores = add_raw_scores(scope, operator, container, k)
    probs = operator.outputs[1].full_name
    if k == 1:
        add_binary_probabilities(scope, container, scores, probs, _input_dtype(operator))
    else:
        container.add_node("Softmax", scores, probs, axis=1,
                           name=scope.get_unique_operator_name("Softmax"))
    add_labels(scope, container, probs, operator.outputs[0].full_name, model.classes_)


def add_binary_probabilities(scope: Any, container: Any, scores: str, probs: str,
                             dtype: type) -> None:
    """[N,1] scores -> [N,2] (1 - sigmoid, sigmoid)."""
    from onnx import TensorProto

    p1 = scope.get_unique_variable_name("p1")
    p0 = scope.get_unique_variable_name("p0")
    one = scope.get_unique_variable_name("one")
    onnx_type = TensorProto.DOUBLE if dtype == np.float64 else TensorProto.FLOAT
    container.add_initializer(one, onnx_type, [], [1.0])
    container.add_node("Sigmoid", scores, p1, name=scope.get_unique_operator_name("Sigmoid"))
    container.add_node("Sub", [one, p1], p0, name=scope.get_unique_operator_name("Sub"))
    container.add_node("Concat", [p0, p1], probs, axis=1,
                       name=scope.get_unique_operator_name("Concat"))


def add_labels(scope: Any, container: Any, probs: str, label: str, classes: np.ndarray) -> None:
    """label = classes[argmax(probs, axis=1)], int64 or string like skl2onnx's classifiers."""
    from onnx import TensorProto

    index = scope.get_unique_variable_name("argmax")
    container.add_node("ArgMax", probs, index, axis=1, keepdims=0,
                       name=scope.get_unique_operator_name("ArgMax"))
    table = scope.get_unique_variable_name("classes")
    if np.issubdtype(np.asarray(classes).dtype, np.integer) or np.asarray(classes).dtype == bool:
        container.add_initializer(table, TensorProto.INT64, [len(classes)],
                                  [int(c) for c in classes])
    else:
        # a Constant node, not an initializer: string initializers trip size estimates that
        # assume fixed-width types
        from onnx import helper

        value = helper.make_tensor(table, TensorProto.STRING, [len(classes)],
                                   [str(c).encode() for c in classes])
        container.add_node("Constant", [], table, value=value,
                           name=scope.get_unique_operator_name("Constant"))
    container.add_node("Gather", [table, index], label, axis=0,
                       name=scope.get_unique_operator_name("Gather"))


def register() -> None:
    from skl2onnx import update_registered_converter
    from skl2onnx.common.shape_calculator import (
        calculate_linear_classifier_output_shapes,
        calculate_linear_regressor_output_shapes,
    )
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    update_registered_converter(
        HistGradientBoostingClassifier, "UnframeHistGradientBoostingClassifier",
        calculate_linear_classifier_output_shapes, convert_classifier,
        options={"zipmap": [True, False, "columns"], "nocl": [True, False]})
    update_registered_converter(
        HistGradientBoostingRegressor, "UnframeHistGradientBoostingRegressor",
        calculate_linear_regressor_output_shapes, convert_regressor)
