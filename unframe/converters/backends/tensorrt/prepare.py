"""Graph preparation for TensorRT's ONNX parser, as onnx-ir passes.

``prepare(model)`` runs, in order (shape inference, onnx's through onnx-ir's
``ShapeInferencePass``, first, best effort):

1. ``EmptyGuardPass`` (``guards.py``): an ``If(numel(x) == 0, then=<empty>, else=g)`` whose else
   branch is provably empty for an empty ``x`` (torchvision's batched NMS) becomes ``g``'s nodes,
   so their data-dependent shapes are in the top-level graph, where the builder takes them.
2. ``LiftConstantsToInitializersPass`` (onnx-ir): Constant nodes become initializers.
3. ``FoldConstantsPass``: nodes whose inputs are all initializers (or ``Shape``/``Size`` of a
   tensor with a static shape) are evaluated with onnx's reference evaluator and replaced by an
   initializer. Shape-computing subgraphs and Resize scales thus reach the parser as weights,
   which is what its "must be an initializer" restrictions ask for. A ``DequantizeLinear`` of an
   int8/int4/fp8 weight (a ``--quantize int8`` Q/DQ graph) is not folded: TensorRT builds its
   int8 kernels from it.
4. ``ConstantTripCountPass`` (``unframe.passes.loops``): a Loop whose trip count is decided by
   its condition over constants alone (tf2onnx's ``for t in tf.range(12)``) gets that count as
   ``M``: the parser sizes scan outputs from ``M`` only.
5. ``LowerCaseEinsumPass`` (``einsum.py``): Einsum subscripts renamed to lower case, which is all
   the parser reads (torchvision's MaxViT writes ``"B G P H I D, ..."``).
6. ``NarrowInt64Pass``: int64 index constants that fit in int32 become int32 where the op takes
   either (TensorRT computes indices in int32; int64 needs casts inside the engine).
7. ``FloatCumSumPass``: a running count (CumSum of a tensor cast from BOOL to an integer type,
   as RoBERTa's and Whisper's position ids are computed) is summed in float32, which TensorRT's
   CumSum takes, and cast back: exact, every partial sum being an integer below 2**24.
8. ``DigitCumSumPass`` (``cumsum.py``): any other integer CumSum (BLOOM's sum of its int64
   attention mask) as float32 sums of base-16 digits, exact for any values over an axis of at
   most 1,118,481 elements (``backend.convert`` checks the profile's max against that).
9. ``GreedyNmsPass`` (``nms.py``; tensorrt-rtx only, whose builder has no implementation of
   NonMaxSuppression): the op as comparison matrices and a fixed-point Loop, with exactly
   onnxruntime's selection.
10. ``CompactNonZeroPass`` (tensorrt-rtx only, whose parser takes NonZero only as a plugin it
   doesn't ship): NonZero over a 1-D tensor becomes a compaction TensorRT builds natively
   (a running count, a scatter and a slice of data-dependent length).
11. ``FloatNonZeroPass``: NonZero over a mask or integers reads a float32 cast of it (TensorRT's
   NonZero takes float types; the indices are the same).
12. ``RemoveUnusedNodesPass`` (onnx-ir): what folding left unused.

A pass that replaces one node with several builds them with ``rewrite.NodeBuilder``; a new one
goes in its own module when it is more than a screen (``guards.py``, ``nms.py``).
"""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common as common_passes

from unframe.converters.backends.tensorrt.cumsum import DigitCumSumPass
from unframe.converters.backends.tensorrt.einsum import LowerCaseEinsumPass
from unframe.converters.backends.tensorrt.guards import EmptyGuardPass
from unframe.converters.backends.tensorrt.nms import GreedyNmsPass
from unframe.converters.backends.tensorrt.rewrite import NodeBuilder
from unframe.opset import DEFAULT_DOMAINS, FALLBACK_OPSET, main_opset
from unframe.passes.loops import ConstantTripCountPass

logger = logging.getLogger(__name__)

NONDETERMINISTIC = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                    "Multinomial", "Bernoulli", "Dropout"}
# A folded output may grow over its inputs (Expand, ConstantOfShape, Tile): allow small ones only.
FOLD_GROWTH_BYTES = 1 << 20
# Nodes over weights past this are left to the builder: what must be an initializer is small
# (shapes, axes, scales), and folding a large weight's layout change (the Transpose of a decoder's
# tied 1 GB embedding) would hold a second copy of it in memory and write it out again.
FOLD_INPUT_BYTES = 16 << 20
INT32_MIN, INT32_MAX = np.iinfo(np.int32).min, np.iinfo(np.int32).max


class FoldConstantsPass(ir.passes.InPlacePass):
    """Evaluate nodes of the main graph whose inputs are all known at build time.

    Before::

        s = Shape(x: [1, 3, 8, 8]);  g = Gather(s, 1: int64);  y = Reshape(x, Concat(g, -1))

    After::

        y = Reshape(x, c: int64[2] = [3, -1])      # c is an initializer
    """

    def __init__(self, opset: int | None = None) -> None:
        super().__init__()
        self.opset = opset

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        opset = self.opset or main_opset(model, default=FALLBACK_OPSET)
        graph = model.graph
        graph_inputs = {v.name for v in graph.inputs}
        count = 0
        for node in list(graph):
            arrays = self._fold(node, opset, graph_inputs)
            if arrays is None:
                continue
            for old, array in zip(node.outputs, arrays, strict=False):
                new = ir.Value(name=f"{old.name}__folded", const_value=ir.Tensor(
                    array, name=f"{old.name}__folded"), shape=ir.Shape(array.shape),
                    type=ir.TensorType(ir.DataType.from_numpy(array.dtype)))
                graph.register_initializer(new)
                ir.convenience.replace_all_uses_with(old, new)
            count += 1
        return ir.passes.PassResult(model, modified=bool(count))

    def _fold(self, node: ir.Node, opset: int,
              graph_inputs: set[str]) -> list[np.ndarray] | None:
        if node.domain not in DEFAULT_DOMAINS or node.op_type in NONDETERMINISTIC:
            return None
        if any(o.is_graph_output() for o in node.outputs):
            return None  # the model's signature stays as it is
        if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
               for a in node.attributes.values()):
            return None
        if node.op_type in ("Shape", "Size"):
            return _shape_of_static(node)
        if node.op_type == "DequantizeLinear" and _quantized_weight(node):
            return None  # TensorRT fuses DQ(int8 weight) -> Conv/Gemm into an int8 kernel
        inputs = [v for v in node.inputs if v is not None]
        if not inputs or any(v.const_value is None or v.name in graph_inputs for v in inputs):
            return None
        in_bytes = sum(v.const_value.nbytes for v in inputs)  # type: ignore[union-attr]
        if in_bytes > FOLD_INPUT_BYTES:
            return None
        arrays = _evaluate(node, opset)
        if arrays is None:
            return None
        if sum(a.nbytes for a in arrays) > max(FOLD_GROWTH_BYTES, 2 * in_bytes):
            return None
        return arrays


# DequantizeLinear inputs TensorRT builds from (an explicitly quantized network's weights): the
# folded float32 copy would run in float, and the engine would be 4x larger
QUANTIZED_WEIGHT_TYPES = {ir.DataType.INT8, ir.DataType.UINT8, ir.DataType.INT4, ir.DataType.UINT4,
                          ir.DataType.FLOAT8E4M3FN}


def _quantized_weight(node: ir.Node) -> bool:
    data = node.inputs[0] if node.inputs else None
    return data is not None and data.const_value is not None and data.const_value.dtype in QUANTIZED_WEIGHT_TYPES


def _shape_of_static(node: ir.Node) -> list[np.ndarray] | None:
    value = node.inputs[0]
    shape = value.shape if value is not None else None
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    dims = [int(d) for d in shape]
    if node.op_type == "Size":
        return [np.array(int(np.prod(dims, dtype=np.int64)), dtype=np.int64)]
    start = node.attributes["start"].value if "start" in node.attributes else 0
    end = node.attributes["end"].value if "end" in node.attributes else None
    return [np.array(dims[slice(start, end)], dtype=np.int64)]


def _evaluate(node: ir.Node, opset: int) -> list[np.ndarray] | None:
    """Run one node with onnx's reference evaluator; None when it can't."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    proto = ir.serde.serialize_node(node)
    feeds = {v.name: v.const_value.numpy() for v in node.inputs if v is not None}  # type: ignore[union-attr]
    inputs = [onnx.helper.make_tensor_value_info(name, onnx.helper.np_dtype_to_tensor_dtype(
        a.dtype), a.shape) for name, a in feeds.items()]
    outputs = [onnx.helper.make_empty_tensor_value_info(name) for name in proto.output if name]
    graph = onnx.helper.make_graph([proto], "fold", inputs, outputs)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    try:
        results = ReferenceEvaluator(model).run(None, feeds)
    except Exception as exc:  # an op the evaluator lacks: leave the node to the parser
        logger.debug("not folding %s: %s", node.op_type, exc)
        return None
    if not all(isinstance(r, np.ndarray) for r in results):
        return None
    return [np.asarray(r) for r in results]


# op -> input indices that accept int32 as well as int64 (their type variable is index-only).
NARROWABLE_INPUTS: dict[str, tuple[int, ...]] = {
    "Gather": (1,), "GatherElements": (1,), "ScatterElements": (1,), "Scatter": (1,),
    "OneHot": (0, 1),
}
# Slice's starts/ends/axes/steps share one type variable: narrowed together, clamped to int32
# (an int64 "to the end" sentinel means the same clamped to INT32_MAX).
SLICE_INDEX_INPUTS = (1, 2, 3, 4)


class NarrowInt64Pass(ir.passes.InPlacePass):
    """int64 index initializers that fit in int32 become int32 where every consumer takes int32.

    Before::  y = Gather(x, idx: int64[3] = [0, 2, 1])
    After::   y = Gather(x, idx: int32[3] = [0, 2, 1])

    Slice: ``Slice(x, starts: int64 = [1], ends: int64 = [9223372036854775807])`` becomes
    ``Slice(x, starts: int32 = [1], ends: int32 = [2147483647])`` (ends clamp: same meaning for any
    dim below 2**31).
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        graph_inputs = {v.name for v in graph.inputs}
        count = 0
        for node in list(graph):
            if node.domain not in DEFAULT_DOMAINS:
                continue
            if node.op_type == "Slice":
                count += self._narrow_slice(node, graph, graph_inputs)
            for index in NARROWABLE_INPUTS.get(node.op_type, ()):
                value = node.inputs[index] if index < len(node.inputs) else None
                array = _int64_const(value, graph_inputs)
                if array is not None and _fits(array) and _only_narrowable_uses(value):
                    _retype(value, array.astype(np.int32))
                    count += 1
        return ir.passes.PassResult(model, modified=bool(count))

    def _narrow_slice(self, node: ir.Node, graph: ir.Graph, graph_inputs: set[str]) -> int:
        values = [node.inputs[i] for i in SLICE_INDEX_INPUTS if i < len(node.inputs)
                  and node.inputs[i] is not None]
        arrays = [_int64_const(v, graph_inputs) for v in values]
        if not values or any(a is None for a in arrays):
            return 0
        if any(len(v.uses()) != 1 for v in values):
            return 0  # shared with another consumer: leave it alone
        for value, array in zip(values, arrays, strict=False):
            _retype(value, np.clip(array, INT32_MIN, INT32_MAX).astype(np.int32))  # type: ignore[arg-type]
        return len(values)


class FloatCumSumPass(ir.passes.InPlacePass):
    """TensorRT's CumSum takes float types only; a running count over an integer tensor is summed
    in float32 where that is exact.

    Before::  m = Cast(Not(Equal(ids, pad)), to=INT64);  p = CumSum(m, axis)
    After::   m = Cast(..., to=INT64);  f = Cast(m, to=FLOAT);  s = CumSum(f, axis);
              p = Cast(s, to=INT64)

    Only where the summed tensor is a ``Cast`` from BOOL (every term 0 or 1), so a partial sum is
    an integer no greater than the length of the axis, which float32 holds exactly up to 2**24:
    a static axis must be at most that long; a dynamic one (a sequence) is bounded by the
    engine's optimization profile, and 16.7 million tokens is beyond any profile in practice.
    Integer CumSum over anything else is left for the pre-flight to name.
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        count = 0
        for node in list(model.graph):
            if node.op_type != "CumSum" or node.domain not in DEFAULT_DOMAINS or not node.inputs:
                continue
            data, out = node.inputs[0], node.outputs[0]
            if data is None or data.dtype not in _INT_TYPES or not _counts_booleans(data, node):
                continue
            as_float = ir.node("Cast", [data], {"to": ir.DataType.FLOAT}, name=f"{node.name}_to_float")
            summed = ir.node("CumSum", [as_float.outputs[0], *node.inputs[1:]], dict(node.attributes),
                             name=node.name)
            back = ir.node("Cast", [summed.outputs[0]], {"to": data.dtype}, name=f"{node.name}_to_int")
            for value in (as_float.outputs[0], summed.outputs[0]):
                value.type, value.shape = ir.TensorType(ir.DataType.FLOAT), data.shape
            back.outputs[0].type, back.outputs[0].shape = out.type, out.shape
            ir.convenience.replace_nodes_and_values(model.graph, node, [node], [as_float, summed, back],
                                                    [out], [back.outputs[0]])
            count += 1
        return ir.passes.PassResult(model, modified=bool(count))


_INT_TYPES = {ir.DataType.INT64, ir.DataType.INT32}
FLOAT_EXACT_INTEGERS = 1 << 24


class FloatNonZeroPass(ir.passes.InPlacePass):
    """TensorRT's NonZero takes float types only; a mask (BOOL, as torchvision's detectors keep
    the boxes over a score threshold) or an integer tensor is cast to float32 first. Exact: no
    value but zero casts to zero, so the indices are the same.

    Before::  i = NonZero(Greater(scores, t))
    After::   i = NonZero(Cast(Greater(scores, t), to=FLOAT))
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        count = 0
        for node in ir.traversal.RecursiveGraphIterator(model.graph):
            if node.op_type != "NonZero" or node.domain not in DEFAULT_DOMAINS or not node.inputs:
                continue
            data = node.inputs[0]
            if data is None or data.dtype is None or data.dtype in _FLOAT_TYPES or data.dtype not in _CASTABLE:
                continue
            name = f"{node.name or 'NonZero'}_{count}_to_float"
            cast = ir.node("Cast", [data], {"to": ir.DataType.FLOAT}, name=name)
            cast.outputs[0].type, cast.outputs[0].shape = ir.TensorType(ir.DataType.FLOAT), data.shape
            node.graph.insert_before(node, cast)
            node.replace_input_with(0, cast.outputs[0])
            count += 1
        return ir.passes.PassResult(model, modified=bool(count))


_FLOAT_TYPES = {ir.DataType.FLOAT, ir.DataType.FLOAT16}


class CompactNonZeroPass(ir.passes.InPlacePass):
    """tensorrt-rtx's parser maps NonZero to a plugin it doesn't ship ("NonZero plugin creator
    version 1 was not found"); torchvision's detectors keep the boxes over a score threshold with
    one (``scores[scores > t]``). A NonZero over a 1-D tensor of N elements becomes a compaction
    of layers TensorRT builds natively, its output of data-dependent length as NonZero's is:

    Before::  i = NonZero(x)                                   # int64 [1, K]
    After::   m = Not(Equal(x, 0));  f = Cast(m, FLOAT)
              slot = Where(m, CumSum(f) - 1, N)                # K kept slots, the rest to slot N
              kept = ScatterElements(zeros[N + 1], slot, Range(0, N))
              i = Reshape(Slice(kept, 0, ReduceSum(f)), [1, -1])

    Exact while N is at most 2**24 (the running count and the indices are float32, which
    TensorRT's CumSum and scatter take): a static N past that is left alone, for the parser to
    name; a dynamic one is bounded by the engine's profile. The kept slots are distinct, so the
    scatter is deterministic where it is read; only slot N, which the slice drops, sees
    duplicates. Needs opset 11 (CumSum, Range, ScatterElements).
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if main_opset(model, default=FALLBACK_OPSET) < 11:
            return ir.passes.PassResult(model, modified=False)
        graph, count = model.graph, 0
        for node in list(graph):
            if node.op_type != "NonZero" or node.domain not in DEFAULT_DOMAINS or not node.inputs:
                continue
            data = node.inputs[0]
            if data is None or data.shape is None or len(data.shape) != 1 or data.dtype is None:
                continue
            if isinstance(data.shape[0], int) and data.shape[0] > FLOAT_EXACT_INTEGERS:
                continue
            nodes, indices = _compaction(graph, node, data, f"{node.name or 'NonZero'}_compact{count}")
            indices.type, indices.shape = node.outputs[0].type, node.outputs[0].shape
            ir.convenience.replace_nodes_and_values(graph, node, [node], nodes, [node.outputs[0]], [indices])
            count += 1
        return ir.passes.PassResult(model, modified=bool(count))


def _compaction(graph: ir.Graph, node: ir.Node, data: ir.Value, prefix: str) -> tuple[list[ir.Node], ir.Value]:
    """The nodes of CompactNonZeroPass's rewrite of ``NonZero(data)`` and the indices they give."""
    b = NodeBuilder(graph, prefix)
    F, I64, B = ir.DataType.FLOAT, ir.DataType.INT64, ir.DataType.BOOL  # noqa: N806
    if data.dtype == B:
        mask = data
    else:
        as_float = data if data.dtype == F else b.op("Cast", [data], F, to=F)
        mask = b.op("Not", [b.op("Equal", [as_float, b.scalar(0.0)], B)], B)
    ones = b.op("Cast", [mask], F, to=F)
    position = b.op("Sub", [b.op("CumSum", [ones, b.scalar(0, np.int64)], F), b.vector(1.0, dtype=np.float32)], F)
    length = b.op("Shape", [data], I64)
    slot = b.op("Cast", [b.op("Where", [mask, position, b.op("Cast", [length], F, to=F)], F)], I64, to=I64)
    slots = b.op("Expand", [b.scalar(0.0), b.op("Add", [length, b.vector(1)], I64)], F)
    limit = b.op("Reshape", [length, b.const("scalar", np.zeros(0, np.int64))], I64)
    positions = b.op("Cast", [b.op("Range", [b.scalar(0, np.int64), limit, b.scalar(1, np.int64)], I64)], F, to=F)
    kept = b.op("ScatterElements", [slots, slot, positions], F, axis=0)
    count = b.op("Cast", [b.op("ReduceSum", [ones], F, keepdims=1)], I64, to=I64)
    first = b.op("Cast", [b.op("Slice", [kept, b.vector(0), count], F)], I64, to=I64)
    return b.nodes, b.op("Reshape", [first, b.vector(1, -1)], I64)


_CASTABLE = {ir.DataType.BOOL, ir.DataType.INT8, ir.DataType.UINT8, ir.DataType.INT32, ir.DataType.INT64}


def _counts_booleans(data: ir.Value, cumsum: ir.Node) -> bool:
    if not _cast_from_bool(data):
        return False
    axis = cumsum.inputs[1].const_value if len(cumsum.inputs) > 1 and cumsum.inputs[1] is not None else None
    if axis is None or data.shape is None:
        return axis is not None  # rank unknown: the profile bounds the length
    dim = data.shape[int(axis.numpy().reshape(-1)[0]) % len(data.shape)]
    return not isinstance(dim, int) or dim <= FLOAT_EXACT_INTEGERS


def _cast_from_bool(value: ir.Value) -> bool:
    """``value`` is BOOL cast to an integer type, maybe through more integer casts (torch's
    ``mask.int()`` then ``cumsum``, which widens to int64): every element 0 or 1."""
    for _ in range(4):
        producer = value.producer()
        if producer is None or producer.op_type != "Cast" or not producer.inputs or producer.inputs[0] is None:
            return False
        value = producer.inputs[0]
        if value.dtype == ir.DataType.BOOL:
            return True
        if value.dtype not in _INT_TYPES:
            return False
    return False


def _int64_const(value: ir.Value | None, graph_inputs: set[str]) -> np.ndarray | None:
    if value is None or value.const_value is None or value.name in graph_inputs:
        return None
    if value.const_value.dtype != ir.DataType.INT64 or value.is_graph_output():
        return None
    return value.const_value.numpy()


def _fits(array: np.ndarray) -> bool:
    return array.size == 0 or (int(array.min()) >= INT32_MIN and int(array.max()) <= INT32_MAX)


def _only_narrowable_uses(value: ir.Value) -> bool:
    return all(index in NARROWABLE_INPUTS.get(user.op_type, ()) for user, index in value.uses())


def _retype(value: ir.Value, array: np.ndarray) -> None:
    value.const_value = ir.Tensor(array, name=value.name)
    value.type = ir.TensorType(ir.DataType.INT32)  # a new type: clones share type objects


def infer_shapes(model: ir.Model) -> ir.Model:
    """onnx shape inference through onnx-ir, best effort: folding ``Shape`` needs static shapes,
    but a model inference can't handle is still prepared (and the parser infers its own)."""
    from unframe.version_converter.types import declares_huge_tensor

    try:
        return common_passes.ShapeInferencePass(check_type=False, strict_mode=False,
                                                data_prop=not declares_huge_tensor(model))(model).model
    except Exception as exc:  # e.g. a >2 GB model or an op inference doesn't know
        logger.debug("shape inference skipped: %s", exc)
        return model


def prepare(model: ir.Model, *, native_nonzero: bool | None = None, native_nms: bool | None = None) -> ir.Model:
    """Run the TensorRT preparation passes on ``model`` (in place) and return it.
    ``native_nonzero`` / ``native_nms``: whether the parser takes NonZero as a layer and the
    builder implements NonMaxSuppression; by default, unless the TensorRT that would build it is
    tensorrt-rtx."""
    if native_nonzero is None or native_nms is None:
        from unframe.converters.backends.tensorrt.trtmodule import installed_flavour

        rtx = installed_flavour() == "tensorrt_rtx"
        native_nonzero = not rtx if native_nonzero is None else native_nonzero
        native_nms = not rtx if native_nms is None else native_nms
    model = infer_shapes(model)
    passes = ir.passes.PassManager([
        EmptyGuardPass(),
        common_passes.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        FoldConstantsPass(),
        ConstantTripCountPass(),
        LowerCaseEinsumPass(),
        NarrowInt64Pass(),
        FloatCumSumPass(),
        DigitCumSumPass(),
        *([] if native_nms else [GreedyNmsPass()]),
        *([] if native_nonzero else [CompactNonZeroPass()]),
        FloatNonZeroPass(),
        common_passes.RemoveUnusedNodesPass(),
    ], steps=1)
    return passes(model).model
