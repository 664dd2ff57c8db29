"""What a graph that carries a model's own quantization allows parity: one step of each output a
quantizer produced.

A model quantized in its framework (TensorFlow Model Optimization's quantization-aware training,
torch's PT2E) reaches ONNX as QuantizeLinear/DequantizeLinear pairs. Each quantizer maps a float
value to the nearest step of its grid; where the framework and the ONNX runtime round a tie
another way (TensorFlow's fake quantization rounds half up, ONNX's QuantizeLinear half to even)
or sum an accumulation in another order, a value next to a step's edge lands one step away, and
so does everything computed from it. An output that is a DequantizeLinear's (directly or through
ops that only move values: Reshape, Transpose...) is therefore compared within one step of its
grid; a difference of two steps or more still fails::

    ... -> QuantizeLinear(s=0.047, zp=127) -> DequantizeLinear -> Reshape -> logits
    logits: atol = 0.047 (one step of that grid)
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

# Ops that move values without computing new ones: an output behind them has its producer's grid.
MOVERS = frozenset({"Reshape", "Flatten", "Transpose", "Identity", "Squeeze", "Unsqueeze", "Gather",
                    "Slice", "Concat", "Split", "MaxPool", "Relu"})
SLACK = 1.001  # float32 rounding of (q - zp) * s on either side of one step


def output_steps(model: ir.Model) -> dict[str, float]:
    """Each graph output produced by a DequantizeLinear with a constant scale (through value-moving
    ops), with its largest step; others are left out."""
    steps = {}
    for value in model.graph.outputs:
        step = _step_of(value, depth=0)
        if step is not None:
            steps[value.name] = step
    return steps


def _step_of(value: ir.Value | None, depth: int) -> float | None:
    node = value.producer() if value is not None else None
    if node is None or depth > 16:
        return None
    if node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx"):
        scale = node.inputs[1] if len(node.inputs) > 1 else None
        tensor = scale.const_value if scale is not None else None
        if tensor is None:
            return None
        return float(np.max(np.abs(tensor.numpy())))
    if node.op_type in MOVERS and node.domain in ("", "ai.onnx"):
        found = [_step_of(v, depth + 1) for v in node.inputs[:1] if node.op_type != "Concat"] + \
                [_step_of(v, depth + 1) for v in node.inputs if node.op_type == "Concat"]
        known = [s for s in found if s is not None]
        return max(known) if known and len(known) == len(found) else None
    return None


def tolerances(model: ir.Model, defaults: dict[str, tuple[float, float]], atol: float, rtol: float
               ) -> tuple[dict[str, tuple[float, float]], list[str]]:
    """``defaults`` (per output (atol, rtol)) with each dequantized output's atol raised to one step
    of its grid (``atol``/``rtol``: the default for an output ``defaults`` doesn't name), and the
    names of the outputs raised."""
    out = dict(defaults)
    raised = []
    for name, step in output_steps(model).items():
        base_atol, base_rtol = out.get(name, (atol, rtol))
        if step * SLACK > base_atol:
            out[name] = (step * SLACK, base_rtol)
            raised.append(name)
    return out, raised
