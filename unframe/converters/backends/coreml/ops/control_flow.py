"""Control flow: If and Loop.

If: a constant condition inlines the taken branch; otherwise MIL ``cond`` with both branches
translated into its blocks. Loop: a constant trip count with a condition that stays constant
true is unrolled (scan outputs stacked); other loops without scan outputs become MIL
``while_loop``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.converters.backends.coreml.context import TranslateContext
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
    result = mb().cond(pred=pred, _true_fn=branch(then_g), _false_fn=branch(else_g))
    return list(result) if isinstance(result, (list, tuple)) else [result]


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
