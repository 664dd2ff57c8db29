"""Marks a pass leaves on a node for every later stage: ``KEEP_FP32``.

``KEEP_FP32`` is the node metadata key with which a pass asks every backend to leave a node in
float32 when it lowers the rest of the graph to fp16/bf16 (tree comparisons and accumulations
that would change decisions in 16 bits). Declared here, below the passes that set it, because the
rounding emulation (``validate.rounding``) honours it as the backends do; ``unframe.passes``
re-exports both names.
"""

from __future__ import annotations

KEEP_FP32 = "unframe.keep_fp32"


def keeps_fp32(node: object) -> bool:
    """True when ``node`` (an onnx_ir.Node) asks to stay in float32."""
    props = getattr(node, "metadata_props", None)
    return bool(props) and props.get(KEEP_FP32) == "1"  # type: ignore[union-attr]
