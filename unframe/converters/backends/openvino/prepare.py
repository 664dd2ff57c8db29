"""Rewrites of the ONNX graph, exact in what it computes, that OpenVINO's ONNX frontend needs.

``hoist_loop_invariants``: a Loop state that the body hands back unchanged (body output ``1+k``
is body input ``2+k``: tf2onnx writes a Keras RNN's weight handles so) becomes a value the body
reads from the outer scope. OpenVINO's frontend refuses such a Loop ("canonical inputs size (10)
does not match the sum of loop carried dependencies and two mandatory inputs (7)", measured on
the reference zoo's Keras GRU); without the pass-through states it converts it exactly.

Before::

    h, w_out, ys = Loop(M, cond, h0, w)   body(i, c, h_in, w_in) -> (c, h_next, w_in, y)

After::

    h, ys = Loop(M, cond, h0)             body(i, c, h_in) -> (c, h_next, y), reading w directly
    (readers of w_out read w)
"""

from __future__ import annotations

import onnx_ir as ir


def prepare(model: ir.Model) -> tuple[ir.Model, list[str]]:
    """``model`` (a copy, when anything is rewritten) with the rewrites applied, and notes."""
    loops = [n for n in ir.traversal.RecursiveGraphIterator(model.graph) if _is_loop(n) and _invariants(n)]
    if not loops:
        return model, []
    model = model.clone()
    hoisted = 0
    for node in [n for n in ir.traversal.RecursiveGraphIterator(model.graph) if _is_loop(n)]:
        hoisted += hoist_loop_invariants(node)
    return model, [f"{hoisted} Loop state(s) the body passes through unchanged read from the outer "
                   "scope instead (OpenVINO's ONNX frontend refuses such a Loop)"]


def _is_loop(node: ir.Node) -> bool:
    return node.op_type == "Loop" and node.domain in ("", "ai.onnx") and "body" in node.attributes


def _invariants(node: ir.Node) -> list[int]:
    """Carried states ``k`` the body returns as it received them."""
    body = node.attributes["body"].value
    carried = len(node.inputs) - 2
    return [k for k in range(carried)
            if 2 + k < len(body.inputs) and 1 + k < len(body.outputs)
            and body.outputs[1 + k] is body.inputs[2 + k] and node.inputs[2 + k] is not None]


def hoist_loop_invariants(node: ir.Node) -> int:
    """Rewrite one Loop (see the module docstring); returns how many states were hoisted."""
    invariant = set(_invariants(node))
    if not invariant:
        return 0
    graph = node.graph
    body = node.attributes["body"].value
    carried = len(node.inputs) - 2
    inner = {k: body.inputs[2 + k] for k in invariant}
    body_inputs = [v for i, v in enumerate(body.inputs) if i - 2 not in invariant]
    body_outputs = [v for i, v in enumerate(body.outputs) if i - 1 not in invariant]
    body.inputs.clear()
    body.inputs.extend(body_inputs)
    body.outputs.clear()
    body.outputs.extend(body_outputs)
    for k, value in inner.items():
        value.replace_all_uses_with(node.inputs[2 + k])  # the body reads the outer value
    inputs = [v for i, v in enumerate(node.inputs) if i - 2 not in invariant]
    kept = [i for i in range(len(node.outputs)) if not (i < carried and i in invariant)]
    loop = ir.Node(node.domain, "Loop", inputs, attributes=[node.attributes["body"]],
                   num_outputs=len(kept), name=node.name, version=node.version)
    graph.insert_before(node, loop)
    for new, old_index in zip(loop.outputs, kept, strict=True):
        old = node.outputs[old_index]
        name, old.name = old.name, None
        old.replace_all_uses_with(new, replace_graph_outputs=True)
        new.name, new.type, new.shape = name, old.type, old.shape
    for k in sorted(invariant):  # the final value of a pass-through state is its initial value
        old = node.outputs[k]
        if old.is_graph_output():
            same = ir.node("Identity", [node.inputs[2 + k]])
            graph.insert_before(node, same)
            same.outputs[0].name, old.name = old.name, None
            same.outputs[0].type, same.outputs[0].shape = old.type, old.shape
            old.replace_all_uses_with(same.outputs[0], replace_graph_outputs=True)
        else:
            old.replace_all_uses_with(node.inputs[2 + k])
    graph.remove(node, safe=True)
    return len(invariant)


__all__ = ["hoist_loop_invariants", "prepare"]
