"""Torch ops torch.onnx's dynamo exporter has no translation for, given one through its own hook
(``torch.onnx.export(..., custom_translation_table=...)``): the one place to add such an op.

Each entry maps an ATen overload to a function written with onnxscript's ops (traced, as
torchlib's own are). What is here:

- ``aten._int_mm``: int8 x int8 -> int32 matrix product, which torchao's dynamically quantized
  linear layers (``Int8DynamicActivationInt8WeightConfig``) call; ONNX's ``MatMulInteger``::

      aten._int_mm(a int8[M, K], b int8[K, N]) -> int32[M, N]
      MatMulInteger(a, b)                      -> int32[M, N]   (no zero points: both 0)
"""

from __future__ import annotations

from typing import Any


def translation_table() -> dict[Any, Any]:
    """{ATen overload: onnxscript function} for ``custom_translation_table``."""
    import torch
    from onnxscript import opset18 as op

    def int_mm(self: Any, mat2: Any) -> Any:
        return op.MatMulInteger(self, mat2)

    return {torch.ops.aten._int_mm.default: int_mm}
