"""ai.onnx.ml compiled to standard ONNX: the ``ml_to_tensor`` pass.

One file per op family (``trees``, ``linear``, ``svm``, ``preprocess``, ``maps``), each
registering its lowerings with ``@lowering("OpType")`` on ``LOWERINGS``; ``lower.py`` is the pass
that applies them, ``strings.py`` the host-side mappings for string inputs and outputs.

``import unframe.passes.ml_to_tensor`` imports onnx-ir and numpy only.
"""

from __future__ import annotations

from unframe.passes.ml_to_tensor.compile import STRATEGIES, choose_strategy
from unframe.passes.ml_to_tensor.lower import (
    MAPPING_KEY,
    LowerReport,
    MLToTensorPass,
    check,
    has_ml_ops,
    lower,
    ml_nodes,
    preview,
)
from unframe.passes.ml_to_tensor.registry import LOWERINGS, ML_DOMAIN, lowering

__all__ = ["LOWERINGS", "MAPPING_KEY", "ML_DOMAIN", "STRATEGIES", "LowerReport", "MLToTensorPass",
           "check", "choose_strategy", "has_ml_ops", "lower", "lowering", "ml_nodes", "preview"]
