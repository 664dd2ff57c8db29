"""Reduced precision in the graph itself: fp16 or bf16 compute as a property of the ONNX graph.

TensorRT 11 and TensorRT-RTX have no FP16/BF16 builder flags (a tensor computes in the type the
graph gives it), and an fp16 ONNX file is the same rewrite. ``LowerPrecisionPass`` rewrites
float32 compute to fp16 or bf16 while:

- keeping the model's input and output types (Casts at the boundary);
- keeping numerically sensitive ops in fp32 (Softmax, reductions, normalizations, Exp/Log/Pow,
  ...), and every node a pass marked ``unframe.passes.KEEP_FP32`` (lowered tree comparisons and
  sums), with Casts into and out of them;
- keeping any op in fp32 that the target can't compute in the low type (``supports``: TensorRT's
  table for TensorRT, onnx's schemas for an ONNX file), or whose float type is set by an
  attribute (ConstantOfShape, Random*, EyeLike), or that has a subgraph;
- leaving inputs the ONNX spec fixes to float32 (Resize ``scales``) untouched;
- keeping in fp32 every node that reads or writes a tensor found past fp16's range by range
  analysis on calibration feeds (``overflowing_values``: onnxruntime with every intermediate
  tapped), e.g. an un-normalized residual stream or attention scores before a mask.

Which ops go low is the target's: for TensorRT its table, not ONNX's schemas (a bf16 graph has
bf16 Conv and Gemm, which TensorRT builds but ONNX's type constraints, and so onnxruntime, do
not allow); for an ONNX file ``schema_supports``.

Before (fp16)::

    x: f32 -> Conv(W: f32) -> Softmax -> y: f32

After::

    x: f32 -> Cast(f16) -> Conv(W: f16) -> Cast(f32) -> Softmax -> y: f32
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

import numpy as np
import onnx_ir as ir

from unframe.opset import FALLBACK_OPSET, is_default_domain, main_opset
from unframe.passes import keeps_fp32
from unframe.validate.rounding import FLOAT32_INSIDE
from unframe.version_converter.types import infer_dtypes

FLOAT = ir.DataType.FLOAT
LOW_TYPES = {"fp16": ir.DataType.FLOAT16, "bf16": ir.DataType.BFLOAT16}
# whether a target computes ``node`` in the low type (TensorRT: its table; ONNX: the schemas)
Supports = Callable[[ir.Node, ir.DataType, int], bool]
# Ops whose accuracy falls apart in 16-bit: accumulations, exponentials, normalizations.
KEEP_FP32 = frozenset({
    "Softmax", "LogSoftmax", "Hardmax", "Exp", "Log", "Pow", "Sqrt", "Reciprocal", "Erf",
    "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
    "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare", "CumSum",
    "LayerNormalization", "BatchNormalization", "InstanceNormalization", "GroupNormalization",
    "RMSNormalization", "LpNormalization", "MeanVarianceNormalization", "LRN",
    "Range", "QuantizeLinear", "DequantizeLinear", "NonMaxSuppression", "RoiAlign", "STFT",
    "DFT", "Einsum",
}) | FLOAT32_INSIDE  # what the 16-bit emulation (validate.rounding) assumes every backend keeps
# Ops whose output float type comes from an attribute: they stay fp32 and get a Cast after.
TYPED_BY_ATTRIBUTE = frozenset({
    "Constant", "ConstantOfShape", "RandomNormal", "RandomUniform", "RandomNormalLike",
    "RandomUniformLike", "EyeLike", "Multinomial", "Bernoulli", "BlackmanWindow",
    "HammingWindow", "HannWindow",
})


FP16_MAX = 65504.0
RANGE_HEADROOM = 0.5  # a tensor within 2x of fp16's largest value: the next op on it overflows


def overflowing_values(model: ir.Model, precision: str,
                       feeds: Sequence[Mapping[str, np.ndarray]]) -> dict[str, float]:
    """Range analysis: float tensors (initializers, graph inputs, every node output of the main
    graph) whose largest magnitude over ``feeds`` is past what ``precision`` holds, with
    headroom, by name -> that magnitude (inf when already non-finite). bf16 has fp32's range."""
    if precision != "fp16":
        return {}
    from unframe.validate.intermediates import OnnxTap

    peaks: dict[str, float] = {}

    def note(name: str, array: np.ndarray) -> None:
        if array.dtype.kind == "f" and array.size:
            peak = float(np.max(np.abs(array.astype(np.float32, copy=False))))
            peaks[name] = max(peaks.get(name, 0.0), peak if peak == peak else float("inf"))

    for name, value in model.graph.initializers.items():
        if value.const_value is not None and value.dtype == FLOAT:
            note(name, value.const_value.numpy())  # one tensor at a time (external data: mmap)
    tap = OnnxTap(model)
    for feed in feeds:
        for name, array in {**feed, **tap.values(feed)}.items():
            note(name, np.asarray(array))
    limit = FP16_MAX * RANGE_HEADROOM
    return {name: peak for name, peak in peaks.items() if peak > limit}


class LowerPrecisionPass(ir.passes.InPlacePass):
    """Compute in ``precision`` ("fp16" or "bf16") where it is safe; see the module docstring.
    ``keep_values``: tensor names (from ``overflowing_values``) whose readers and writer stay
    fp32."""

    def __init__(self, precision: str, keep_values: Collection[str] = (), *, supports: Supports) -> None:
        super().__init__()
        if precision not in LOW_TYPES:
            raise ValueError(f"precision must be one of {sorted(LOW_TYPES)}, not {precision!r}")
        self.low = LOW_TYPES[precision]
        self.keep_values = frozenset(keep_values)
        self.supports = supports

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        dtypes = infer_dtypes(model)
        opset = main_opset(model, default=FALLBACK_OPSET)
        low_nodes = [n for n in graph if self._goes_low(n, dtypes, opset)]
        casts = _Casts(graph)
        low_set = {id(n) for n in low_nodes}
        for node in low_nodes:
            pinned = set(_pinned_float_inputs(node, opset))
            for index, value in enumerate(node.inputs):
                if value is None or index in pinned or _dtype(value, dtypes) != FLOAT:
                    continue
                node.replace_input_with(index, casts.low(value, self.low))
            if node.op_type == "Cast":
                node.attributes["to"] = ir.AttrInt64("to", int(self.low))
            for value in node.outputs:
                if _dtype(value, dtypes) == FLOAT or (node.op_type == "Cast" and value.dtype):
                    value.type = ir.TensorType(self.low)  # a new type: clones share type objects
                    dtypes[value.name or ""] = int(self.low)
        self._restore_fp32(graph, low_set, casts, dtypes)
        return ir.passes.PassResult(model, modified=bool(low_nodes))

    def _goes_low(self, node: ir.Node, dtypes: dict[str, int], opset: int) -> bool:
        if not is_default_domain(node.domain) or node.op_type in KEEP_FP32 | TYPED_BY_ATTRIBUTE:
            return False
        if keeps_fp32(node):  # a lowered ML op's comparison or sum (unframe.passes.KEEP_FP32)
            return False
        if any(v is not None and v.name in self.keep_values for v in [*node.inputs, *node.outputs]):
            return False  # past fp16's range on the calibration feeds
        if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
               for a in node.attributes.values()):
            return False
        if not self.supports(node, self.low, opset):
            return False
        if node.op_type == "Cast":
            to = node.attributes.get("to")
            return to is not None and int(to.value) == int(FLOAT)
        return any(_dtype(v, dtypes) == FLOAT for v in [*node.inputs, *node.outputs] if v)

    def _restore_fp32(self, graph: ir.Graph, low_set: set[int], casts: _Casts,
                      dtypes: dict[str, int]) -> None:
        """fp32 consumers of low values, and graph outputs, get a Cast back to float32."""
        for node in list(graph):
            if id(node) in low_set or node.op_type == "Cast" and node.name.startswith(_Casts.PREFIX):
                continue
            for index, value in enumerate(node.inputs):
                if value is not None and value.dtype == self.low and _made_low(value, low_set):
                    node.replace_input_with(index, casts.fp32(value))
        # Subgraph nodes (If/Loop/Scan bodies) that capture a lowered outer value get fp32 too.
        for node in ir.traversal.RecursiveGraphIterator(graph):
            if node.graph is graph:
                continue
            for index, value in enumerate(node.inputs):
                if value is not None and value.dtype == self.low and _made_low(value, low_set) \
                        and value.producer() is not None and value.producer().graph is graph:
                    node.replace_input_with(index, casts.fp32(value))
        for i, out in enumerate(list(graph.outputs)):
            if out.dtype == self.low and _made_low(out, low_set):
                graph.outputs[i] = casts.fp32_output(out)


def _made_low(value: ir.Value, low_set: set[int]) -> bool:
    producer = value.producer()
    return producer is not None and (id(producer) in low_set or
                                     producer.name.startswith(_Casts.PREFIX))


def _dtype(value: ir.Value, dtypes: dict[str, int]) -> ir.DataType | None:
    if value.dtype is not None:
        return value.dtype
    code = dtypes.get(value.name or "")
    return ir.DataType(code) if code else None


def _pinned_float_inputs(node: ir.Node, opset: int) -> Iterable[int]:
    """Inputs whose ONNX type is exactly tensor(float), not a type variable (Resize scales)."""
    import onnx

    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except Exception:  # unknown op: nothing is pinned
        return []
    formals = schema.inputs
    return [i for i in range(len(node.inputs))
            if formals and formals[min(i, len(formals) - 1)].type_str == "tensor(float)"]


class _Casts:
    """Creates (once per value) the Casts and fp16/bf16 copies of initializers."""

    PREFIX = "unframe_precision_cast"

    def __init__(self, graph: ir.Graph) -> None:
        self.graph = graph
        self._low: dict[int, ir.Value] = {}
        self._fp32: dict[int, ir.Value] = {}
        self._n = 0

    def low(self, value: ir.Value, low: ir.DataType) -> ir.Value:
        key = id(value)
        if key not in self._low:
            if value.const_value is not None and not value.is_graph_input():
                self._low[key] = self._low_initializer(value, low)
            else:
                self._low[key] = self._cast(value, low)
        return self._low[key]

    def fp32(self, value: ir.Value) -> ir.Value:
        key = id(value)
        if key not in self._fp32:
            self._fp32[key] = self._cast(value, FLOAT)
        return self._fp32[key]

    def fp32_output(self, value: ir.Value) -> ir.Value:
        """Keep the output's name: the low value is renamed and the Cast takes the name."""
        name = value.name
        value.name = f"{name}__{value.dtype.name.lower()}"
        cast = self._cast(value, FLOAT, output_name=name)
        cast.shape = value.shape
        return cast

    def _low_initializer(self, value: ir.Value, low: ir.DataType) -> ir.Value:
        array = value.const_value.numpy().astype(np.float32)  # type: ignore[union-attr]
        name = f"{value.name}__{low.name.lower()}"
        tensor = ir.Tensor(_to_low(array, low), dtype=low, name=name)
        new = ir.Value(name=name, const_value=tensor, shape=value.shape, type=ir.TensorType(low))
        self.graph.register_initializer(new)
        return new

    def _cast(self, value: ir.Value, to: ir.DataType, output_name: str | None = None) -> ir.Value:
        self._n += 1
        node = ir.Node("", "Cast", [value], [ir.AttrInt64("to", int(to))],
                       name=f"{self.PREFIX}_{self._n}")
        out = node.outputs[0]
        out.name = output_name or f"{value.name}__to_{to.name.lower()}_{self._n}"
        out.type = ir.TensorType(to)
        out.shape = value.shape
        producer = value.producer()
        if producer is not None and producer.graph is self.graph:
            self.graph.insert_after(producer, node)
        else:
            self.graph.insert_before(self.graph.node(0), node) if len(self.graph) else \
                self.graph.append(node)
        return out


def _to_low(array: np.ndarray, low: ir.DataType) -> np.ndarray:
    if low == ir.DataType.FLOAT16:
        return array.astype(np.float16)
    import ml_dtypes

    return array.astype(ml_dtypes.bfloat16)


def lower_precision(model: ir.Model, precision: str | None, keep_values: Collection[str] = (), *,
                    supports: Supports) -> ir.Model:
    """Apply ``LowerPrecisionPass`` unless precision is None/"fp32"."""
    import onnx_ir.passes.common as common_passes

    if precision in (None, "fp32"):
        return model
    passes = ir.passes.PassManager([LowerPrecisionPass(precision, keep_values, supports=supports),
                                    common_passes.RemoveUnusedNodesPass()])
    return passes(model).model


def schema_supports(node: ir.Node, low: ir.DataType, opset: int) -> bool:
    """onnx's schema of ``node`` at ``opset`` lets every type variable that float32 fills take
    ``low`` too (what an ONNX runtime may be asked to run)."""
    import onnx

    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except Exception:  # noqa: BLE001 - an op onnx doesn't know: leave it as it is
        return False
    want, low_name = "tensor(float)", f"tensor({'float16' if low == ir.DataType.FLOAT16 else 'bfloat16'})"
    takes_float = [c for c in schema.type_constraints if want in c.allowed_type_strs]
    return bool(takes_float) and all(low_name in c.allowed_type_strs for c in takes_float)


def range_analysis(model: ir.Model, precision: str) -> tuple[dict[str, float], list[str]]:
    """Tensors past fp16's range on generated calibration feeds (onnxruntime, every
    intermediate tapped): kept in fp32 and each one reported."""
    from unframe.validate.inputs import generate_feeds

    if precision != "fp16":
        return {}, []
    try:
        overflow = overflowing_values(model, precision, generate_feeds(model))
    except Exception as exc:  # a graph onnxruntime can't run: the static keep-list only
        return {}, [f"fp16 range analysis skipped ({type(exc).__name__}: "
                    f"{str(exc).splitlines()[0][:160] if str(exc) else ''}); only the static "
                    "fp32 keep-list applies"]
    if not overflow:
        return {}, ["fp16 range analysis: no tensor past fp16's range on the calibration feeds"]
    listed = ", ".join(f"{name} (max |x| {peak:.3g})" for name, peak in
                       sorted(overflow.items(), key=lambda item: -item[1]))
    return overflow, [f"kept in fp32, past fp16's range on the calibration feeds: {listed}"]
