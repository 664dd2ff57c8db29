"""Which layers cost a quantized graph the most: the sensitivity pass behind "keep the worst
layers in float and try again".

Both graphs (the float one, and the same graph quantized as the request says, in onnxruntime)
are run on a held-out set with every node output read (``validate.intermediates.OnnxTap``). A
quantized node keeps its output's name, so each weighted node (Conv, ConvTranspose, Gemm, MatMul)
gets an error: how far its output moved, relative to that output's scale. What a node adds is its
error less the largest error of the values it reads: the ranking is by that jump, largest first,
so a node downstream of a bad one is not blamed for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx_ir as ir

from unframe.passes.quantize.naming import name_nodes
from unframe.passes.quantize.onnx_quant import WEIGHTED, quantize_onnx
from unframe.passes.quantize.schemes import QuantRequest


def rank_layers(model: ir.Model, request: QuantRequest, feeds: Sequence[Mapping[str, np.ndarray]],
                limit: int = 16) -> list[str]:
    """Up to ``limit`` weighted node names of ``model``, the most damaging first (nodes already
    excluded by ``request`` left out); each value's error is its worst over ``feeds``."""
    from unframe.validate.intermediates import OnnxTap

    float_model = model.clone()
    name_nodes(float_model)  # the names quantize_onnx gives: the same rule on the same graph
    quantized, _ = quantize_onnx(model, request)
    by_name = {n.name: n for n in quantized.graph}
    # a quantizer may fuse (Gemm + Relu): a node is judged at the value its quantized twin writes,
    # against what it reads once the Q/DQ pairs in front of it are looked through
    plan: list[tuple[str, str, list[str]]] = []
    for node in float_model.graph:
        twin = by_name.get(node.name)
        if node.op_type not in WEIGHTED or node.name in request.exclude or twin is None or not twin.outputs:
            continue
        plan.append((node.name, twin.outputs[0].name, [_through_qdq(v) for v in twin.inputs if v is not None]))
    floats = {v.name for n in float_model.graph for v in n.outputs if v.name} | {
        v.name for v in float_model.graph.inputs}
    names = sorted({n for _, out, ins in plan for n in (out, *ins) if n in floats})
    float_tap, quantized_tap = OnnxTap(float_model), OnnxTap(quantized)
    error: dict[str, float] = {}
    for feed in feeds:
        ref, got = float_tap.values(dict(feed), names), quantized_tap.values(dict(feed), names)
        for n in names:
            if n in ref and n in got:
                error[n] = max(error.get(n, 0.0), _relative(ref[n], got[n]))
    error.update({v.name: 0.0 for v in float_model.graph.inputs})  # fed alike
    jumps = [(error[out] - max((error.get(i, 0.0) for i in ins), default=0.0), name)
             for name, out, ins in plan if out in error]
    jumps.sort(reverse=True)
    return [name for jump, name in jumps[:limit] if jump > 0]


def _through_qdq(value: ir.Value) -> str:
    """The float value a Q/DQ chain stands for (``x`` for ``x_DequantizeLinear_Output``)."""
    seen = 0
    while value.producer() is not None and value.producer().op_type in ("QuantizeLinear", "DequantizeLinear") \
            and value.producer().inputs and seen < 4:
        value = value.producer().inputs[0]
        seen += 1
    return value.name or ""


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.size == 0 or a.dtype.kind not in "fc":
        return 0.0
    scale = float(np.abs(a).max())
    return float(np.abs(a - b).max()) / scale if scale > 0 else 0.0
