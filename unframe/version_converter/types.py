"""Types and shapes of intermediate values, inferred by onnx without reading any weight.

onnx-ir's ShapeInferencePass round-trips the whole model; here the graph is serialized with its large
initializers detached (shape inference only needs small constants such as Reshape targets), and the
inferred types are set on values that have none. And what a schema allows: the type strings of a
value (``type_string``) against a schema's type constraints (``allowed_types``, ``check_types``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import onnx
import onnx_ir as ir

from unframe.io import detached_proto, light_proto
from unframe.opset import is_default_domain

if TYPE_CHECKING:
    from onnx.defs import OpSchema


def _collect(graph: onnx.GraphProto, found: dict[str, onnx.TypeProto]) -> None:
    for vi in list(graph.value_info) + list(graph.output) + list(graph.input):
        if vi.type.WhichOneof("value") is not None:
            found.setdefault(vi.name, vi.type)
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _collect(attr.g, found)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    _collect(g, found)


class Snapshot:
    """A weight-less copy of a model, taken before a conversion changes it: the proto of
    ``light_proto`` plus the large initializer values it left out. ``restore`` puts the model back
    as it was (the large initializers are the original values, so no weight is read or copied)."""

    def __init__(self, proto: onnx.ModelProto, large: list[ir.Value], added: set[str], order: list[str],
                 positions: dict[int, int]) -> None:
        self.proto = proto
        self.large = large
        self.added = added  # names of the graph inputs that only stand in for a large initializer
        self.order = order  # the initializers' names in their original order
        self.positions = positions  # id of each main-graph node -> its index in proto.graph.node

    def patched(self, model: ir.Model, untouched: set[int]) -> onnx.ModelProto | None:
        """The light proto of ``model`` after a conversion, without serializing the ``untouched``
        main-graph nodes again (their snapshot protos are reused): the same as ``light_proto`` but
        for value_info entries of values that may be gone. None where that shortcut does not
        apply (before IR 4 initializers are also graph inputs)."""
        if model.ir_version < 4:
            return None
        proto = onnx.ModelProto()
        proto.CopyFrom(self.proto)
        proto.ir_version = model.ir_version
        del proto.opset_import[:]
        for domain, version in model.opset_imports.items():
            proto.opset_import.append(onnx.helper.make_opsetid(domain, version))
        graph = proto.graph
        del graph.node[:]
        nodes = self.proto.graph.node
        for node in model.graph:
            index = self.positions.get(id(node))
            if index is not None and id(node) in untouched:
                graph.node.append(nodes[index])
            else:
                graph.node.append(ir.serde.serialize_node(node))
        known = {t.name for t in graph.initializer} | self.added
        for value in model.graph.initializers.values():
            if value.name not in known:  # added by an adapter (typed constants below opset 9)
                graph.initializer.append(ir.serde.serialize_tensor(value.const_value))
        del proto.functions[:]
        for function in model.functions.values():
            proto.functions.append(ir.serde.serialize_function(function))
        return proto

    @classmethod
    def take(cls, model: ir.Model) -> Snapshot:
        order = list(model.graph.initializers)
        detached = detached_proto(model)
        return cls(detached.proto, detached.large, detached.added, order,
                   {id(node): i for i, node in enumerate(model.graph)})

    def restore(self, model: ir.Model) -> None:
        """Make ``model`` what it was when the snapshot was taken."""
        old_graph = model.graph
        restored = ir.serde.deserialize_model(self.proto)
        graph = restored.graph
        # release the original large initializers from the discarded graph (IR < 4 also lists
        # them as inputs; the converted graph may have made them inputs too)
        old_graph.inputs.clear()
        old_graph.outputs.clear()
        for value in self.large:
            old_graph.initializers.pop(value.name, None)
            for user, index in list(value.uses()):  # nodes of the discarded graph
                user.replace_input_with(index, None)
            stand_in = next((v for v in graph.inputs if v.name == value.name), None)
            if stand_in is not None:
                stand_in.replace_all_uses_with(value, replace_graph_outputs=True)
                position = graph.inputs.index(stand_in)
                if value.name in self.added:
                    graph.inputs.pop(position)
                else:  # an initializer that is also a graph input (IR < 4)
                    graph.inputs[position] = value
            graph.register_initializer(value)
        by_name = dict(graph.initializers)
        graph.initializers.clear()
        for name in self.order:
            graph.initializers[name] = by_name[name]
        model.graph = graph
        model.functions.clear()
        model.functions.update(restored.functions)


# onnx's data propagation materializes a broadcast shape's values: a declared dim of 2**40 (a fuzzed
# Mul against a [2**40] input) took 56 s and every byte of memory before a bad_alloc. Past this many
# elements in one declared tensor, inference runs without it (no real graph computes shapes there).
_DATA_PROP_MAX_ELEMENTS = 2**32


def _declares_huge_tensor(graph: onnx.GraphProto | onnx.FunctionProto) -> bool:
    declared = graph.value_info if isinstance(graph, onnx.FunctionProto) else (*graph.input, *graph.output,
                                                                                *graph.value_info)
    for vi in declared:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            count = 1
            for dim in vi.type.tensor_type.shape.dim:
                if dim.HasField("dim_value") and dim.dim_value > 0:
                    count *= dim.dim_value
            if count > _DATA_PROP_MAX_ELEMENTS:
                return True
    for node in graph.node:
        for attr in node.attribute:
            subgraphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            if any(_declares_huge_tensor(g) for g in subgraphs):
                return True
    return False


def declares_huge_tensor(model: ir.Model) -> bool:
    """Whether any value of ``model`` (subgraphs and functions included) declares a static shape
    of more than ``_DATA_PROP_MAX_ELEMENTS`` elements: then onnx's data propagation must not run."""
    from onnx_ir.traversal import RecursiveGraphIterator

    def huge(value: ir.Value | None) -> bool:
        if value is None or value.shape is None:
            return False
        count = 1
        for dim in value.shape:
            if isinstance(dim, int) and dim > 0:
                count *= dim
        return count > _DATA_PROP_MAX_ELEMENTS

    for graph in (model.graph, *model.functions.values()):
        if any(huge(v) for v in (*graph.inputs, *graph.outputs)):
            return True
        for node in RecursiveGraphIterator(graph):
            if any(huge(v) for v in (*node.inputs, *node.outputs)):
                return True
    return False


def infer_shapes(proto: onnx.ModelProto, *, check_type: bool, strict_mode: bool,
                 data_prop: bool = True) -> onnx.ModelProto:
    """onnx's shape inference, with data propagation only where no declared tensor is astronomical
    (see ``_DATA_PROP_MAX_ELEMENTS``)."""
    if data_prop and any(_declares_huge_tensor(g) for g in (proto.graph, *proto.functions)):
        data_prop = False
    return onnx.shape_inference.infer_shapes(proto, check_type=check_type, strict_mode=strict_mode,
                                             data_prop=data_prop)


def infer_types(model: ir.Model, values: list[ir.Value], proto: onnx.ModelProto | None = None) -> None:
    """Set type and shape on each of ``values`` that has no type, from onnx shape inference of
    ``proto`` (default: the model's ``light_proto``)."""
    try:
        inferred = infer_shapes(proto if proto is not None else light_proto(model), check_type=False,
                                strict_mode=False)
    except Exception:  # inference only helps the adapters; without it they refuse what needs types
        return
    found: dict[str, onnx.TypeProto] = {}
    _collect(inferred.graph, found)
    # big models repeat the same few types: each distinct TypeProto is deserialized once (the type
    # object is shared, as onnx-ir types are not mutated in place; every value gets its own shape)
    seen: dict[bytes, tuple[ir.TypeProtocol | None, ir.Shape | None]] = {}
    for value in values:
        if value.type is None and value.name and value.name in found:
            type_proto = found[value.name]
            key = type_proto.SerializeToString()
            if key not in seen:
                seen[key] = _deserialize(type_proto)
            type_, shape = seen[key]
            value.type, value.shape = type_, (shape.copy() if shape is not None else None)


# ops whose outputs have the rank of their first input, whatever the values
_SAME_RANK = {
    "Identity", "Cast", "CastLike", "Split", "Slice", "Transpose", "Concat", "Pad", "Tile", "Resize",
    "Neg", "Abs", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Erf", "Softmax", "LogSoftmax",
    "Hardmax", "Clip", "LeakyRelu", "Elu", "Selu", "Celu", "Gelu", "HardSigmoid", "HardSwish", "Mish",
    "Softplus", "Softsign", "Not", "IsNaN", "IsInf", "Sign", "Floor", "Ceil", "Round", "Reciprocal",
    "CumSum", "ReverseSequence", "Trilu", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh",
    "Asinh", "Acosh", "Atanh", "Dropout", "LRN", "InstanceNormalization", "BatchNormalization",
    "LayerNormalization", "MeanVarianceNormalization", "Shrink", "ThresholdedRelu",
}
# elementwise ops with multidirectional broadcasting: the outputs have the largest input rank
_BROADCAST = {
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "And", "Or", "Xor", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "Max", "Min", "Sum", "Mean", "Where", "PRelu", "BitShift",
    "BitwiseAnd", "BitwiseOr", "BitwiseXor",
}


def fill_ranks(graphs: list[ir.Graph | ir.Function]) -> None:
    """Give a rank (dims unknown) to outputs that shape inference left without a shape, where the op
    fixes it whatever the values: onnx infers no rank for a Split with run-time sizes, for example,
    and every value after it loses the rank that adapters need (negative axes below opset 11)."""
    from onnx_ir.traversal import RecursiveGraphIterator

    for graph in graphs:
        for node in RecursiveGraphIterator(graph):
            if not is_default_domain(node.domain) or all(v.shape is not None for v in node.outputs):
                continue
            rank = _rank_of_outputs(node)
            if rank is None:
                continue
            for value in node.outputs:
                if value.shape is None and (node.op_type != "Dropout" or value is node.outputs[0]):
                    value.shape = ir.Shape([None] * rank)


def _rank_of_outputs(node: ir.Node) -> int | None:
    inputs = [v for v in node.inputs if v is not None]
    ranks = [None if v.shape is None else len(v.shape) for v in inputs]
    if not inputs:
        return None
    if node.op_type in _SAME_RANK:
        return ranks[0]
    if node.op_type in _BROADCAST:
        return None if None in ranks else max(ranks)
    if node.op_type == "Unsqueeze" and ranks[0] is not None:
        axes = node.attributes.get("axes")
        if axes is not None:
            return ranks[0] + len(axes.value)
        if len(inputs) > 1 and inputs[1].shape is not None and len(inputs[1].shape) == 1 \
                and isinstance(inputs[1].shape[0], int):
            return ranks[0] + inputs[1].shape[0]
    if node.op_type == "Reshape" and len(inputs) > 1 and inputs[1].shape is not None \
            and len(inputs[1].shape) == 1 and isinstance(inputs[1].shape[0], int):
        return inputs[1].shape[0]
    return None


def _deserialize(type_proto: onnx.TypeProto) -> tuple[ir.TypeProtocol | None, ir.Shape | None]:
    try:
        return (ir.serde.deserialize_type_proto_for_type(type_proto),
                ir.serde.deserialize_type_proto_for_shape(type_proto))
    except Exception:  # a type onnx-ir can't express: leave it unknown
        return None, None


def checker_error(model: ir.Model | onnx.ModelProto) -> str:
    """The ONNX checker's complaint (full check) about ``model`` (a model, or its light proto), or ""
    when it passes."""
    try:
        onnx.checker.check_model(model if isinstance(model, onnx.ModelProto) else light_proto(model),
                                 full_check=True)
    except Exception as exc:  # ValidationError / InferenceError: reported as a blocker
        return " ".join(str(exc).split())[:300]
    return ""


def infer_dtypes(model: ir.Model) -> dict[str, int]:
    """Element types of every named value, from onnx's shape inference on the weight-less copy
    of ``light_proto`` (the in-memory model is not changed). Empty when inference fails."""
    try:
        proto = light_proto(model)
        inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False)
    except Exception:  # inference is best effort: dtype checks then use what the model declares
        return {}
    out: dict[str, int] = {}
    graphs = [inferred.graph]
    while graphs:
        graph = graphs.pop()
        for info in [*graph.value_info, *graph.input, *graph.output]:
            if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type:
                out[info.name] = info.type.tensor_type.elem_type
        for init in graph.initializer:
            out[init.name] = init.data_type
        for node in graph.node:
            for attr in node.attribute:
                if attr.g.node:
                    graphs.append(attr.g)
                graphs.extend(attr.graphs)
    return out


def type_string(type_: ir.TypeProtocol | None) -> str | None:
    """The ONNX type string ("tensor(float)", "seq(tensor(int64))") of an onnx-ir type."""
    if type_ is None:
        return None
    if isinstance(type_, ir.TensorType):
        return f"tensor({type_.dtype.name.lower()})" if type_.dtype is not None else None
    if isinstance(type_, ir.SequenceType):
        inner = type_string(type_.elem_type)
        return None if inner is None else f"seq({inner})"
    if isinstance(type_, ir.OptionalType):
        inner = type_string(type_.elem_type)
        return None if inner is None else f"optional({inner})"
    if isinstance(type_, ir.SparseTensorType):
        return f"sparse_tensor({type_.dtype.name.lower()})"
    return None


def allowed_types(schema: OpSchema, params: Any, index: int) -> frozenset[str] | None:
    """The type strings ``schema`` allows for formal parameter ``index`` of ``params`` (its inputs or
    outputs); None when unknown or out of range."""
    if not params:
        return None
    param = params[min(index, len(params) - 1)]
    if index >= len(params) and param.option.value != 2:  # not variadic: out of range, count check reports it
        return None
    for tc in schema.type_constraints:
        if tc.type_param_str == param.type_str:
            return frozenset(tc.allowed_type_strs)
    return frozenset([param.type_str])


def check_types(node: ir.Node, schema: OpSchema) -> list[str]:
    problems = []
    for kind, values, params in (("input", node.inputs, schema.inputs), ("output", node.outputs, schema.outputs)):
        for i, v in enumerate(values):
            if v is None:
                continue
            ts = type_string(v.type)
            allowed = allowed_types(schema, params, i)
            if ts is None or allowed is None:
                continue
            if ts not in allowed:
                problems.append(f"{kind} {i} has type {ts}, which {schema.name}-{schema.since_version} "
                                f"does not allow (allowed: {', '.join(sorted(allowed))})")
    return problems
