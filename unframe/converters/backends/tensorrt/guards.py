"""Empty-input guards taken out of If, so that data-dependent shapes reach TensorRT's top level.

TensorRT's builder takes data-dependent shapes (NonZero, NonMaxSuppression and what follows
them) only in the top-level graph ("data-dependent shapes are only allowed in the top-level
scope"). torchvision wraps its batched NMS in ``if boxes.numel() == 0: return
torch.empty((0,), dtype=torch.int64)``, which exports as::

    keep = If(Cast(Equal(ReduceProd(Shape(boxes)), 0)),
              then: Constant(int64[0]),
              else: ... NonMaxSuppression(f(boxes), ...) ... Gather(axis=1) ... Squeeze)

When the else branch provably gives an empty result whenever ``boxes`` is empty,
``EmptyGuardPass`` replaces the If by the else branch's nodes: the two are then the same
function. The proof follows the else branch's output back to ``boxes`` through ops that keep
"no elements" (element-wise and broadcasting ops, views, NonMaxSuppression's selection: no boxes,
no rows; a Gather that leaves the empty axis in place); anything else leaves the If alone.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from unframe.opset import DEFAULT_DOMAINS

ANY_AXIS = -1  # a value known to have no elements, along an axis the proof doesn't follow
ELEMENTWISE = frozenset({"Identity", "Cast", "Neg", "Abs", "Relu", "Sigmoid", "Exp", "Log", "Sqrt",
                         "Floor", "Ceil", "Round", "Not", "Clip"})
BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Min", "Max", "Pow", "Mod", "And", "Or", "Xor",
                          "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Where"})
VIEWS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose"})
MAX_DEPTH = 64


class EmptyGuardPass(ir.passes.InPlacePass):
    """``If(numel(x) == 0, then=<empty constant>, else=g)`` becomes ``g``'s nodes where ``g``'s
    outputs have no elements whenever ``x`` has none (see the module docstring).

    Before::  keep = If(Equal(ReduceProd(Shape(boxes)), 0), then: [], else: NMS(...)...)
    After::   keep = NMS(...)...                  # empty boxes: no rows, as the then-branch
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph, count = model.graph, 0
        for node in list(graph):
            if node.op_type != "If" or node.domain not in DEFAULT_DOMAINS or not node.inputs:
                continue
            guarded = _numel_is_zero(node.inputs[0])
            then_branch, else_branch = (node.attributes.get_graph(k) for k in ("then_branch", "else_branch"))
            if guarded is None or then_branch is None or else_branch is None:
                continue
            if not _empty_constants(then_branch, len(node.outputs)):
                continue
            outputs = list(else_branch.outputs)
            if len(outputs) != len(node.outputs) or any(_zero_axis(v, guarded, 0) is None for v in outputs):
                continue
            nodes = list(else_branch)
            else_branch.remove(nodes)
            for init in list(else_branch.initializers.values()):
                else_branch.initializers.pop(init.name)  # type: ignore[arg-type]
                graph.register_initializer(init)
            else_branch.outputs.clear()
            ir.convenience.replace_nodes_and_values(graph, node, [node], nodes, list(node.outputs), outputs)
            count += 1
        return ir.passes.PassResult(model, modified=bool(count))


def _constant(value: ir.Value | None) -> np.ndarray | None:
    tensor = ir.convenience.get_const_tensor(value) if value is not None else None
    return None if tensor is None else tensor.numpy()


def _producer(value: ir.Value | None, *op_types: str) -> ir.Node | None:
    node = value.producer() if value is not None else None
    if node is None or node.domain not in DEFAULT_DOMAINS or node.op_type not in op_types:
        return None
    return node


def _numel_is_zero(cond: ir.Value | None) -> ir.Value | None:
    """``x`` when ``cond`` is ``numel(x) == 0`` (``Size(x)`` or ``ReduceProd(Shape(x))`` over
    every axis, through casts); else None."""
    while (cast := _producer(cond, "Cast")) is not None:
        cond = cast.inputs[0]
    equal = _producer(cond, "Equal")
    if equal is None or len(equal.inputs) != 2:
        return None
    for count, other in (equal.inputs, equal.inputs[::-1]):
        zero = _constant(other)
        if zero is None or zero.size != 1 or zero.reshape(-1)[0] != 0:
            continue
        while (cast := _producer(count, "Cast")) is not None:
            count = cast.inputs[0]
        if (size := _producer(count, "Size")) is not None:
            return size.inputs[0]
        product = _producer(count, "ReduceProd")
        if product is None or len(product.inputs) > 1 or "axes" in product.attributes \
                or product.attributes.get_int("noop_with_empty_axes", 0):
            continue
        shape = _producer(product.inputs[0], "Shape")
        if shape is not None and "start" not in shape.attributes and "end" not in shape.attributes:
            return shape.inputs[0]
    return None


def _empty_constants(branch: ir.Graph, outputs: int) -> bool:
    if len(branch.outputs) != outputs:
        return False
    arrays = [_constant(v) for v in branch.outputs]
    return all(a is not None and a.size == 0 for a in arrays)


def _zero_axis(value: ir.Value | None, x: ir.Value, depth: int) -> int | None:
    """An axis along which ``value`` has no elements whenever ``x`` has none (``ANY_AXIS``: some
    axis), or None when that isn't shown."""
    if value is None or depth > MAX_DEPTH:
        return None
    if value is x:
        return ANY_AXIS
    node = value.producer()
    if node is None or node.domain not in DEFAULT_DOMAINS:
        return None
    op = node.op_type
    if op in ELEMENTWISE or op in VIEWS:
        return ANY_AXIS if _zero_axis(node.inputs[0], x, depth + 1) is not None else None
    if op in BROADCASTING:
        shown = any(_zero_axis(v, x, depth + 1) is not None for v in node.inputs)
        return ANY_AXIS if shown else None
    if op == "NonMaxSuppression" and value is node.outputs[0]:
        return 0 if _zero_axis(node.inputs[0], x, depth + 1) is not None else None  # no boxes, no rows
    if op == "Gather":
        return _gather(node, x, depth)
    return None


def _gather(node: ir.Node, x: ir.Value, depth: int) -> int | None:
    data, indices = node.inputs[0], node.inputs[1]
    axis = node.attributes.get_int("axis", 0)
    zero = _zero_axis(data, x, depth + 1)
    if zero is None or zero == ANY_AXIS or data is None or indices is None:
        return None
    if axis < 0:
        if data.shape is None:
            return None
        axis += len(data.shape)
    if zero < axis:
        return zero
    if zero > axis and indices.shape is not None:
        return zero - 1 + len(indices.shape)
    return None  # the empty axis is the gathered one: the output's size there is the indices'
