"""XGBoost and LightGBM scikit-learn wrappers, converted by onnxmltools' converters registered
into skl2onnx (so they work alone and inside Pipelines), when those libraries are installed.

Both libraries' ONNX converters only take float32 inputs: on the double route these models keep
float32 (the frontend notes it).
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

    _register_pair(LGBMClassifier, LGBMRegressor, "LightGbm", convert_lightgbm)


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
