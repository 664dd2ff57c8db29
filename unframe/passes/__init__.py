"""Graph passes that change what a model computes with, not what it computes.

``ml_to_tensor``: ``ai.onnx.ml`` operators rewritten into standard ONNX operators, so that
runtimes without the ML domain (Core ML, TensorRT) can take scikit-learn, XGBoost and LightGBM
models.

``KEEP_FP32`` is the node metadata key with which a pass asks every backend to leave a node in
float32 when it lowers the rest of the graph to fp16/bf16 (tree comparisons and accumulations
that would change decisions in 16 bits). It is declared in ``unframe.validate.marks`` (the
rounding emulation honours it too) and re-exported here.
"""

from __future__ import annotations

from unframe.validate.marks import KEEP_FP32, keeps_fp32

__all__ = ["KEEP_FP32", "keeps_fp32"]
