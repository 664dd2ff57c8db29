"""Graph passes that change what a model computes with, not what it computes.

``ml_to_tensor``: ``ai.onnx.ml`` operators rewritten into standard ONNX operators, so that
runtimes without the ML domain (Core ML, TensorRT) can take scikit-learn, XGBoost and LightGBM
models.

``KEEP_FP32`` is the node metadata key with which a pass asks every backend to leave a node in
float32 when it lowers the rest of the graph to fp16/bf16 (tree comparisons and accumulations
that would change decisions in 16 bits).
"""

from __future__ import annotations

KEEP_FP32 = "unframe.keep_fp32"


def keeps_fp32(node: object) -> bool:
    """True when ``node`` (an onnx_ir.Node) asks to stay in float32."""
    props = getattr(node, "metadata_props", None)
    return bool(props) and props.get(KEEP_FP32) == "1"  # type: ignore[union-attr]
