"""Fold rank-6 Reshape -> Transpose(s) -> Reshape chains to rank 5, for CoreML (rank <= 5).

Swin's window partition (and its reverse) views a feature map as six axes, swaps two, and views
the result again::

    x: [B, H, W, C] -> Reshape [B, H/w, w, W/w, w, C] -> Transpose (0, 1, 3, 2, 4, 5)
                    -> Reshape [B * windows, w, w, C]

Two axes the Transpose keeps side by side and in order (here 0 and 1) can be one axis: the
elements are in the same order either way. The pass rewrites the chain as::

    x -> Reshape [B * H/w, w, W/w, w, C] -> Transpose (0, 2, 1, 3, 4) -> Reshape [B * windows, w, w, C]

A perm that keeps no two axes together (MaxViT's window partition, (0, 2, 4, 3, 5, 1)) is two
perms that each keep two, applied to rank-5 views of the same elements, with a Reshape between
them (``_fold_in_two``; constant targets). Transposes in a row are composed first, and a Gather
with n-D constant indices that makes rank 6 (torch's unfold) becomes a Gather of the flat indices
viewed by a Reshape (``_gather_as_view``), which the fold then takes as its first Reshape.

The first Reshape's target may be computed at run time (a dynamic batch, padded sizes): the merged
entry is then computed in the graph too (``Mul`` of the two entries, ``-1`` kept as ``-1``).
Anything the pass can't prove (a target entry of 0, which copies an input dim unless
``allowzero`` is set, where the merge would move it; a value used elsewhere) is left alone, and the translator's rank check names
it as a blocker. The backend's parity check (onnxruntime on the original graph against the MIL
evaluator on the package) proves each rewrite on the model's own inputs.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx_ir as ir

from unframe.opset import is_default_domain

MAX_RANK = 5


def fold_high_rank_windows(model: ir.Model) -> int:
    """Rewrite every foldable rank-6 chain of ``model``'s main graph in place; returns how many."""
    from unframe.version_converter.types import infer_types

    graph = model.graph
    untyped = [n.inputs[1] for n in graph if _is(n, "Reshape") and len(n.inputs) > 1
               and n.inputs[1] is not None and n.inputs[1].shape is None and n.inputs[1].const_value is None]
    if untyped:  # a run-time target's length (TorchScript exports carry no value_info)
        infer_types(model, untyped)
    shapeless = [n.inputs[0] for n in graph if _is(n, "Gather") and len(n.inputs) > 1 and n.inputs[0] is not None
                 and n.inputs[0].shape is None and n.inputs[1] is not None and n.inputs[1].const_value is not None
                 and n.inputs[1].const_value.numpy().ndim >= 2]
    if shapeless:  # gathers of n-D window offsets (torch's unfold): their data's static shape
        infer_types(model, shapeless)
    for node in list(graph):
        _gather_as_view(graph, node)
    folded = 0
    for node in list(graph):
        if _fold(graph, node):
            folded += 1
    views = [n for n in graph if any(_is(n, op) for op in _VIEWS)]
    untyped = [v for n in views for v in (n.inputs[0] if n.inputs else None, n.outputs[0])
               if v is not None and v.type is None]
    if any((_rank(n.outputs[0]) or 0) > MAX_RANK for n in views) and untyped:
        infer_types(model, untyped)  # the chains' shapes: tf2onnx's graphs carry few
    for node in views:
        if node.graph is graph and _collapse_views(graph, node):
            folded += 1
    return folded


# -- chains of views through rank 6 ------------------------------------------------------------
# tf2onnx's transpose optimizer leaves, around Keras ConvNeXt's LayerNorm, views that pass
# through rank 6 and come back (every op keeps the elements' order)::
#
#     m[N, 1, H, W] -> Unsqueeze(0) -> Reshape [1, 1, -1, 0, 0, 1] -> Squeeze(0)
#                   -> Reshape [-1, 1, 0, 0]                         (= m, viewed as [N, 1, H, W])
#
# The chain is one Reshape of its first input, when the last shape can be said in one target:
# each of its dims a constant, the chain's input dim at the same position (a 0 entry), or the one
# left to infer (-1).

_VIEWS = ("Reshape", "Unsqueeze", "Squeeze")


def _collapse_views(graph: ir.Graph, high: ir.Node) -> bool:
    if not any(_is(high, op) for op in _VIEWS) or _rank(high.outputs[0]) is None \
            or _rank(high.outputs[0]) <= MAX_RANK:
        return False
    chain = [high]
    while True:  # back to the chain's start: views whose output only the next view reads
        data = chain[0].inputs[0] if chain[0].inputs else None
        before = data.producer() if data is not None else None
        if before is None or not any(_is(before, op) for op in _VIEWS) or _only_user(data, graph) is not chain[0]:
            break
        chain.insert(0, before)
    while True:  # on through single-use views: the longest chain that ends at rank <= 5 and
        after = _only_user(chain[-1].outputs[0], graph)  # one target says, wins
        if after is None or not any(_is(after, op) for op in _VIEWS):
            break
        chain.append(after)
    start = chain[0].inputs[0]
    if start is None or start.shape is None:
        return False
    dims: list[object] | None = [d if isinstance(d, int) else ("in", i) for i, d in enumerate(start.shape)]
    best: tuple[int, list[int]] | None = None
    for k, node in enumerate(chain):
        dims = _view_dims(node, dims) if dims is not None else None
        if dims is None:
            break
        target = _one_target(dims) if len(dims) <= MAX_RANK and chain.index(high) <= k else None
        if target is not None:
            best = (k, target)
    if best is None:
        return False
    chain, target = chain[:best[0] + 1], best[1]
    end = chain[-1].outputs[0]
    value = ir.Value(name=f"{high.name or 'view'}_collapsed_target", const_value=ir.tensor(np.array(target, np.int64)),
                     type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([len(target)]))
    graph.register_initializer(value)
    reshape = ir.Node("", "Reshape", [start, value], name=f"{high.name or 'view'}_collapsed")
    reshape.outputs[0].name = f"{end.name}_collapsed"
    reshape.outputs[0].type, reshape.outputs[0].shape = end.type, end.shape
    graph.insert_after(chain[-1], reshape)
    end.replace_all_uses_with(reshape.outputs[0])
    for node in reversed(chain):
        graph.remove(node, safe=True)
    return True


# -- gathers with 2-D indices -------------------------------------------------------------------
# torch's unfold (im2col) gathers the window offsets with [kernel, blocks] indices, one spatial
# axis at a time: the second Gather makes [N, C, k, L, k, L], rank 6, then a Transpose and a
# Reshape make [N, C * k * k, L * L]. A Gather with constant n-D indices is a Gather with them
# flattened, viewed::
#
#     Gather(x [N, C, k, L, W], idx [k, L], axis=4)
#       == Reshape(Gather(x, idx.flatten(), axis=4) [N, C, k, L, k * L], [N, C, k, L, k, L])
#
# which the fold below then takes as its rank-6 Reshape.

def _gather_as_view(graph: ir.Graph, node: ir.Node) -> bool:
    if not _is(node, "Gather") or len(node.inputs) < 2:
        return False
    data, indices = node.inputs[0], node.inputs[1]
    if data is None or indices is None or indices.const_value is None or data.shape is None:
        return False
    if node.outputs[0] in graph.outputs:
        return False
    idx = indices.const_value.numpy()
    dims = list(data.shape)
    if idx.ndim < 2 or len(dims) - 1 + idx.ndim <= MAX_RANK or not all(isinstance(d, int) for d in dims):
        return False
    attr = node.attributes.get("axis")
    axis = (int(attr.as_int()) if attr is not None else 0) % len(dims)
    flat = ir.Value(name=f"{indices.name or 'indices'}_flat", const_value=ir.tensor(idx.reshape(-1)),
                    type=indices.type, shape=ir.Shape([int(idx.size)]))
    graph.register_initializer(flat)
    gather = ir.node("Gather", [data, flat], attributes={"axis": axis}, name=f"{node.name or 'gather'}_flat")
    gather.outputs[0].name = f"{node.outputs[0].name}_flat"
    target = dims[:axis] + list(idx.shape) + dims[axis + 1:]
    view = ir.node("Reshape", [gather.outputs[0], _const_target(graph, node, target, "view")],
                   name=f"{node.name or 'gather'}_view")
    graph.insert_after(node, [gather, view])
    out = node.outputs[0]
    view.outputs[0].name, view.outputs[0].type = f"{out.name}_view", out.type
    out.replace_all_uses_with(view.outputs[0])
    graph.remove(node, safe=True)
    return True


def _rank(value: ir.Value) -> int | None:
    """The value's rank: from its shape, else from the view that makes it (a constant target's
    length; its input's rank plus or minus constant axes)."""
    if value.shape is not None:
        return len(value.shape)
    node = value.producer()
    if node is None or not node.inputs:
        return None
    if _is(node, "Reshape"):
        return _target_length(node.inputs[1] if len(node.inputs) > 1 else None)
    axes = _const_ints(node, 1) if _is(node, "Unsqueeze") or _is(node, "Squeeze") else None
    below = _rank(node.inputs[0]) if axes is not None and node.inputs[0] is not None else None
    if below is None or axes is None:
        return None
    return below + len(axes) if _is(node, "Unsqueeze") else below - len(axes)


def _const_ints(node: ir.Node, index: int) -> list[int] | None:
    value = node.inputs[index] if len(node.inputs) > index else None
    if value is None or value.const_value is None:
        return None
    return [int(v) for v in value.const_value.numpy().reshape(-1)]


def _view_dims(node: ir.Node, dims: list[object]) -> list[object] | None:
    """The dims after ``node``: ints, ("in", k) for the chain input's dim k, "rest" for one
    inferred dim; None when the node's effect isn't known (run-time axes or targets)."""
    if _is(node, "Unsqueeze") or _is(node, "Squeeze"):
        axes = _const_ints(node, 1)
        if axes is None:
            return None
        if _is(node, "Unsqueeze"):
            rank = len(dims) + len(axes)
            axes = sorted(a % rank for a in axes)
            out = list(dims)
            for a in axes:
                out.insert(a, 1)
            return out
        rank = len(dims)
        drop = {a % rank for a in axes}
        return None if any(dims[a] != 1 and dims[a] != "rest" and not isinstance(dims[a], tuple)
                           for a in drop) else [d for i, d in enumerate(dims) if i not in drop]
    target = _const_ints(node, 1)
    if target is None or _allowzero(node):
        return None
    out: list[object] = []
    for i, t in enumerate(target):
        if t > 0:
            out.append(t)
        elif t == 0 and i < len(dims):
            out.append(dims[i])
        elif t == -1:
            out.append("rest")
        else:
            return None
    return out if sum(d == "rest" for d in out) <= 1 else None


def _one_target(dims: list[object]) -> list[int] | None:
    """One Reshape target of the chain's input giving ``dims``: a constant, 0 for the input's
    dim at the same position, -1 for the one to infer (at most one unknown)."""
    target: list[int] = []
    for i, d in enumerate(dims):
        if isinstance(d, int) and d > 0:
            target.append(d)
        elif d == ("in", i):
            target.append(0)
        else:
            target.append(-1)
    return target if target.count(-1) <= 1 else None


def _fold(graph: ir.Graph, first: ir.Node) -> bool:
    if not _is(first, "Reshape"):
        return False
    target = first.inputs[1] if len(first.inputs) > 1 else None
    rank = _target_length(target)
    if rank is None or rank <= MAX_RANK:
        return False
    found = _transposes_then_reshape(graph, first, rank)
    if found is None:
        return False
    transposes, perm, last = found
    axis = _kept_pair(perm)
    if axis is not None:
        if _copies_dims(last, axis):
            return False
        merged_target = _merged_target(graph, first, target, axis, rank)
        if merged_target is None:
            return False
        _join(graph, transposes)
        transpose = transposes[0]
        first.replace_input_with(1, merged_target)
        transpose.attributes["perm"] = ir.AttrInt64s("perm", _without(perm, axis))
        first.outputs[0].shape = None  # re-inferred downstream; the old rank is wrong now
        transpose.outputs[0].shape = None
        return True
    return _fold_in_two(graph, first, target, transposes, perm, last, rank)


def _transposes_then_reshape(graph: ir.Graph, first: ir.Node, rank: int
                             ) -> tuple[list[ir.Node], list[int], ir.Node] | None:
    """The Transposes (one or more, each read once) between ``first`` and the Reshape that
    leaves rank 6, their composed perm, and that Reshape."""
    transposes: list[ir.Node] = []
    perm = list(range(rank))
    node = _only_user(first.outputs[0], graph)
    while node is not None and _is(node, "Transpose"):
        attr = node.attributes.get("perm")
        if attr is None:
            return None
        step = [int(p) for p in attr.as_ints()]
        if sorted(step) != list(range(rank)):
            return None
        perm = [perm[p] for p in step]
        transposes.append(node)
        node = _only_user(node.outputs[0], graph)
    if not transposes or node is None or not _is(node, "Reshape"):
        return None
    return transposes, perm, node


def _join(graph: ir.Graph, transposes: list[ir.Node]) -> None:
    """Several Transposes in a row become the first (the caller sets its composed perm)."""
    for extra in transposes[1:]:
        extra.outputs[0].replace_all_uses_with(transposes[0].outputs[0])
        graph.remove(extra, safe=True)


def _without(perm: list[int], axis: int) -> list[int]:
    """``perm`` with input axes ``axis`` and ``axis + 1`` (side by side in its output) as one."""
    return [p if p <= axis else p - 1 for p in perm if p != axis + 1]


def _two_steps(perm: list[int]) -> tuple[list[int], list[int]] | None:
    """(R, Q) with ``perm`` == R then Q, each keeping two axes side by side and in order
    (so each is a Transpose of a rank-5 view): MaxViT's window partition (0, 2, 4, 3, 5, 1)
    keeps none, but is (0, 1, 2, 4, 3, 5), which keeps 0 and 1, then a perm keeping 4 and 3."""
    for first in itertools.permutations(range(len(perm))):
        r = list(first)
        if _kept_pair(r) is None:
            continue
        q = [r.index(p) for p in perm]
        if _kept_pair(q) is not None:
            return r, q
    return None


def _fold_in_two(graph: ir.Graph, first: ir.Node, target: ir.Value, transposes: list[ir.Node],
                 perm: list[int], last: ir.Node, rank: int) -> bool:
    """A rank-6 perm that keeps no two axes together, as two Transposes of rank-5 views with a
    Reshape (a view of the same elements) between them::

        x -> Reshape [d0..d5] -> Transpose (perm) -> Reshape ...
        x -> Reshape [d0..d5 with R's pair merged] -> Transpose R'
          -> Reshape [the dims in R's order, with Q's pair merged] -> Transpose Q' -> Reshape ...
    """
    steps = _two_steps(perm)
    if steps is None or target.const_value is None:
        return False
    r, q = steps
    values = [int(v) for v in target.const_value.numpy().reshape(-1)]
    if (0 in values and not _allowzero(first)) or values.count(-1) > 1:
        return False  # a 0 copies an input dim that the merges would move
    a, b = _kept_pair(r), _kept_pair(q)
    assert a is not None and b is not None
    if _copies_dims(last, q.index(b)):
        return False
    between = [values[p] for p in r]  # the rank-6 dims after R
    first.replace_input_with(1, _const_target(graph, first, _merge_at(values, a), "rank5_in"))
    _join(graph, transposes)
    transpose = transposes[0]
    transpose.attributes["perm"] = ir.AttrInt64s("perm", _without(r, a))
    view = ir.node("Reshape", [transpose.outputs[0], _const_target(graph, first, _merge_at(between, b), "rank5_mid")],
                   attributes={"allowzero": int(0 in between)}, name=f"{transpose.name or 'transpose'}_view")
    view.outputs[0].name = f"{transpose.outputs[0].name}_view"
    second = ir.node("Transpose", [view.outputs[0]], attributes={"perm": _without(q, b)},
                     name=f"{transpose.name or 'transpose'}_then")
    second.outputs[0].name = f"{transpose.outputs[0].name}_then"
    graph.insert_after(transpose, [view, second])
    last.replace_input_with(0, second.outputs[0])
    first.outputs[0].shape = None
    transpose.outputs[0].shape = None
    return True


def _merge_at(values: list[int], axis: int) -> list[int]:
    a, b = values[axis], values[axis + 1]
    return values[:axis] + [-1 if -1 in (a, b) else a * b] + values[axis + 2:]


def _const_target(graph: ir.Graph, near: ir.Node, values: list[int], tag: str) -> ir.Value:
    value = ir.Value(name=f"{near.name or 'reshape'}_{tag}_target", const_value=ir.tensor(np.array(values, np.int64)),
                     type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([len(values)]))
    graph.register_initializer(value)
    return value


def _is(node: ir.Node, op: str) -> bool:
    return node.op_type == op and is_default_domain(node.domain)


def _allowzero(node: ir.Node) -> bool:
    attr = node.attributes.get("allowzero")
    return attr is not None and int(attr.as_int()) != 0


def _target_length(target: ir.Value | None) -> int | None:
    if target is None:
        return None
    if target.const_value is not None:
        return int(target.const_value.numpy().size)
    shape = target.shape
    if shape is not None and len(shape) == 1 and isinstance(shape[0], int):
        return shape[0]
    return None


def _only_user(value: ir.Value, graph: ir.Graph) -> ir.Node | None:
    uses = list(value.uses())
    if len(uses) != 1 or value in graph.outputs:
        return None
    user, index = uses[0]
    return user if index == 0 else None


def _kept_pair(perm: list[int]) -> int | None:
    """The first input axis ``a`` such that the output has ``a`` then ``a + 1`` side by side."""
    for k in range(len(perm) - 1):
        if perm[k + 1] == perm[k] + 1:
            return perm[k]
    return None


def _copies_dims(last: ir.Node, axis: int) -> bool:
    """The last Reshape's target has a 0 (copy the input's dim) at or after the merged axis,
    whose input dims move by one: or a run-time target, which might."""
    target = last.inputs[1] if len(last.inputs) > 1 else None
    if target is None:
        return True
    if _allowzero(last):
        return False  # a 0 is a 0-sized dim there, not a copy
    if target.const_value is None:
        return False  # a run-time target: exporters write actual sizes there (parity checks it)
    values = target.const_value.numpy().reshape(-1)
    return bool(np.any(values[axis:] == 0))


def _merged_target(graph: ir.Graph, first: ir.Node, target: ir.Value, axis: int, rank: int
                   ) -> ir.Value | None:
    if target.const_value is not None:
        values = [int(v) for v in target.const_value.numpy().reshape(-1)]
        a, b = values[axis], values[axis + 1]
        if (a == 0 or b == 0) and not _allowzero(first):
            return None  # copies input dims: the merged one would copy the wrong dim
        merged = -1 if -1 in (a, b) else a * b
        new = np.array(values[:axis] + [merged] + values[axis + 2:], dtype=np.int64)
        value = ir.Value(name=f"{first.name or 'reshape'}_rank{rank - 1}_target",
                         const_value=ir.tensor(new), type=ir.TensorType(ir.DataType.INT64),
                         shape=ir.Shape([rank - 1]))
        graph.register_initializer(value)
        return value
    # run-time: Concat(target[:axis], Max(target[axis] * target[axis+1], -1), target[axis+2:])
    tape = _Tape(graph, first, f"{first.name or 'reshape'}_rank{rank - 1}")
    pieces = []
    if axis > 0:
        pieces.append(tape.slice(target, 0, axis))
    product = tape.op("Mul", [tape.slice(target, axis, axis + 1), tape.slice(target, axis + 1, axis + 2)])
    pieces.append(tape.op("Max", [product, tape.const(np.array([-1], np.int64))]))  # -1 * n -> -1
    if axis + 2 < rank:
        pieces.append(tape.slice(target, axis + 2, rank))
    out = tape.op("Concat", pieces, axis=0) if len(pieces) > 1 else pieces[0]
    out.type, out.shape = ir.TensorType(ir.DataType.INT64), ir.Shape([rank - 1])
    return out


class _Tape:
    """Nodes inserted before ``anchor``, named after ``prefix``."""

    def __init__(self, graph: ir.Graph, anchor: ir.Node, prefix: str) -> None:
        self.graph, self.anchor, self.prefix, self.count = graph, anchor, prefix, 0

    def _name(self) -> str:
        self.count += 1
        return f"{self.prefix}_{self.count}"

    def const(self, array: np.ndarray) -> ir.Value:
        value = ir.Value(name=self._name(), const_value=ir.tensor(array),
                         type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape(list(array.shape)))
        self.graph.register_initializer(value)
        return value

    def op(self, op_type: str, inputs: list[ir.Value], **attrs: int) -> ir.Value:
        name = self._name()
        node = ir.Node("", op_type, inputs, attributes=[ir.AttrInt64(k, v) for k, v in attrs.items()],
                       name=name)
        node.outputs[0].name = f"{name}_out"
        node.outputs[0].type = ir.TensorType(ir.DataType.INT64)
        self.graph.insert_before(self.anchor, node)
        return node.outputs[0]

    def slice(self, value: ir.Value, start: int, end: int) -> ir.Value:
        out = self.op("Slice", [value, self.const(np.array([start], np.int64)),
                                self.const(np.array([end], np.int64))])
        out.shape = ir.Shape([end - start])
        return out
