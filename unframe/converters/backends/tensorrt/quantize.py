"""``--quantize int8`` for TensorRT: an explicitly quantized network (Q/DQ in the ONNX graph).

TensorRT's int8 path is the Q/DQ one: the engine is built from the ONNX graph with
``QuantizeLinear``/``DequantizeLinear`` pairs, symmetric int8 (zero points 0, which TensorRT
requires), weights per output channel, activation scales from onnxruntime's calibration
(``unframe.passes.quantize.onnx_quant.quantize_onnx`` with ``symmetric_activations``). TensorRT
fuses each DQ -> Conv/Gemm -> Q into an int8 kernel.

onnxruntime's quantizer also writes each bias as int32 behind a ``DequantizeLinear``; TensorRT
takes DequantizeLinear of int8/fp8/int4 only, so those are folded back into float32 biases here
(the same values onnxruntime computes: ``(q - zero_point) * scale``), which is how TensorRT
wants biases anyway (it requantizes them inside the fused kernel). The preparation's constant
folding would do it too at the canonical opset; done here, the Q/DQ graph is the one the engine
is built from at any opset, as pre-flight and onnxruntime see it::

    before:  b_q int32[N], b_scale[N] -> DequantizeLinear -> Conv(x, W, b)
    after:   b float32[N] = b_q * b_scale                 -> Conv(x, W, b)

The Q/DQ graph is also what the accuracy guard can run on onnxruntime where the engine can't
run (no CUDA device): it rides along as ``artifact.metadata["qdq_model"]`` (never written).
"""

from __future__ import annotations

import weakref
from collections import Counter
from typing import Any

import numpy as np
import onnx_ir as ir

QDQ_KEY = "qdq_model"  # artifact.metadata: the Q/DQ ir.Model the engine was built from (in memory only)
_DONE: weakref.WeakKeyDictionary[Any, tuple[Any, ir.Model, list[str]]] = weakref.WeakKeyDictionary()


def quantized_graph(model: ir.Model, request: Any) -> tuple[ir.Model, list[str]]:
    """The Q/DQ copy of ``model`` for ``request`` (made once per model and request: the
    pre-flight and the convert after it share it) and notes on it."""
    from unframe.passes.quantize.onnx_quant import quantize_onnx

    key = (request.scheme.name, id(request.calibration), len(request.calibration), tuple(request.exclude))
    cached = _DONE.get(model)
    if cached is not None and cached[0] == key:
        return cached[1], list(cached[2])
    quantized, notes = quantize_onnx(model, request, symmetric_activations=True)
    folded = fold_bias_dequantize(quantized)
    if folded:
        notes.append(f"{folded} int32 bias DequantizeLinear folded into float32 biases (TensorRT "
                     "dequantizes int8/fp8/int4 only; it requantizes biases inside its int8 kernels)")
    notes.append(describe(quantized))
    _DONE[model] = (key, quantized, notes)
    return quantized, list(notes)


def fold_bias_dequantize(model: ir.Model) -> int:
    """Each DequantizeLinear of an int32 initializer (a bias) replaced by its float32 values, in
    place; returns how many."""
    folded = 0
    for node in list(model.graph):
        if node.op_type != "DequantizeLinear" or node.inputs[0] is None:
            continue
        data = node.inputs[0].const_value
        if data is None or data.dtype != ir.DataType.INT32:
            continue
        scale = node.inputs[1].const_value if len(node.inputs) > 1 and node.inputs[1] is not None else None
        zero = node.inputs[2].const_value if len(node.inputs) > 2 and node.inputs[2] is not None else None
        if scale is None:
            continue
        q = data.numpy().astype(np.int64)
        z = zero.numpy().astype(np.int64) if zero is not None else 0
        s = scale.numpy()
        axis = node.attributes.get_int("axis", 1)
        if s.ndim == 1 and q.ndim > 1:  # per-axis scales broadcast along ``axis``
            shape = [1] * q.ndim
            shape[axis] = -1
            s, z = s.reshape(shape), np.reshape(z, shape) if np.ndim(z) else z
        values = ((q - z) * s).astype(np.float32)
        out = node.outputs[0]
        name = out.name or f"{node.name}_folded"
        value = ir.Value(name=f"{name}_float", const_value=ir.Tensor(values, name=f"{name}_float"),
                         type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(list(values.shape)))
        model.graph.register_initializer(value)
        out.replace_all_uses_with(value)
        if out in model.graph.outputs:
            continue  # a graph output stays as it is (never a bias in practice)
        model.graph.remove(node, safe=True)
        folded += 1
    _drop_unused(model)
    return folded


def _drop_unused(model: ir.Model) -> None:
    used = {v.name for n in ir.traversal.RecursiveGraphIterator(model.graph) for v in n.inputs if v is not None}
    used |= {v.name for v in model.graph.outputs}
    for name in [n for n in model.graph.initializers if n not in used]:
        del model.graph.initializers[name]


def describe(model: ir.Model) -> str:
    """How the Q/DQ graph quantizes: per-channel weights, per-tensor activations."""
    counts: Counter[str] = Counter()
    for node in model.graph:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        scale = node.inputs[1].const_value if len(node.inputs) > 1 and node.inputs[1] is not None else None
        per_channel = scale is not None and scale.numpy().size > 1
        counts[f"{node.op_type} {'per channel' if per_channel else 'per tensor'}"] += 1
    return "TensorRT Q/DQ graph (symmetric int8): " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


def weight_bytes(model: ir.Model) -> int:
    """Bytes of the initializers as stored."""
    return sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)
