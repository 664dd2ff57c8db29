"""ai.onnx.ml 4->5: TreeEnsembleRegressor rewritten as TreeEnsemble (the old tree operators are
gone from ai.onnx.ml 5). onnx has no node cases for the old operator, so the models are built
here (by hand, and by skl2onnx from fitted scikit-learn regressors) and each conversion is run
by onnxruntime against the original on random inputs. ``EXERCISED`` tells the coverage test which
adapters these tests fire (each test asserts it)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import helper as oh

from unframe.errors import UnsupportedError
from unframe.version_converter import convert_opset

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = []
EXERCISED = {"ai.onnx.ml::TreeEnsembleRegressor_4_5", "ai.onnx.ml::TreeEnsembleClassifier_4_5"}


def _two_trees(aggregate: str, in_type: int, *, drop_leaf_target: bool = False, post: str = "NONE") -> onnx.ModelProto:
    """Two depth-1/depth-2 trees over 3 features, every leaf weighted for both of 2 targets."""
    nodes = {  # tree 0: x0 <= 0.1 ? (x2 < -0.3 ? L1 : L2) : L3 ; tree 1: x1 >= 0.5 ? L4 : L5
        "treeids": [0, 0, 0, 0, 0, 1, 1, 1], "nodeids": [0, 1, 2, 3, 4, 0, 1, 2],
        "modes": ["BRANCH_LEQ", "BRANCH_LT", "LEAF", "LEAF", "LEAF", "BRANCH_GTE", "LEAF", "LEAF"],
        "featureids": [0, 2, 0, 0, 0, 1, 0, 0], "values": [0.1, -0.3, 0, 0, 0, 0.5, 0, 0],
        "truenodeids": [1, 2, 0, 0, 0, 1, 0, 0], "falsenodeids": [4, 3, 0, 0, 0, 2, 0, 0],
    }
    leaves = [(0, 2), (0, 3), (0, 4), (1, 1), (1, 2)]
    tt, tn, ti, tw = [], [], [], []
    for k, (tree, node) in enumerate(leaves):
        for target in (0, 1):
            if drop_leaf_target and k == 0 and target == 1:
                continue
            tt.append(tree), tn.append(node), ti.append(target), tw.append(0.25 * k - 0.7 * target + 0.1)
    node = oh.make_node(
        "TreeEnsembleRegressor", ["x"], ["y"], domain="ai.onnx.ml", name="trees", n_targets=2,
        aggregate_function=aggregate, post_transform=post, base_values=[0.5, -1.0],
        nodes_treeids=nodes["treeids"], nodes_nodeids=nodes["nodeids"], nodes_modes=nodes["modes"],
        nodes_featureids=nodes["featureids"], nodes_values=nodes["values"],
        nodes_truenodeids=nodes["truenodeids"], nodes_falsenodeids=nodes["falsenodeids"],
        target_treeids=tt, target_nodeids=tn, target_ids=ti, target_weights=tw)
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", in_type, ["N", 3])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    return model


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def _upgrade(model: onnx.ModelProto) -> tuple[onnx.ModelProto, set[str]]:
    irm = ir.from_proto(model)
    result = convert_opset(irm, 21, ml_target=5)
    out = ir.to_proto(irm)
    onnx.checker.check_model(out, full_check=True)
    onnx.shape_inference.infer_shapes(out, strict_mode=True)
    assert {o.domain: o.version for o in out.opset_import}["ai.onnx.ml"] == 5
    assert "TreeEnsembleRegressor" not in {n.op_type for n in out.graph.node}
    return out, set(result.adapters_used)


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE"])
@pytest.mark.parametrize("in_type", [TensorProto.FLOAT, TensorProto.INT64], ids=["float", "int64"])
def test_multi_target_trees_match_the_old_operator(aggregate: str, in_type: int) -> None:
    model = _two_trees(aggregate, in_type)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 3)).astype(np.float32)
    if in_type == TensorProto.INT64:
        x = rng.integers(-2, 3, (64, 3)).astype(np.int64)
    out, fired = _upgrade(model)
    assert "ai.onnx.ml::TreeEnsembleRegressor_4_5" in fired
    # onnxruntime has no int64 kernel for the old operator; it compares features as floats
    reference = _run(_two_trees(aggregate, TensorProto.FLOAT), x.astype(np.float32))
    np.testing.assert_allclose(_run(out, x), reference, rtol=1e-6, atol=1e-6)


def test_refusals_name_the_reason() -> None:
    with pytest.raises(UnsupportedError, match="MIN"):
        convert_opset(ir.from_proto(_two_trees("MIN", TensorProto.FLOAT, drop_leaf_target=True)), 21, ml_target=5)
    with pytest.raises(UnsupportedError, match="post_transform LOGISTIC"):
        convert_opset(ir.from_proto(_two_trees("SUM", TensorProto.FLOAT, post="LOGISTIC")), 21, ml_target=5)
    classifier = oh.make_node(
        "TreeEnsembleClassifier", ["x"], ["label", "probs"], domain="ai.onnx.ml", classlabels_int64s=[0, 1],
        nodes_treeids=[0], nodes_nodeids=[0], nodes_modes=["LEAF"], nodes_featureids=[0], nodes_values=[0.0],
        nodes_truenodeids=[0], nodes_falsenodeids=[0], class_treeids=[0], class_nodeids=[0], class_ids=[1],
        class_weights=[1.0])
    graph = oh.make_graph([classifier], "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1])],
                          [oh.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
                           oh.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 2])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 8
    with pytest.raises(UnsupportedError, match="TreeEnsembleClassifier"):
        convert_opset(ir.from_proto(model), 21, ml_target=5)


@pytest.mark.parametrize("kind", ["gradient_boosting", "random_forest", "multi_output_forest", "stump"])
def test_scikit_learn_regressors(kind: str) -> None:
    pytest.importorskip("sklearn", reason="needs the sklearn extra")
    skl2onnx = pytest.importorskip("skl2onnx", reason="needs the sklearn extra")
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestRegressor
    from sklearn.tree import DecisionTreeRegressor

    rng = np.random.default_rng(1)
    x = rng.standard_normal((300, 5)).astype(np.float32)
    y = x[:, 0] * 2 + np.sin(x[:, 1])
    estimator = {
        "gradient_boosting": lambda: GradientBoostingRegressor(n_estimators=20, max_depth=3).fit(x, y),
        "random_forest": lambda: RandomForestRegressor(n_estimators=8, max_depth=4, random_state=0).fit(x, y),
        "multi_output_forest": lambda: RandomForestRegressor(n_estimators=4, max_depth=3, random_state=0).fit(
            x, np.stack([y, x[:, 2] ** 2], 1)),
        "stump": lambda: DecisionTreeRegressor(max_depth=1).fit(x, y),
    }[kind]()
    model = skl2onnx.to_onnx(estimator, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    out, fired = _upgrade(model)
    assert "ai.onnx.ml::TreeEnsembleRegressor_4_5" in fired
    probe = rng.standard_normal((100, 5)).astype(np.float32)
    np.testing.assert_allclose(_run(out, probe), _run(model, probe), rtol=1e-6, atol=1e-6)
    want = estimator.predict(probe)
    np.testing.assert_allclose(_run(out, probe).reshape(want.shape), want, rtol=1e-4, atol=1e-4)
