"""A tap into a scikit-learn Pipeline: each step's output under the ONNX value it became.

The sklearn frontend stamps the node producing each estimator's outputs with the estimator's
place in the model (``unframe.sklearn.path``, see ``origin.py``). For a top-level step ``k`` of a
Pipeline, that value is ``pipeline[:k + 1].transform(X)``::

    Pipeline(scale, reduce, fit)      ONNX:  Scaler -> variable   (path "scale")
                                             Sub, MatMul -> variable1 (path "reduce")
    tap: {"variable": pipe[:1].transform(X), "variable1": pipe[:2].transform(X), outputs...}

Steps nested deeper (a ColumnTransformer's parts) are not tapped; the model's outputs come from
the frontend's own runner. scikit-learn is imported by the runner only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from unframe.converters.base import SKLEARN_PATH


class SklearnTap:
    def __init__(self, native: Any, export: Any) -> None:
        from unframe.converters.frontends._sklearn.runner import SklearnRunner
        from unframe.distributions import dist_version

        self.native = native
        self.name = f"scikit-learn {dist_version('scikit-learn') or '?'}"
        self.limitations: list[str] = []
        self.plan = export.extra["input_plan"]
        methods = export.extra.get("methods") or {}
        self.runner = SklearnRunner(native, self.plan, list(methods.values()), list(methods))
        steps = [name for name, _ in getattr(native, "steps", [])]
        self.steps: list[tuple[int, str]] = []  # (step index, ONNX value)
        for node in export.model.graph:
            path = node.metadata_props.get(SKLEARN_PATH, "")
            if path in steps[:-1] and node.outputs and node.outputs[0].name:
                self.steps.append((steps.index(path), node.outputs[0].name))
        if not steps:
            self.limitations.append(f"{type(native).__name__} is not a Pipeline: only its outputs "
                                    "are tapped")

    def values(self, feeds: Mapping[str, np.ndarray],
               names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        from unframe.converters.frontends._sklearn.inputs import to_sklearn_input

        wanted = set(names) if names is not None else None
        out = {k: v for k, v in self.runner.run(feeds).items() if wanted is None or k in wanted}
        x = to_sklearn_input(self.plan, dict(feeds))
        for index, value in self.steps:
            if wanted is None or value in wanted:
                step = self.native[: index + 1].transform(x)
                out[value] = np.asarray(step.toarray() if hasattr(step, "toarray") else step)
        return out
