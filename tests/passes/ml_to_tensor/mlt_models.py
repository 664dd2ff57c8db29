"""Seeded ai.onnx.ml models for the ml_to_tensor tests: random tree ensembles in the three
operator forms, single-node models of the other ML ops, and inputs that hit thresholds exactly.

The inputs are drawn from the same small grid of values the thresholds are drawn from, so many
comparisons see ``x == threshold``; NaN and +-inf are sprinkled in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

GRID = np.round(np.linspace(-2.0, 2.0, 17), 3)  # 0.25 steps: exact in float32
# inputs also hit member values beyond the threshold grid
INPUT_GRID = np.concatenate([GRID, [3.0, 3.5, 33.0, 33.5, 39.0, -1.5]])
V3_MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
IR_VERSION = 10  # what onnxruntime 1.2x loads


@dataclass
class RandomTree:
    """Nodes in depth-first order; leaves carry a weight per target."""

    features: list[int] = field(default_factory=list)
    thresholds: list[float] = field(default_factory=list)
    modes: list[int] = field(default_factory=list)  # index into V3_MODES, or 6 = MEMBER
    members: list[list[float]] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    true_child: list[int] = field(default_factory=list)
    false_child: list[int] = field(default_factory=list)
    is_leaf: list[bool] = field(default_factory=list)
    weights: list[dict[int, float]] = field(default_factory=list)


def random_tree(rng: np.random.Generator, depth: int, n_features: int, n_targets: int,
                modes: list[int], missing_rate: float, leaf_targets: str = "all",
                member: bool = False) -> RandomTree:
    tree = RandomTree()

    def grow(d: int) -> int:
        i = len(tree.features)
        tree.features.append(int(rng.integers(n_features)))
        tree.thresholds.append(float(rng.choice(GRID)))
        mode = int(rng.choice(modes))
        if member and rng.random() < 0.3:
            mode = 6
        tree.modes.append(mode)
        # onnxruntime takes integer member values only
        # onnxruntime takes integer member values only; small sets in [0, 30] and others (-2..40)
        # are evaluated differently (see forest.py)
        low, high = (0, 4) if rng.random() < 0.5 else (-2, 40)
        tree.members.append(sorted({float(v) for v in rng.integers(low, high, size=3)})
                            if mode == 6 else [])
        tree.missing.append(int(rng.random() < missing_rate))
        tree.true_child.append(-1)
        tree.false_child.append(-1)
        leaf = d == depth or (d > 0 and rng.random() < 0.25)
        tree.is_leaf.append(leaf)
        if leaf:
            if leaf_targets == "one":
                targets = [0]
            elif leaf_targets == "some":
                targets = sorted({int(t) for t in rng.integers(n_targets, size=2)})
            else:
                targets = list(range(n_targets))
            tree.weights.append({t: float(np.float32(rng.normal())) for t in targets})
            return i
        tree.weights.append({})
        tree.true_child[i] = grow(d + 1)
        tree.false_child[i] = grow(d + 1)
        return i

    grow(0)
    return tree


def v3_node(trees: list[RandomTree], op: str, *, n_targets: int, aggregate: str = "SUM",
            post: str = "NONE", base: list[float] | None = None, labels: Any = None,
            double_attrs: bool = False) -> onnx.NodeProto:
    a: dict[str, list[Any]] = {k: [] for k in (
        "nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
        "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true", "w_tree",
        "w_node", "w_id", "w")}
    for t, tree in enumerate(trees):
        for i in range(len(tree.features)):
            a["nodes_treeids"].append(t)
            a["nodes_nodeids"].append(i)
            a["nodes_featureids"].append(tree.features[i])
            a["nodes_modes"].append("LEAF" if tree.is_leaf[i] else V3_MODES[tree.modes[i] % 6])
            a["nodes_values"].append(tree.thresholds[i])
            a["nodes_truenodeids"].append(max(tree.true_child[i], 0))
            a["nodes_falsenodeids"].append(max(tree.false_child[i], 0))
            a["nodes_missing_value_tracks_true"].append(tree.missing[i])
            for target, w in tree.weights[i].items():
                a["w_tree"].append(t)
                a["w_node"].append(i)
                a["w_id"].append(target)
                a["w"].append(w)
    prefix = "class" if op == "TreeEnsembleClassifier" else "target"
    attrs: dict[str, Any] = {k: v for k, v in a.items() if not k.startswith("w") and k != "nodes_values"}
    if double_attrs:
        attrs["nodes_values_as_tensor"] = nh.from_array(np.asarray(a["nodes_values"], np.float64))
        attrs[f"{prefix}_weights_as_tensor"] = nh.from_array(np.asarray(a["w"], np.float64))
    else:
        attrs["nodes_values"] = a["nodes_values"]
        attrs[f"{prefix}_weights"] = a["w"]
    attrs.update({f"{prefix}_treeids": a["w_tree"], f"{prefix}_nodeids": a["w_node"],
                  f"{prefix}_ids": a["w_id"], "post_transform": post})
    if base is not None:
        attrs["base_values"] = base
    if op == "TreeEnsembleClassifier":
        if labels is not None and isinstance(labels[0], str):
            attrs["classlabels_strings"] = labels
        else:
            attrs["classlabels_int64s"] = list(labels if labels is not None else range(n_targets))
        outputs = ["label", "scores"]
    else:
        attrs.update(n_targets=n_targets, aggregate_function=aggregate)
        outputs = ["scores"]
    return oh.make_node(op, ["X"], outputs, domain="ai.onnx.ml", name="trees", **attrs)


def v5_node(trees: list[RandomTree], *, n_targets: int, aggregate: int = 1, post: int = 0,
            dtype: Any = np.float32) -> onnx.NodeProto:
    roots, feats, splits, modes, missing, members = [], [], [], [], [], []
    t_ids, t_leaf, f_ids, f_leaf, leaf_targets, leaf_weights = [], [], [], [], [], []
    for tree in trees:
        inner = {i: None for i in range(len(tree.features)) if not tree.is_leaf[i]}
        leaves: dict[int, int] = {}
        for i in range(len(tree.features)):
            if tree.is_leaf[i]:
                # one target per leaf in TreeEnsemble: repeat the leaf entry per target is not
                # possible, so keep its first target
                target, w = next(iter(tree.weights[i].items()))
                leaves[i] = len(leaf_targets)
                leaf_targets.append(target)
                leaf_weights.append(w)
        base = len(feats)
        for k, i in enumerate(inner):
            inner[i] = base + k
        if not inner:  # a single leaf: one node whose branches both reach it
            roots.append(len(feats))
            feats.append(0), splits.append(0.0), modes.append(0), missing.append(0)
            t_ids.append(leaves[0]), t_leaf.append(1), f_ids.append(leaves[0]), f_leaf.append(1)
            continue
        roots.append(inner[0])
        for i in inner:
            feats.append(tree.features[i])
            splits.append(tree.thresholds[i])
            modes.append(tree.modes[i])
            missing.append(tree.missing[i])
            if tree.modes[i] == 6:
                members += tree.members[i] + [np.nan]
            for child, ids, flags in ((tree.true_child[i], t_ids, t_leaf),
                                      (tree.false_child[i], f_ids, f_leaf)):
                if tree.is_leaf[child]:
                    ids.append(leaves[child]), flags.append(1)
                else:
                    ids.append(inner[child]), flags.append(0)
    attrs: dict[str, Any] = dict(
        n_targets=n_targets, aggregate_function=aggregate, post_transform=post, tree_roots=roots,
        nodes_modes=nh.from_array(np.asarray(modes, np.uint8)), nodes_featureids=feats,
        nodes_splits=nh.from_array(np.asarray(splits, dtype)), nodes_truenodeids=t_ids,
        nodes_trueleafs=t_leaf, nodes_falsenodeids=f_ids, nodes_falseleafs=f_leaf,
        nodes_missing_value_tracks_true=missing, leaf_targetids=leaf_targets,
        leaf_weights=nh.from_array(np.asarray(leaf_weights, dtype)))
    if members:
        attrs["membership_values"] = nh.from_array(np.asarray(members, dtype))
    return oh.make_node("TreeEnsemble", ["X"], ["scores"], domain="ai.onnx.ml", name="trees", **attrs)


def single_node_model(node: onnx.NodeProto, n_features: int | None, *,
                      in_type: int = TP.FLOAT, outputs: list[tuple[str, int]] | None = None,
                      ml_opset: int = 3, opset: int = 21, input_shape: list[Any] | None = None
                      ) -> onnx.ModelProto:
    shape = input_shape if input_shape is not None else [None, n_features]
    outs = outputs or [(o, TP.FLOAT) for o in node.output]
    graph = oh.make_graph([node], "ml", [oh.make_tensor_value_info(node.input[0], in_type, shape)],
                          [oh.make_tensor_value_info(name, t, None) for name, t in outs])
    return oh.make_model(graph, ir_version=IR_VERSION, opset_imports=[
        oh.make_opsetid("", opset), oh.make_opsetid("ai.onnx.ml", ml_opset)])


def grid_inputs(rng: np.random.Generator, n: int, n_features: int, *, nan_rate: float = 0.1,
                inf_rate: float = 0.02, dtype: Any = np.float32) -> np.ndarray:
    x = rng.choice(INPUT_GRID, size=(n, n_features)).astype(dtype)
    x[rng.random(x.shape) < nan_rate] = np.nan
    x[rng.random(x.shape) < inf_rate] = np.inf
    x[rng.random(x.shape) < inf_rate] = -np.inf
    return x


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def lowered(proto: onnx.ModelProto, **options: Any) -> tuple[onnx.ModelProto, Any]:
    """The model after the ml_to_tensor pass, and the pass's report."""
    import onnx_ir as ir

    from unframe.passes.ml_to_tensor import lower

    model = ir.serde.deserialize_model(proto)
    report = lower(model, **options)
    return ir.serde.serialize_model(model), report


def assert_same(ref: list[np.ndarray], got: list[np.ndarray], what: str = "") -> None:
    """Labels equal; scores within 1e-5 of the output's scale, NaN and inf where the reference
    has them; and the reference varies (a constant output would prove nothing)."""
    assert len(ref) == len(got), what
    for r, g in zip(ref, got, strict=True):
        assert r.shape == g.shape, f"{what}: shape {r.shape} vs {g.shape}"
        if r.dtype.kind in "iuOSU" or r.dtype == bool:
            assert np.array_equal(r, g), f"{what}: {np.mean(r != g):.1%} of labels differ"
            continue
        assert np.array_equal(np.isnan(r), np.isnan(g)), f"{what}: NaN positions differ"
        finite = np.isfinite(r)
        assert np.array_equal(r[~finite & ~np.isnan(r)], g[~finite & ~np.isnan(r)]), f"{what}: inf"
        scale = max(1.0, float(np.max(np.abs(r[finite])))) if finite.any() else 1.0
        err = float(np.max(np.abs(r[finite].astype(np.float64) - g[finite]))) if finite.any() else 0.0
        assert err <= 1e-5 * scale, f"{what}: max abs error {err:.3g} (scale {scale:.3g})"


def varies(arrays: list[np.ndarray]) -> bool:
    """Every output takes more than one value across rows."""
    return all(len(np.unique(a[~np.isnan(a)] if a.dtype.kind == "f" else a, axis=0)) > 1
               for a in arrays)


def stump_model() -> onnx.ModelProto:
    """A stump at 1.0006, which fp16 rounds to 1.000977, then a Mul."""
    tree = oh.make_node(
        "TreeEnsembleRegressor", ["X"], ["t"], domain="ai.onnx.ml", n_targets=1,
        nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[1.0006, 0.0, 0.0],
        nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0], target_treeids=[0, 0],
        target_nodeids=[1, 2], target_ids=[0, 0], target_weights=[-1.0, 1.0])
    graph = oh.make_graph([tree, oh.make_node("Mul", ["t", "two"], ["Y"])], "g",
                          [oh.make_tensor_value_info("X", TP.FLOAT, [None, 1])],
                          [oh.make_tensor_value_info("Y", TP.FLOAT, None)],
                          [nh.from_array(np.float32(2.0), "two")])
    return oh.make_model(graph, ir_version=10, opset_imports=[oh.make_opsetid("", 21),
                                                             oh.make_opsetid("ai.onnx.ml", 3)])
