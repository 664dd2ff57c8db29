"""How far 16-bit rounding alone moves a model's outputs: the tolerance a 16-bit backend needs.

A backend that computes in fp16 (CoreML's default) or bf16 can't match the float32 graph closer
than the graph's own sensitivity to rounding allows, and that sensitivity is a property of the
model (depth, activation ranges, the scale of the output against the values summed into it), not
of the backend. So it is measured, on the same inputs, by onnxruntime running a copy of the graph
whose weights and float intermediates are rounded to the 16-bit type and back (Cast pairs after
every node: storage rounding, computed in float32)::

    x -> Conv(W16) -> Cast(f16) -> Cast(f32) -> Relu -> Cast(f16) -> Cast(f32) -> ... -> y

The backend stage's parity then allows ``WIDEN`` times that error (the backend also rounds inside
its accumulations), capped at ``MAX_SHARE`` of the output's scale: a model that loses more than
that to rounding alone is not one fp16 can serve, and its parity failure says so. A translation
bug moves outputs by the order of their scale and is still caught.

Skipped (no widening, the backend's own tolerance applies) for models with more than
``MAX_WEIGHT_BYTES`` of float weights (the copy would hold them twice) and for graphs onnxruntime
can't run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

MAX_WEIGHT_BYTES = 512 << 20
WIDEN = 2.0  # times the emulated error: the backend also rounds inside its accumulations
MAX_SHARE = 0.1  # never more than this share of the output's scale
LOW = {"fp16": ir.DataType.FLOAT16, "bf16": ir.DataType.BFLOAT16}


@dataclass
class RoundingError:
    """Per float output: the largest |rounded - float32| and |float32| over the feeds."""

    precision: str
    errors: dict[str, float] = field(default_factory=dict)
    scales: dict[str, float] = field(default_factory=dict)
    nonfinite: list[str] = field(default_factory=list)  # finite in float32, not after rounding

    def allowance(self, name: str) -> float:
        """The absolute error a 16-bit backend is allowed on output ``name`` (0 when unknown)."""
        if name not in self.errors or name in self.nonfinite:
            return 0.0
        return min(WIDEN * self.errors[name], MAX_SHARE * self.scales.get(name, 0.0))


def rounding_error(model: ir.Model, feeds: Sequence[Mapping[str, np.ndarray]],
                   precision: str = "fp16") -> RoundingError | None:
    """onnxruntime on ``model`` and on its 16-bit-rounded copy, on each feed; None when skipped
    (weights too large to copy, no float output, or a graph onnxruntime refuses)."""
    from unframe.validate.onnxruntime import OnnxRuntimeRunner

    low = LOW[precision]
    floats = [v for v in model.graph.initializers.values()
              if v.const_value is not None and v.dtype == ir.DataType.FLOAT]
    if sum(v.const_value.nbytes for v in floats) > MAX_WEIGHT_BYTES:
        return None
    rounded = _rounded_copy(model, low)
    result = RoundingError(precision)
    try:
        exact_runner, rounded_runner = OnnxRuntimeRunner(model), OnnxRuntimeRunner(rounded)
        for feed in feeds:
            exact, approx = exact_runner.run(feed), rounded_runner.run(feed)
            for name, a in exact.items():
                a = np.asarray(a)
                if a.dtype.kind != "f" or a.size == 0 or name not in approx:
                    continue
                b = np.asarray(approx[name]).astype(np.float64)
                a = a.astype(np.float64)
                finite = np.isfinite(a)
                if np.any(finite & ~np.isfinite(b)) and name not in result.nonfinite:
                    result.nonfinite.append(name)
                both = finite & np.isfinite(b)
                err = float(np.abs(a - b)[both].max()) if np.any(both) else 0.0
                scale = float(np.abs(a)[finite].max()) if np.any(finite) else 0.0
                result.errors[name] = max(result.errors.get(name, 0.0), err)
                result.scales[name] = max(result.scales.get(name, 0.0), scale)
    except Exception:  # noqa: BLE001 - a graph onnxruntime can't run: the backend's tolerance stands
        return None
    return result if result.errors else None


def _rounded_copy(model: ir.Model, low: ir.DataType) -> ir.Model:
    """``model`` with float weights rounded to ``low`` and back, and every float value the main
    graph's nodes compute passed through Cast(low) -> Cast(float) before its readers."""
    from unframe.version_converter.types import infer_types

    work = model.clone()
    graph = work.graph
    untyped = [v for n in graph for v in n.outputs if v.type is None]
    if untyped:
        infer_types(work, untyped)
    low_np = np.dtype(low.numpy()) if low != ir.DataType.BFLOAT16 else None
    for value in list(graph.initializers.values()):
        if value.const_value is not None and value.dtype == ir.DataType.FLOAT:
            array = value.const_value.numpy()
            value.const_value = ir.tensor(_round(array, low_np), name=value.name)
    outputs = set(graph.outputs)
    for node in list(graph):
        for out in node.outputs:
            if out.dtype != ir.DataType.FLOAT or out in outputs or not out.uses():
                continue
            uses = list(out.uses())
            down = ir.node("Cast", [out], attributes={"to": int(low)})
            up = ir.node("Cast", [down.outputs[0]], attributes={"to": int(ir.DataType.FLOAT)})
            down.outputs[0].name, up.outputs[0].name = f"{out.name}__low", f"{out.name}__rounded"
            down.outputs[0].type, up.outputs[0].type = ir.TensorType(low), ir.TensorType(ir.DataType.FLOAT)
            graph.insert_after(node, [down, up])
            for user, index in uses:
                user.replace_input_with(index, up.outputs[0])
    return work


def _round(array: np.ndarray, low_np: np.dtype | None) -> np.ndarray:
    if low_np is not None:
        with np.errstate(over="ignore"):
            return array.astype(low_np).astype(np.float32)
    # bfloat16: keep the top 16 bits of each float32, rounding to nearest even
    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)
