"""Control flow: If, Loop and Scan.

If: a constant condition inlines the taken branch; otherwise MIL ``cond`` with both branches
translated into its blocks. Loop: a constant trip count with a condition that stays constant
true is unrolled (scan outputs stacked); other loops without scan outputs become MIL
``while_loop``. Scan: a body whose state passes through unchanged and whose ops are element-wise
or reductions is evaluated for every scanned slice at once (the body is batched, as ``vmap``
does), which is how scikit-learn's pairwise distances (skl2onnx's ``cdist``) reach Core ML::

    Before::  Scan(state=X [N, F], scan=T [S, F]) body: ReduceSumSquare(X - t, axes=[1])
    After::   ReduceSumSquare(X - ExpandDims(T, 1) [S, 1, F], axes=[2]) -> [S, N]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.converters.backends.coreml.context import TranslateContext, np_const
from unframe.converters.backends.coreml.ops import translator
from unframe.converters.backends.coreml.ops._util import cast, mb

MAX_UNROLL = 256


def _graph(ctx: TranslateContext, name: str) -> ir.Graph:
    return ctx.node.attributes[name].value


@translator("If")
def if_(ctx: TranslateContext) -> Any:
    then_g, else_g = _graph(ctx, "then_branch"), _graph(ctx, "else_branch")
    known = ctx.const(0)
    if known is not None:
        taken = then_g if bool(np.asarray(known).reshape(-1)[0]) else else_g
        outs = ctx.graph.run_subgraph(taken, ctx.env, [])
        return [mb().identity(x=o) for o in outs]

    def branch(graph: ir.Graph) -> Any:
        def fn() -> Any:
            outs = ctx.graph.run_subgraph(graph, ctx.env, [])
            return tuple(mb().identity(x=o) for o in outs)
        return fn

    pred = ctx.x(0)
    if len(pred.shape or ()) > 0:
        pred = mb().reshape(x=pred, shape=np.zeros((0,), dtype=np.int32))
    if _constant_outputs(then_g) and not _constant_outputs(else_g):
        # MIL's cond takes its output types from the true branch: a constant early return (an
        # empty [0] result, torchvision's "no boxes") would fix the shape of what the computed
        # branch returns. Swapped, the computed branch's types (dims known at run time) hold both.
        pred = mb().logical_not(x=pred)
        then_g, else_g = else_g, then_g
    result = mb().cond(pred=pred, _true_fn=branch(then_g), _false_fn=branch(else_g))
    return list(result) if isinstance(result, (list, tuple)) else [result]


def _constant_outputs(graph: ir.Graph) -> bool:
    """Whether every output of the branch is a constant of the branch (a Constant node or an
    initializer of its own)."""
    def constant(value: ir.Value) -> bool:
        producer = value.producer()
        if producer is not None:
            return producer.op_type == "Constant" and producer.graph is graph
        return value.name in graph.initializers

    return bool(graph.outputs) and all(constant(v) for v in graph.outputs)


def _loop_check(node: ir.Node) -> list[str]:
    body = node.attributes["body"].value
    n_carried = len(node.inputs) - 2
    n_scan = len(body.outputs) - 1 - n_carried
    trip = node.inputs[0] if node.inputs else None
    if n_scan and (trip is None or trip.const_value is None):
        return ["a Loop with scan outputs needs a constant trip count (it is unrolled)"]
    return []


@translator("Loop", check=_loop_check)
def loop(ctx: TranslateContext) -> Any:
    body = _graph(ctx, "body")
    carried = [ctx.x(i) for i in range(2, len(ctx.inputs))]
    n_scan = len(body.outputs) - 1 - len(carried)
    trip = ctx.const(0) if ctx.has(0) else None
    cond = ctx.const(1) if ctx.has(1) else np.array(True)
    if trip is not None and cond is not None and bool(np.asarray(cond).reshape(-1)[0]) \
            and int(np.asarray(trip).reshape(-1)[0]) <= MAX_UNROLL:
        unrolled = _unroll(ctx, body, int(np.asarray(trip).reshape(-1)[0]), carried, n_scan)
        if unrolled is not None:
            return unrolled
    if n_scan:
        raise ctx.err("a Loop with scan outputs must have a constant trip count and condition")
    return _while(ctx, body, carried)


def _unroll(ctx: TranslateContext, body: ir.Graph, trips: int, carried: list[Any],
            n_scan: int) -> list[Any] | None:
    """Returns None when the body's condition is not known at conversion time (the loop may stop
    at an iteration only the input data decides). ONNX keeps the outputs of the iteration whose
    condition turns false, then stops; a condition computed by the last iteration is never read."""
    m = mb()
    scans: list[list[Any]] = [[] for _ in range(n_scan)]
    state = list(carried)
    for i in range(trips):
        outs = ctx.graph.run_subgraph(body, ctx.env, [m.const(val=np.int32(i)), m.const(val=True), *state])
        state = outs[1:1 + len(state)]
        for k, v in enumerate(outs[1 + len(state):]):
            scans[k].append(v)
        if i == trips - 1:
            break
        go = outs[0].val
        if go is None:
            return None
        if not bool(np.asarray(go).reshape(-1)[0]):
            break
    finals = [m.identity(x=v) for v in state]
    stacked = [m.stack(values=vals, axis=0) if vals else None for vals in scans]
    if any(s is None for s in stacked):
        raise ctx.err("a Loop with scan outputs and zero iterations has no CoreML equivalent")
    return finals + stacked


def _while(ctx: TranslateContext, body: ir.Graph, carried: list[Any]) -> list[Any]:
    m = mb()
    limit = cast(ctx.x(0), "int32") if ctx.has(0) else None
    start_cond = ctx.x(1) if ctx.has(1) else m.const(val=True)
    start_cond = m.reshape(x=start_cond, shape=np.zeros((0,), dtype=np.int32)) if start_cond.shape else start_cond

    def cond_fn(i: Any, go: Any, *state: Any) -> Any:
        if limit is None:
            return go
        lim = m.reshape(x=limit, shape=np.zeros((0,), dtype=np.int32)) if limit.shape else limit
        return m.logical_and(x=m.less(x=i, y=lim), y=go)

    def body_fn(i: Any, go: Any, *state: Any) -> Any:
        outs = ctx.graph.run_subgraph(body, ctx.env, [i, go, *state])
        nxt = outs[0]
        nxt = m.reshape(x=nxt, shape=np.zeros((0,), dtype=np.int32)) if nxt.shape else nxt
        return (m.add(x=i, y=np.int32(1)), nxt, *outs[1:1 + len(state)])

    result = m.while_loop(_cond=cond_fn, _body=body_fn, loop_vars=(m.const(val=np.int32(0)), start_cond, *carried))
    return list(result)[2:]


# -- Scan: the body batched over the scanned axis ----------------------------------------------------

SCAN_ELEMENTWISE = frozenset({
    "Identity", "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Abs", "Neg", "Sqrt", "Exp",
    "Log", "Reciprocal", "Relu", "Sigmoid", "Tanh", "Cast", "Erf", "Sign", "Floor", "Ceil",
    "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Where", "Not", "And", "Or",
})
SCAN_REDUCTIONS = frozenset({"ReduceSum", "ReduceSumSquare", "ReduceMean", "ReduceMax",
                             "ReduceMin", "ReduceL1", "ReduceL2", "ReduceProd"})
_SCAN_ORDER_ATTRS = ("scan_input_axes", "scan_input_directions", "scan_output_axes",
                     "scan_output_directions")


def _scan_check(node: ir.Node) -> list[str]:
    body = node.attributes["body"].value
    n_scan = int(node.attributes["num_scan_inputs"].value)
    n_state = len(node.inputs) - n_scan
    out = []
    for name in _SCAN_ORDER_ATTRS:
        a = node.attributes.get(name)
        if a is not None and any(int(v) for v in a.value):
            out.append(f"{name} other than 0 (the batched form scans axis 0 forwards)")
    for i in range(n_state):
        if not _passes_through(body.outputs[i], body.inputs[i]):
            out.append("its state changes between iterations (only a pass-through state is batched)")
            break
    for inner in body:
        if inner.op_type not in SCAN_ELEMENTWISE | SCAN_REDUCTIONS or inner.domain not in ("", "ai.onnx"):
            out.append(f"its body has {inner.op_type}, which is not batched over the scan")
        elif inner.op_type in SCAN_REDUCTIONS and len(inner.inputs) > 1 \
                and inner.inputs[1] is not None and _const_of(inner.inputs[1]) is None:
            out.append(f"its {inner.op_type} takes axes that are not constant")
    return out


def _passes_through(value: ir.Value, source: ir.Value) -> bool:
    while value is not source:
        node = value.producer()
        if node is None or node.op_type != "Identity":
            return False
        value = node.inputs[0]
    return True


def _const_of(value: ir.Value) -> np.ndarray | None:
    if value.const_value is not None:
        return value.const_value.numpy()
    node = value.producer()
    if node is not None and node.op_type == "Constant" and "value" in node.attributes:
        return node.attributes["value"].value.numpy()
    return None


@translator("Scan", check=_scan_check)
def scan(ctx: TranslateContext) -> Any:
    body = _graph(ctx, "body")
    n_scan = int(ctx.attr("num_scan_inputs"))
    n_state = len(ctx.inputs) - n_scan
    m = mb()
    env = dict(ctx.env)
    for name, value in body.initializers.items():
        env[name] = m.const(val=np_const(value.const_value.numpy()))
    batched: dict[str, int] = {}  # a batched value's rank in the body (its axis 0 is the scan)
    for formal, actual in zip(body.inputs, ctx.inputs, strict=False):
        env[formal.name] = actual
    for formal, actual in zip(body.inputs[n_state:], ctx.inputs[n_state:], strict=False):
        batched[formal.name] = len(actual.shape) - 1
    for node in list(body):
        if not any(v is not None and v.name in batched for v in node.inputs):
            ctx.graph.run_node(node, env)
            continue
        _run_batched(ctx, node, env, batched)
    states = [m.identity(x=v) for v in ctx.inputs[:n_state]]
    outs = []
    for value in body.outputs[n_state:]:
        if value.name not in batched:
            raise ctx.err("a Scan output that does not depend on the scanned input is not batched")
        outs.append(m.identity(x=env[value.name]))
    return states + outs


def _run_batched(ctx: TranslateContext, node: ir.Node, env: dict[str, Any],
                 batched: dict[str, int]) -> None:
    """Translate ``node`` on batched inputs: batched values gain size-1 axes after the scan axis
    to line up with the others; reduction axes move one place right."""
    m = mb()
    inputs = [v for v in node.inputs]
    ranks = [batched[v.name] if v.name in batched else len(env[v.name].shape or ())
             for v in inputs if v is not None]
    if node.op_type in SCAN_REDUCTIONS:
        x = inputs[0]
        rank = batched[x.name]
        axes_value = _const_of(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else None
        axes = [int(a) for a in np.asarray(axes_value).reshape(-1)] if axes_value is not None \
            else list(range(rank))
        shifted = [a % rank + 1 for a in axes]
        alias = f"{node.name}__scan_axes"
        env[alias] = m.const(val=np.asarray(shifted, np.int32))
        new_inputs = [ir.Value(name=x.name, type=x.type), ir.Value(name=alias)]
        keep = bool(int(node.attributes["keepdims"].value)) if "keepdims" in node.attributes else True
        out_rank = rank if keep else rank - len(set(shifted))
    else:
        out_rank = max(ranks) if ranks else 0
        new_inputs = []
        for v in inputs:
            if v is None or v.name not in batched or batched[v.name] == out_rank:
                new_inputs.append(None if v is None else ir.Value(name=v.name, type=v.type))
                continue
            alias = f"{v.name}__scan_rank{out_rank}"
            if alias not in env:
                pad = list(range(1, 1 + out_rank - batched[v.name]))
                env[alias] = m.expand_dims(x=env[v.name], axes=pad)
            new_inputs.append(ir.Value(name=alias, type=v.type))
    attrs = [ir.Attr(a.name, a.type, a.value) for a in node.attributes.values()]
    twin = ir.Node("", node.op_type, new_inputs, attrs, name=node.name,
                   outputs=[ir.Value(name=o.name, type=o.type) for o in node.outputs])
    ctx.graph.run_node(twin, env)
    for o in node.outputs:
        batched[o.name] = out_rank
