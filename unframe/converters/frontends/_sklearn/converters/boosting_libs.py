"""XGBoost and LightGBM scikit-learn wrappers, converted by onnxmltools' converters registered
into skl2onnx (so they work alone and inside Pipelines), when those libraries are installed.

Both libraries' ONNX converters only take float32 inputs: on the double route these models keep
float32 (the frontend notes it).

LightGBM keeps float64 thresholds and onnxmltools writes them rounded to the nearest float32: a
float32 input lying on a threshold whose rounding went up then takes the other branch. After
onnxmltools' converter runs, each ``BRANCH_LEQ`` threshold is replaced by the largest float32 at
or below the booster's own float64 threshold (matched per tree and feature), which makes
``x <= t`` exact for every float32 x. (XGBoost's thresholds are float32 already.)
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

CLASSIFIER_OPTIONS = {"nocl": [True, False], "zipmap": [True, False, "columns"]}


def available() -> dict[str, bool]:
    return {lib: importlib.util.find_spec(lib) is not None and
            importlib.util.find_spec("onnxmltools") is not None for lib in ("xgboost", "lightgbm")}


def _register_pair(classifier: type, regressor: type, prefix: str, convert: Callable[..., Any]
                   ) -> None:
    from skl2onnx import update_registered_converter
    from skl2onnx.common.shape_calculator import (
        calculate_linear_classifier_output_shapes,
        calculate_linear_regressor_output_shapes,
    )

    update_registered_converter(classifier, f"{prefix}{classifier.__name__}",
                                calculate_linear_classifier_output_shapes, convert,
                                options=CLASSIFIER_OPTIONS)
    update_registered_converter(regressor, f"{prefix}{regressor.__name__}",
                                calculate_linear_regressor_output_shapes, convert)


def register_xgboost() -> None:
    from onnxmltools.convert.xgboost.operator_converters.XGBoost import convert_xgboost
    from xgboost import XGBClassifier, XGBRegressor

    _register_pair(XGBClassifier, XGBRegressor, "XGBoost", convert_xgboost)


def register_lightgbm() -> None:
    from lightgbm import LGBMClassifier, LGBMRegressor
    from onnxmltools.convert.lightgbm.operator_converters.LightGbm import convert_lightgbm

    def convert(scope: Any, operator: Any, container: Any) -> None:
        before = len(container.nodes)
        convert_lightgbm(scope, operator, container)
        exact_lightgbm_thresholds(operator.raw_operator, container.nodes[before:])

    _register_pair(LGBMClassifier, LGBMRegressor, "LightGbm", convert)


def exact_lightgbm_thresholds(model: Any, nodes: list[Any]) -> int:
    """Put the largest float32 at or below the booster's float64 threshold on every BRANCH_LEQ
    node onnxmltools wrote (see the module docstring); returns the thresholds changed."""
    import numpy as np

    from unframe.converters.frontends._sklearn.converters.hist_gradient_boosting import float32_below

    by_tree: dict[tuple[int, int], list[float]] = {}
    for tree_id, tree in enumerate(model.booster_.dump_model()["tree_info"]):
        stack = [tree["tree_structure"]]
        while stack:
            node = stack.pop()
            if "split_feature" in node and node.get("decision_type") == "<=":
                by_tree.setdefault((tree_id, int(node["split_feature"])), []).append(float(node["threshold"]))
            stack += [node[k] for k in ("left_child", "right_child") if k in node]
    changed = 0
    for node in nodes:
        attrs = {a.name: a for a in node.attribute}
        if not node.op_type.startswith("TreeEnsemble") or "nodes_values" not in attrs:
            continue
        values = list(attrs["nodes_values"].floats)
        modes = [m.decode() if isinstance(m, bytes) else m for m in attrs["nodes_modes"].strings]
        for i, (tree, feature, mode) in enumerate(zip(attrs["nodes_treeids"].ints,
                                                      attrs["nodes_featureids"].ints, modes, strict=True)):
            if mode != "BRANCH_LEQ":
                continue
            exact = {float(float32_below(np.asarray([d]))[0]) for d in by_tree.get((tree, feature), [])
                     if np.float32(d) == np.float32(values[i])}
            if len(exact) == 1 and exact != {values[i]}:
                values[i] = exact.pop()
                changed += 1
        del attrs["nodes_values"].floats[:]
        attrs["nodes_values"].floats.extend(values)
    return changed


def register() -> list[str]:
    """Register what is installed; return the libraries registered."""
    done = []
    have = available()
    if have["xgboost"]:
        register_xgboost()
        done.append("xgboost")
    if have["lightgbm"]:
        register_lightgbm()
        done.append("lightgbm")
    return done
