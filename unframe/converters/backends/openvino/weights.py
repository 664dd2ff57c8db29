"""Saving the IR: fp16 weight compression (OpenVINO's default) or fp32 weights.

``ov.save_model(model, path)`` stores float32 constants as float16, each followed by a
``decompression`` Convert (a constant with three quarters of its values out of fp16's range stays
float32); the CPU plugin computes in float32 from them when asked to (``INFERENCE_PRECISION_HINT
f32``). ``compress_to_fp16=False`` keeps float32.

A model whose nodes are marked to stay in float32 (``KEEP_FP32``: a scikit-learn graph pinned
whole, or the nodes the route's 16-bit planner chose after an fp16 parity failure) keeps every
weight in float32: the planner emulates 16-bit compute, which an fp16-weight IR does not do, so
the nodes it marks are not the weights that moved the outputs (the reference zoo's Keras
MobileNetV2: onnxruntime with its weights rounded to fp16 is 0.091 off at output scale 0.63; the
12 nodes planned kept 9 small weights in fp32 and moved nothing).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx_ir as ir

from unframe.converters.backends.openvino.runtime import import_openvino, ov_tool, quiet_openvino


def marked_fp32(model: ir.Model) -> int:
    """How many nodes of ``model`` (subgraphs included) are marked to stay in float32."""
    from unframe.validate.marks import keeps_fp32

    return sum(keeps_fp32(n) for n in ir.traversal.RecursiveGraphIterator(model.graph))


def save_ir(converted: Any, path: Path, compress: bool) -> None:
    """Write ``converted`` as ``path`` (.xml) and its .bin, weights fp16 when ``compress``."""
    ov = import_openvino()
    path.parent.mkdir(parents=True, exist_ok=True)
    with quiet_openvino(), ov_tool():
        ov.save_model(converted, str(path), compress_to_fp16=compress)


def weight_precisions(model: Any) -> dict[str, int]:
    """Bytes of constants by element type (``f16``, ``f32``...)."""
    out: dict[str, int] = {}
    for op in model.get_ordered_ops():
        if op.get_type_name() == "Constant":
            et = op.get_element_type().get_type_name()
            out[et] = out.get(et, 0) + op.get_byte_size()
    return out


__all__ = ["marked_fp32", "save_ir", "weight_precisions"]
