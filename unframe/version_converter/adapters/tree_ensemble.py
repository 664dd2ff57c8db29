"""ai.onnx.ml TreeEnsembleRegressor -> TreeEnsemble (ai.onnx.ml 5 removed the old tree operators).

ml 4->5::  TreeEnsembleRegressor(x)  ->  TreeEnsemble(x) [-> Mul(1/trees)] [-> Add(base_values)]

The old operator lists every node of every tree (leaves included, ``nodes_modes="LEAF"``) and
attaches weights to leaves through ``target_*``; TreeEnsemble lists interior nodes only, with
each branch pointing either at another interior node or at one leaf entry
``(leaf_targetids, leaf_weights)``. The rewrite:

* interior nodes keep their order; ``nodes_modes`` become the uint8 codes, thresholds a tensor of
  the input's float type; a tree that is a single leaf becomes one node whose two branches
  reach the same leaf (as the spec says);
* a leaf with one weight per target maps directly. When some leaf carries weights for several
  targets (multi-output trees), the tree is repeated once per target, which is exact for SUM;
  AVERAGE then sums and multiplies by 1/trees afterwards;
* ``base_values`` (absent from TreeEnsemble) become an Add after the tree ensemble;
* integer inputs are cast to float first (the old operator compared them as floats); a double
  input gives a double TreeEnsemble whose output is cast back to float, the old output type.

Refused: TreeEnsembleClassifier (its label outputs need more than one node and are not written
yet), a post_transform other than NONE together with base values or averaging across repeated
trees (the transform would have to move after them), MIN/MAX with leaves that lack a weight for
some target.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.registry import adapter

ML = "ai.onnx.ml"
_MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4, "BRANCH_NEQ": 5}
_AGGREGATES = {"AVERAGE": 0, "SUM": 1, "MIN": 2, "MAX": 3}
_POST = {"NONE": 0, "SOFTMAX": 1, "LOGISTIC": 2, "SOFTMAX_ZERO": 3, "PROBIT": 4}


def _floats(step: Step, name: str) -> list[float] | None:
    value = step.attr(name)
    if value is None:
        tensor = step.attr(f"{name}_as_tensor")
        return None if tensor is None else [float(v) for v in np.asarray(tensor.numpy()).reshape(-1)]
    return [float(v) for v in value]


@adapter("TreeEnsembleRegressor", 4, 5, domain=ML)
def tree_regressor_4_5(node: ir.Node, step: Step) -> None:
    x = node.inputs[0]
    in_type = x.type.dtype if x is not None and x.type is not None else None
    if in_type is None:
        step.refuse("the input's element type is unknown, and TreeEnsemble's thresholds take it")
    aggregate = step.attr("aggregate_function", "SUM")
    post = step.attr("post_transform", "NONE")
    n_targets = int(step.attr("n_targets", 1))
    base = _floats(step, "base_values") or []
    tree_ids = list(step.attr("nodes_treeids", []))
    node_ids = list(step.attr("nodes_nodeids", []))
    modes = list(step.attr("nodes_modes", []))
    features = list(step.attr("nodes_featureids", []))
    true_ids = list(step.attr("nodes_truenodeids", []))
    false_ids = list(step.attr("nodes_falsenodeids", []))
    values = _floats(step, "nodes_values") or [0.0] * len(tree_ids)
    missing = list(step.attr("nodes_missing_value_tracks_true", [])) or [0] * len(tree_ids)
    weights = _floats(step, "target_weights") or []
    targets: dict[tuple[int, int], dict[int, float]] = defaultdict(dict)
    for t, n, target, w in zip(step.attr("target_treeids", []), step.attr("target_nodeids", []),
                               step.attr("target_ids", []), weights, strict=True):
        leaf = targets[(int(t), int(n))]
        if int(target) in leaf and aggregate in ("MIN", "MAX"):
            step.refuse(f"{aggregate} with several weights for one leaf and target")
        leaf[int(target)] = leaf.get(int(target), 0.0) + float(w)

    position = {(int(t), int(n)): i for i, (t, n) in enumerate(zip(tree_ids, node_ids, strict=True))}
    trees = sorted({int(t) for t in tree_ids})
    is_leaf = [m == "LEAF" for m in modes]
    leaves_of = [targets.get((int(t), int(n)), {}) for t, n in zip(tree_ids, node_ids, strict=True)]
    multi = any(len(leaf) > 1 for leaf, flag in zip(leaves_of, is_leaf, strict=True) if flag)
    if multi and aggregate in ("MIN", "MAX"):
        step.refuse(f"{aggregate} over leaves with weights for several targets")
    if (multi and aggregate == "AVERAGE" or any(base)) and post != "NONE":
        step.refuse(f"post_transform {post} with base values or averaged multi-target trees")
    copies = list(range(n_targets)) if multi else [None]

    new_nodes: dict[str, list[Any]] = defaultdict(list)
    leaf_targets: list[int] = []
    leaf_weights: list[float] = []
    roots: list[int] = []

    def leaf_entry(i: int, target: int | None) -> int:
        leaf = leaves_of[i]
        if target is None:
            if not leaf and aggregate in ("MIN", "MAX"):
                step.refuse(f"{aggregate} with a leaf that has no weight")
            (tid, w), = leaf.items() if leaf else ((0, 0.0),)
        else:
            if target not in leaf and aggregate in ("MIN", "MAX"):
                step.refuse(f"{aggregate} with a leaf that has no weight for target {target}")
            tid, w = target, leaf.get(target, 0.0)
        leaf_targets.append(int(tid))
        leaf_weights.append(float(w))
        return len(leaf_weights) - 1

    for target in copies:
        for tree in trees:
            order = [i for i in range(len(tree_ids)) if int(tree_ids[i]) == tree and not is_leaf[i]]
            base_index = len(new_nodes["modes"])
            index = {i: base_index + k for k, i in enumerate(order)}
            root = position.get((tree, 0), min(i for i in range(len(tree_ids)) if int(tree_ids[i]) == tree))
            if is_leaf[root]:  # a single-leaf tree: one node with both branches on its leaf
                entry = leaf_entry(root, target)
                for key, value in (("modes", 0), ("features", 0), ("splits", 0.0), ("missing", 0),
                                   ("true", entry), ("true_leaf", 1), ("false", entry), ("false_leaf", 1)):
                    new_nodes[key].append(value)
                roots.append(base_index)
                continue
            roots.append(index[root])
            for i in order:
                if modes[i] not in _MODES:
                    step.refuse(f"unknown node mode {modes[i]!r}")
                new_nodes["modes"].append(_MODES[modes[i]])
                new_nodes["features"].append(int(features[i]))
                new_nodes["splits"].append(values[i])
                new_nodes["missing"].append(int(missing[i]))
                for side, ids in (("true", true_ids), ("false", false_ids)):
                    child = position.get((tree, int(ids[i])))
                    if child is None:
                        step.refuse(f"tree {tree} node {node_ids[i]} points at a missing node")
                    if is_leaf[child]:
                        new_nodes[side].append(leaf_entry(child, target))
                        new_nodes[f"{side}_leaf"].append(1)
                    else:
                        new_nodes[side].append(index[child])
                        new_nodes[f"{side}_leaf"].append(0)

    value = x
    compute = in_type
    if in_type not in (ir.DataType.FLOAT, ir.DataType.DOUBLE):
        value = step.op("Cast", [x], {"to": ir.DataType.FLOAT}, domain="", version=_onnx_version(step))
        compute = ir.DataType.FLOAT
    np_type = np.float64 if compute == ir.DataType.DOUBLE else np.float32
    attrs: dict[str, Any] = {
        "aggregate_function": _AGGREGATES["SUM" if multi and aggregate == "AVERAGE" else aggregate],
        "post_transform": _POST.get(post, 0),
        "n_targets": n_targets,
        "tree_roots": roots,
        "nodes_modes": ir.tensor(np.asarray(new_nodes["modes"], dtype=np.uint8)),
        "nodes_featureids": new_nodes["features"],
        "nodes_splits": ir.tensor(np.asarray(new_nodes["splits"], dtype=np_type)),
        "nodes_truenodeids": new_nodes["true"], "nodes_trueleafs": new_nodes["true_leaf"],
        "nodes_falsenodeids": new_nodes["false"], "nodes_falseleafs": new_nodes["false_leaf"],
        "leaf_targetids": leaf_targets,
        "leaf_weights": ir.tensor(np.asarray(leaf_weights, dtype=np_type)),
    }
    if any(new_nodes["missing"]):
        attrs["nodes_missing_value_tracks_true"] = new_nodes["missing"]
    out = step.op("TreeEnsemble", [value], attrs, domain=ML)
    opset = _onnx_version(step)
    if compute != ir.DataType.FLOAT:
        out = step.op("Cast", [out], {"to": ir.DataType.FLOAT}, domain="", version=opset)
    if multi and aggregate == "AVERAGE":
        out = step.op("Mul", [out, step.const(np.float32(1.0 / len(trees)))], domain="", version=opset)
    if any(base):
        out = step.op("Add", [out, step.const(np.asarray(base, dtype=np.float32))], domain="", version=opset)
    # [N, n_targets]: exporters have declared [N, 1] for multi-output trees, which the old
    # operator's missing shape inference let pass and TreeEnsemble's does not
    batch = x.shape[0] if x.shape is not None and len(x.shape) else None
    out.type, out.shape = ir.TensorType(ir.DataType.FLOAT), ir.Shape([batch, n_targets])
    step.replace_with([out])


def _onnx_version(step: Step) -> int:
    """The default domain's target: the Cast/Mul/Add this adapter adds are written at it."""
    return int(step.walker.targets.get("", 13))


@adapter("TreeEnsembleClassifier", 4, 5, domain=ML)
def tree_classifier_4_5(node: ir.Node, step: Step) -> None:
    step.refuse("TreeEnsembleClassifier was removed at ai.onnx.ml 5; its rewrite to TreeEnsemble + "
                "ArgMax + a label lookup is not written yet (keep ai.onnx.ml at 4 or below)")
