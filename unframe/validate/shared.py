"""Parity of a graph edit that left most nodes as they were, on a model whose weights are large:
the weights loaded once.

An opset conversion rewrites a few nodes (those whose op changed between the two opsets) and keeps
the rest, with the same inputs, attributes and operator schema. A node kept that way, all of whose
inputs are computed the same way in both graphs, computes the same values in both: onnxruntime
runs it with the same kernel. The nodes that satisfy this from the graph inputs on are the
*shared prefix*; the others (converted, or downstream of one) are the *rest*. Both graphs agree
exactly wherever the shared prefix computes, so parity needs the source graph run once (the
reference, which also hands over the values where the rest starts) and the rest run on those
values (the candidate)::

    before (opset 17):  x -> MatMul(W0) -> Softmax-13 -> MatMul(W1) -> Reduce*(axes attr) -> y
    after  (opset 21):  x -> MatMul(W0) -> Softmax-13 -> MatMul(W1) -> Reduce*(axes input) -> y
                        `---------- shared prefix: run once -------'  `------ rest -------'
    reference: the before graph, with the boundary value (MatMul(W1)'s output) as an extra output
    candidate: the rest alone (Reduce*), fed the boundary value: no W0, no W1

When the rest reads large weights itself, the reference runs every known feed first and closes
its session before the rest's opens: one session's weights resident at a time. A node holding a
subgraph (If, Loop, Scan) is never shared; it is run again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from unframe.errors import ConversionError, UnframeError
from unframe.validate.deferred import Deferred
from unframe.validate.runner import Runner, TensorSpec

MAX_CACHED = 4  # feeds whose reference outputs are kept for the candidate side
LARGE_WEIGHTS = 256 << 20  # a model's weights from this size on are loaded once for parity


@dataclass
class Cut:
    """Where the rest starts: the boundary values (computed by the shared prefix, read by the
    rest), the graph outputs the prefix computes itself, and the rest's own weights."""

    shared: int  # nodes of the after-graph in the shared prefix
    rest: int  # the others
    boundary: list[str] = field(default_factory=list)
    prefix_outputs: list[str] = field(default_factory=list)
    rest_weight_bytes: int = 0

    def describe(self) -> str:
        return (f"{self.shared} node(s) unchanged with the same operator schemas (run once, in the "
                f"reference), {self.rest} converted or downstream of one (run again on the "
                f"reference's values at {len(self.boundary)} boundary value(s))")


def _opsets(model: ir.Model) -> dict[str, int]:
    return {("" if d == "ai.onnx" else d): v for d, v in model.opset_imports.items()}


def _schema_version(node: ir.Node, opsets: Mapping[str, int]) -> int | None:
    domain = "" if node.domain == "ai.onnx" else node.domain
    version = opsets.get(domain)
    if version is None:
        return None
    try:
        return onnx.defs.get_schema(node.op_type, version, domain).since_version
    except onnx.defs.SchemaError:
        return -version  # an op onnx has no schema for: the same only at the same domain version


def _has_subgraph(node: ir.Node) -> bool:
    return any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values())


def _signature(node: ir.Node) -> bytes:
    return ir.serde.serialize_node(node).SerializeToString(deterministic=True)


def cut(before: ir.Model, after: ir.Model) -> Cut:
    """The shared prefix of ``after`` against ``before`` (``before`` a clone of the graph as it
    was: the same tensor objects where a weight was kept)."""
    old_opsets, new_opsets = _opsets(before), _opsets(after)
    by_output = {n.outputs[0].name: n for n in before.graph if n.outputs}
    kept_weights = {name for name, v in after.graph.initializers.items()
                    if name in before.graph.initializers
                    and v.const_value is before.graph.initializers[name].const_value}
    inputs = {v.name for v in after.graph.inputs}
    same: set[str] = set()  # values computed identically in both graphs
    same |= inputs & {v.name for v in before.graph.inputs}
    same |= kept_weights
    shared_nodes = 0
    rest_nodes: list[ir.Node] = []
    for node in after.graph:
        old = by_output.get(node.outputs[0].name) if node.outputs else None
        if (old is not None and not _has_subgraph(node)
                and all(v is None or v.name in same for v in node.inputs)
                and _schema_version(node, new_opsets) == _schema_version(old, old_opsets)
                and _schema_version(node, new_opsets) is not None
                and _signature(node) == _signature(old)):
            same.update(v.name for v in node.outputs)
            shared_nodes += 1
        else:
            rest_nodes.append(node)
    produced = same - inputs - kept_weights
    read = [v for n in rest_nodes for v in n.inputs if v is not None]
    for n in rest_nodes:  # values a subgraph of the rest reads from this scope
        for attr in n.attributes.values():
            if attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
                graphs = [attr.value] if attr.type == ir.AttributeType.GRAPH else list(attr.value)
                for g in graphs:
                    read += [v for inner in ir.traversal.RecursiveGraphIterator(g)
                             for v in inner.inputs if v is not None]
    boundary = list(dict.fromkeys(v.name for v in read if v.name in produced))
    prefix_outputs = [v.name for v in after.graph.outputs if v.name in same]
    rest_weights = {v.name for v in read if v.name in after.graph.initializers}
    nbytes = sum(after.graph.initializers[n].const_value.nbytes for n in rest_weights
                 if after.graph.initializers[n].const_value is not None)
    return Cut(shared_nodes, len(rest_nodes), boundary, prefix_outputs, nbytes)


class SharedParity:
    """The two runners of a shared-prefix parity: ``reference`` (the before graph, its boundary
    values kept for the candidate) and ``candidate`` (the rest, on those values). ``feeds``: the
    feeds parity will run, for the reference to run them all before a heavy rest opens."""

    def __init__(self, before: ir.Model, after: ir.Model, plan: Cut, feeds: Sequence[Mapping[str, Any]],
                 heavy_bytes: int | None = None, what: str = "the model before the stage",
                 failure: type[UnframeError] = ConversionError) -> None:
        self.before, self.after, self.plan = before, after, plan
        self.what, self.failure = what, failure
        self.feeds = list(feeds)
        self.heavy = plan.rest_weight_bytes >= (LARGE_WEIGHTS if heavy_bytes is None else heavy_bytes)
        self.outputs = [v.name for v in after.graph.outputs]
        self._cache: list[tuple[Mapping[str, Any], dict[str, np.ndarray], dict[str, np.ndarray]]] = []
        self._ref_runner: Deferred | None = None
        self._rest_runner: Deferred | None = None
        self.reference = _Side(self, "reference")
        self.candidate = _Side(self, "candidate")

    # -- the reference ------------------------------------------------------------------------
    def _reference_runner(self) -> Deferred:
        if self._ref_runner is None:
            from unframe.validate.onnxruntime import onnx_runner

            model = self.before.clone()
            values = {v.name: v for n in model.graph for v in n.outputs}
            for name in self.plan.boundary:
                if values[name] not in model.graph.outputs:
                    model.graph.outputs.append(values[name])
            self._ref_runner = Deferred(lambda: onnx_runner(model), self.what, self.failure)
        return self._ref_runner

    def _close_reference(self) -> None:
        self._ref_runner = _closed(self._ref_runner)

    def run_reference(self, feed: Mapping[str, Any], cached: bool = True
                      ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(the graph outputs, the boundary values) of the before graph on ``feed``; ``cached``
        False runs it again (whether the reference reproduces itself: random ops), unless a heavy
        rest closed its session."""
        for known, outs, bounds in self._cache:
            if known is feed and (cached or self.heavy):
                return outs, bounds
        if self._rest_runner is not None and self.heavy:
            self._close_rest()  # one large session at a time
        got = self._reference_runner().run(feed)
        wanted = [v.name for v in self.before.graph.outputs]
        outs = {n: got[n] for n in wanted}
        bounds = {n: got[n] for n in self.plan.boundary}
        self._cache = [c for c in self._cache if c[0] is not feed] + [(feed, outs, bounds)]
        del self._cache[:-MAX_CACHED]
        return outs, bounds

    # -- the candidate ------------------------------------------------------------------------
    def _rest(self, bounds: Mapping[str, np.ndarray]) -> Deferred:
        if self._rest_runner is None:
            if self.heavy:  # every feed through the reference first, then its session closed
                for feed in self.feeds[:MAX_CACHED]:
                    self.run_reference(feed)
                self._close_reference()
            from unframe.validate.onnxruntime import onnx_runner

            rest = rest_model(self.after, self.plan, bounds)
            self._rest_runner = Deferred(lambda: onnx_runner(rest), "the converted nodes")
        return self._rest_runner

    def _close_rest(self) -> None:
        self._rest_runner = _closed(self._rest_runner)

    def run_candidate(self, feed: Mapping[str, Any]) -> dict[str, np.ndarray]:
        outs, bounds = self.run_reference(feed)
        result = {n: outs[n] for n in self.plan.prefix_outputs}
        wanted = [n for n in self.outputs if n not in result]
        if wanted:
            names = {v.name for v in self.after.graph.inputs}
            rest_feed = {**{k: v for k, v in feed.items() if k in names}, **bounds}
            got = self._rest(bounds).run(rest_feed)
            result.update({n: got[n] for n in wanted})
        return {n: result[n] for n in self.outputs}

    def close(self) -> None:
        self._close_rest()
        self._close_reference()


def _closed(runner: Deferred | None) -> None:
    """Let a built runner's session go (its weights with it); None, for the attribute."""
    if runner is not None and runner.pinned:
        runner.pin().close()
    return None


class _Side(Runner):
    """One side of a ``SharedParity``, as the parity stage runs it."""

    timed = False  # the onnxruntime runners inside are timed

    def __init__(self, owner: SharedParity, side: str) -> None:
        self.owner, self.side = owner, side

    @property
    def name(self) -> str:  # type: ignore[override]
        from unframe.distributions import dist_version

        return f"onnxruntime {dist_version('onnxruntime') or '?'}"

    def output_names(self) -> list[str]:
        return list(self.owner.outputs if self.side == "candidate"
                    else [v.name for v in self.owner.before.graph.outputs])

    def input_specs(self) -> list[TensorSpec] | None:
        graph = self.owner.after.graph if self.side == "candidate" else self.owner.before.graph
        return [TensorSpec(v.name, tuple(v.shape.dims) if v.shape is not None else None,
                           v.dtype.numpy().name if v.dtype is not None and v.dtype != ir.DataType.STRING else "str")
                for v in graph.inputs if v.name not in graph.initializers]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.side == "reference":
            return dict(self.owner.run_reference(feeds, cached=False)[0])
        return self.owner.run_candidate(feeds)

    def close(self) -> None:
        self.owner.close()


def rest_model(after: ir.Model, plan: Cut, bounds: Mapping[str, np.ndarray]) -> ir.Model:
    """The rest of ``after`` as a model of its own: the boundary values (typed as the reference
    computed them, every dim free) and the graph inputs it reads as inputs, the outputs the
    prefix doesn't compute as outputs."""
    graph = after.graph
    names = {v.name for v in graph.inputs}
    outputs = [v for v in graph.outputs if v.name not in plan.prefix_outputs]
    inputs: list[ir.Value | str] = [v for v in graph.inputs] + list(plan.boundary)
    part = ir.convenience.extract(graph, inputs=inputs, outputs=outputs)
    for value in part.inputs:
        if value.name in bounds and value.name not in names:
            array = np.asarray(bounds[value.name])
            value.dtype = ir.DataType.STRING if array.dtype.kind in "OUS" else ir.DataType.from_numpy(array.dtype)
            value.shape = ir.Shape([None] * array.ndim)
    part.opset_imports.update(after.opset_imports)
    return ir.Model(part, ir_version=after.ir_version, producer_name="unframe (parity)",
                    functions=list(after.functions.values()))
