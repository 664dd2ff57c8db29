"""Converters unframe adds to skl2onnx through its own hook (``update_registered_converter``).

``register_all()`` is idempotent and runs on the frontend's first conversion.
"""

from __future__ import annotations

import threading

from unframe.converters.frontends._sklearn.converters import (
    boosting_libs,
    gaussian_process,
    hist_gradient_boosting,
    isotonic,
)

# (class name, module path) of every estimator unframe's own converters handle.
EXTENSIONS: list[tuple[str, str]] = [
    ("HistGradientBoostingClassifier", "sklearn.ensemble"),
    ("HistGradientBoostingRegressor", "sklearn.ensemble"),
    ("IsotonicRegression", "sklearn.isotonic"),
    ("GaussianProcessClassifier", "sklearn.gaussian_process"),
]
ONNXMLTOOLS: list[tuple[str, str]] = [
    ("XGBClassifier", "xgboost"), ("XGBRegressor", "xgboost"),
    ("LGBMClassifier", "lightgbm"), ("LGBMRegressor", "lightgbm"),
]

_lock = threading.Lock()
_registered: list[str] | None = None


def register_all() -> list[str]:
    """Register unframe's converters (and onnxmltools' for installed libraries) with skl2onnx.
    Returns the boosting libraries registered."""
    global _registered
    with _lock:
        if _registered is None:
            hist_gradient_boosting.register()
            isotonic.register()
            gaussian_process.register()
            _registered = boosting_libs.register()
        return list(_registered)
