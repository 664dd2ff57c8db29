"""Expand a node through its ONNX function body, so an op can reach opsets older than itself.

Before (downgrade of Gelu-20 to opset 17)::

    y = Gelu(x, approximate="none")

After (the schema's body, then converted on by the walker)::

    t0 = Constant(); t1 = Div(x, sqrt2); t2 = Erf(t1); ... y = Mul(x, ...)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import onnx
import onnx_ir as ir

from unframe import opset as facts
from unframe.version_converter.context import Refused, replace_node_outputs

if TYPE_CHECKING:
    from onnx.defs import OpSchema

    from unframe.version_converter.walker import Walker


def function_body(node: ir.Node, schema: OpSchema) -> onnx.FunctionProto:
    """The schema's body for ``node`` at the oldest opset it is written for."""
    if schema.has_function:
        versions = sorted(schema.function_opset_versions) or [schema.since_version]
        return onnx.FunctionProto.FromString(schema.get_function_with_opset_version(versions[0]))
    if schema.has_context_dependent_function:
        types = []
        for v in node.inputs:
            if v is None:
                types.append(onnx.TypeProto().SerializeToString())
                continue
            type_ = _type_of(v)
            if type_ is None:
                raise Refused(f"expanding {node.op_type} needs the type of input {v.name!r}")
            types.append(ir.serde.serialize_type(type_).SerializeToString())
        node_bytes = ir.serde.serialize_node(node).SerializeToString()
        versions = sorted(schema.context_dependent_function_opset_versions) or [schema.since_version]
        for version in versions:
            try:
                raw = schema.get_context_dependent_function_with_opset_version(version, node_bytes, types)
            except Exception as exc:  # the body builder rejects this node (e.g. an unsupported dtype)
                raise Refused(f"{node.op_type} has no function body for this node: {exc}") from exc
            if raw:
                return onnx.FunctionProto.FromString(raw)
        raise Refused(f"{node.op_type} has no function body for this node")
    raise Refused(f"{node.op_type}-{schema.since_version} has no function body to expand below opset "
                  f"{schema.since_version}")


def _type_of(value: ir.Value) -> ir.TypeProtocol | None:
    """The value's type, or the type of the tensor when a Constant (e.g. from an expansion) makes it."""
    if value.type is not None:
        return value.type
    producer = value.producer()
    if producer is not None and producer.op_type == "Constant" and "value" in producer.attributes:
        return ir.TensorType(producer.attributes["value"].value.dtype)
    if producer is not None and producer.op_type == "Cast" and "to" in producer.attributes:
        return ir.TensorType(ir.DataType(producer.attributes["to"].value))
    return None


def _attribute(proto: onnx.AttributeProto, node: ir.Node, schema: OpSchema) -> ir.Attr | None:
    if proto.ref_attr_name:
        mine = node.attributes.get(proto.ref_attr_name)
        if mine is not None:
            return ir.Attr(proto.name, mine.type, mine.value)
        default = schema.attributes.get(proto.ref_attr_name)
        if default is None or default.default_value is None or default.default_value.type == 0:
            return None
        copied = onnx.AttributeProto()
        copied.CopyFrom(default.default_value)
        copied.name = proto.name
        return ir.serde.deserialize_attribute(copied)
    if proto.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
        raise Refused("function bodies with subgraphs are not expanded")
    return ir.serde.deserialize_attribute(proto)


def expand(node: ir.Node, schema: OpSchema, walker: Walker) -> list[ir.Node]:
    """Replace ``node`` by its function body; return the new nodes (registered with the walker)."""
    body = function_body(node, schema)
    opset = facts.main_opset(body, default=schema.since_version)
    if any(not facts.is_default_domain(n.domain) for n in body.node):
        raise Refused(f"{node.op_type}'s function body uses another domain")
    values: dict[str, ir.Value | None] = {"": None}
    for name, value in zip(body.input, node.inputs, strict=False):
        values[name] = value
    for name in body.input[len(node.inputs):]:
        values[name] = None
    new_nodes = []
    for proto in body.node:
        attrs = [a for a in (_attribute(p, node, schema) for p in proto.attribute) if a is not None]
        inputs = [values.get(n) if n else None for n in proto.input]
        missing = [n for n in proto.input if n and n not in values]
        if missing:
            raise Refused(f"{node.op_type}'s function body refers to unknown values {missing}")
        new = ir.Node("", proto.op_type, inputs, attrs, num_outputs=len(proto.output),
                      name=walker.fresh_name(f"{node.name or node.op_type}_{proto.op_type}"))
        for out_name, out in zip(proto.output, new.outputs, strict=False):
            out.name = walker.fresh_name(f"{new.name}_{out_name}")
            values[out_name] = out
        new_nodes.append(new)
    outputs = [values.get(n) for n in body.output]
    node.graph.insert_before(node, new_nodes)
    for new in new_nodes:
        walker.register_new(new, opset)
    replace_node_outputs(node, outputs)
    return new_nodes
