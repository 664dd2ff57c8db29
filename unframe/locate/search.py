"""find_divergence: the first node of a graph whose inputs agree between two stages but whose
outputs do not.

Both stages' values are taken by ONNX name from their taps for one feed, compared value by value
against the tolerance that failed the stage (relative to each value's own scale: element-wise
relative error means nothing near zero), and the graph is walked in topological order over the
ancestors of the outputs that disagree::

    x ─ Conv ─ c ─ Relu ─ r ─ MatMul ─ m ─ Add ─ y
          ok        ok        BAD (inputs r, W agree)  -> the culprit is the MatMul

A value a tap does not give is skipped: the culprit is then the first node with a disagreeing
output, and ``unchecked_inputs`` says which of its inputs could not be compared.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import onnx_ir as ir

    from unframe.locate.taps import Tap

# Masks are written with an infinity on one side and a large finite stand-in on the other
# (-inf vs fp16's -65504 or -1e4; float32's -3.4e38 that fp16 makes -inf): they agree. An
# activation that overflows (1e5 vs inf) is a real divergence.
STAND_IN = 1e4  # a finite candidate this large agrees with a reference infinity of its sign
MASK_VALUE = 1e30  # a finite reference this large agrees with a candidate infinity of its sign


@dataclass
class ValueDiff:
    """How one value differs between the two stages."""

    name: str
    ok: bool
    error: float  # max |a - b| / scale; inf for a shape or non-finite mismatch
    max_abs: float
    scale: float
    position: int = -1  # index in topological order
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Divergence:
    """What the locator found for one failed stage (truthy when it named a node)."""

    stage: str
    reference: str = ""
    candidate: str = ""
    status: str = "found"  # found | not found | timed out | unavailable
    reason: str = ""
    node: str = ""
    op_type: str = ""
    domain: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    value: str = ""  # the first disagreeing value
    # the nodes between the named one and ``value`` whose outputs neither stage shows (a fused op)
    span: list[str] = field(default_factory=list)
    error: float = 0.0
    inputs: list[dict[str, Any]] = field(default_factory=list)  # each input: name, error, ok
    unchecked_inputs: list[str] = field(default_factory=list)
    source: str = ""  # the model's own code or layer the node comes from
    path: list[ValueDiff] = field(default_factory=list)  # errors along the worst path to the output
    tolerance: float = 0.0
    compared: int = 0
    walked: int = 0
    seconds: float = 0.0
    files: dict[str, str] = field(default_factory=dict)  # repro, inputs, plot, html
    reproduces: bool | None = None
    notes: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.status == "found"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["path"] = [p.to_dict() for p in self.path]
        return d

    def headline(self) -> str:
        """One line for the terminal."""
        if not self:
            return f"divergence locator ({self.stage}): {self.status}: {self.reason}"
        where = f" from {self.source}" if self.source else ""
        via = f" (through {', '.join(self.span[1:])}, not seen apart)" if len(self.span) > 1 else ""
        return (f"first diverging node: {self.node or '(unnamed)'} [{self.op_type}]{where}; "
                f"{self.value!r}{via} is off by {_fmt(self.error)} of its scale while its inputs agree")

    def lines(self) -> list[str]:
        out = [self.headline()]
        if self:
            if self.attributes:
                attrs = ", ".join(f"{k}={v}" for k, v in self.attributes.items())
                out.append(f"  attributes: {_short(attrs, 160)}")
            if self.files.get("repro"):
                out.append(f"  repro: {self.files['repro']} with {self.files.get('inputs', '')}"
                           + ("" if self.reproduces else " (does not reproduce on its own)"))
            if self.files.get("html"):
                out.append(f"  error along the path: {self.files['html']}")
        out += [f"  note: {n}" for n in self.notes]
        return out


def _fmt(x: float) -> str:
    return "inf" if not np.isfinite(x) else f"{x:.3g}"


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ----------------------------------------------------------------------------- comparison --
def diff(name: str, ref: Any, got: Any, tolerance: float) -> ValueDiff:
    """Compare one value: exact for integers and bools, scale-relative for floats."""
    a, b = np.asarray(ref), np.asarray(got)
    if a.dtype == object or b.dtype == object:
        same = a.shape == b.shape and all(x == y for x, y in zip(a.ravel(), b.ravel(), strict=False))
        return ValueDiff(name, same, 0.0 if same else np.inf, 0.0, 0.0,
                         reason="" if same else "non-tensor values differ")
    if a.shape != b.shape:
        if a.size == b.size and a.size > 0:
            b = b.reshape(a.shape)  # a layout-free difference (e.g. a squeezed axis) is not the fault
        else:
            return ValueDiff(name, False, np.inf, np.inf, 0.0, reason=f"shape {b.shape} vs {a.shape}")
    if a.size == 0:
        return ValueDiff(name, True, 0.0, 0.0, 0.0)
    if a.dtype.kind not in "fc" and b.dtype.kind not in "fc":
        wrong = int(np.count_nonzero(a.astype(np.int64) != b.astype(np.int64)))
        return ValueDiff(name, wrong == 0, 0.0 if wrong == 0 else np.inf, float(wrong), 0.0,
                         reason=f"{wrong} of {a.size} elements differ" if wrong else "")
    return _float_diff(name, a.astype(np.float64), b.astype(np.float64), tolerance)


def _float_diff(name: str, a: np.ndarray, b: np.ndarray, tolerance: float) -> ValueDiff:
    fa, fb = np.isfinite(a), np.isfinite(b)
    both = fa & fb
    scale = float(np.abs(a[both]).max()) if both.any() else 0.0
    same_sign = np.sign(a) == np.sign(b)
    stand_in = (~fa & fb & same_sign & (np.abs(b) >= STAND_IN)) | \
               (fa & ~fb & same_sign & (np.abs(a) >= MASK_VALUE))
    same_inf = ~fa & ~fb & ((a == b) | (np.isnan(a) & np.isnan(b)))
    broken = int(np.count_nonzero(~both & ~stand_in & ~same_inf))
    max_abs = float(np.abs(a[both] - b[both]).max()) if both.any() else 0.0
    if broken:
        return ValueDiff(name, False, np.inf, max_abs, scale,
                         reason=f"{broken} element(s) non-finite on one side only")
    error = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else np.inf)
    return ValueDiff(name, error <= tolerance, error, max_abs, scale)


# --------------------------------------------------------------------------------- search --
@dataclass
class Walk:
    """The graph in the order the locator walks it."""

    nodes: list[ir.Node]
    producer: dict[str, ir.Node]
    position: dict[str, int]

    @classmethod
    def of(cls, model: ir.Model) -> Walk:
        nodes = list(model.graph)
        producer: dict[str, ir.Node] = {}
        position: dict[str, int] = {}
        for i, node in enumerate(nodes):
            for v in node.outputs:
                if v.name:
                    producer[v.name] = node
                    position[v.name] = i
        return cls(nodes, producer, position)

    def descendants(self, node: ir.Node) -> set[str]:
        """Names of the values computed from ``node``'s outputs (those included)."""
        consumers: dict[str, list[ir.Node]] = {}
        for n in self.nodes:
            for value in node_inputs(n):
                consumers.setdefault(value.name, []).append(n)
        out: set[str] = set()
        stack = [v.name for v in node.outputs if v.name]
        while stack:
            name = stack.pop()
            if name in out:
                continue
            out.add(name)
            for consumer in consumers.get(name, []):
                stack.extend(v.name for v in consumer.outputs if v.name)
        return out

    def ancestors(self, names: Sequence[str]) -> set[int]:
        """Indices of the nodes the given values depend on (themselves included)."""
        index = {id(n): i for i, n in enumerate(self.nodes)}
        seen: set[int] = set()
        stack = [self.producer[n] for n in names if n in self.producer]
        while stack:
            node = stack.pop()
            i = index[id(node)]
            if i in seen:
                continue
            seen.add(i)
            for value in node_inputs(node):
                if value.name in self.producer:
                    stack.append(self.producer[value.name])
        return seen


def node_inputs(node: ir.Node) -> list[ir.Value]:
    """A node's inputs, and the outer values its subgraphs read (an If branch reading x)."""
    import onnx_ir as ir

    values = [v for v in node.inputs if v is not None]
    for attr in node.attributes.values():
        graphs = [attr.value] if attr.type == ir.AttributeType.GRAPH else \
            list(attr.value) if attr.type == ir.AttributeType.GRAPHS else []
        for g in graphs:
            inner = {v.name for n in ir.traversal.RecursiveGraphIterator(g) for v in n.outputs}
            inner |= {v.name for v in g.inputs}
            for n in ir.traversal.RecursiveGraphIterator(g):
                values += [v for v in n.inputs if v is not None and v.name not in inner]
    return values


def find_divergence(model: ir.Model, reference: Tap, candidate: Tap, feeds: Mapping[str, Any], *,
                    tolerance: float, stage: str = "", deadline: float | None = None,
                    keep: dict[str, Any] | None = None) -> Divergence:
    """Compare every value both taps give for ``feeds`` and name the first node (topological order,
    among the ancestors of the outputs that disagree) whose output disagrees. ``keep`` receives
    the values compared (``reference``, ``candidate``) for the repro."""
    started = time.monotonic()
    result = Divergence(stage, reference.name, candidate.name, tolerance=tolerance)
    result.notes += [f"{t.name}: {note}" for t in (reference, candidate) for note in t.limitations]
    walk = Walk.of(model)
    names = [v.name for node in walk.nodes for v in node.outputs if v.name]
    names += [v.name for v in model.graph.outputs if v.name not in walk.position]
    ref = reference.values(feeds, names)
    _check_time(deadline)
    got = candidate.values(feeds, names)
    _check_time(deadline)
    if keep is not None:
        keep.update(reference=ref, candidate=got)
    diffs = {n: diff(n, ref[n], got[n], tolerance) for n in names if n in ref and n in got}
    for name, d in diffs.items():
        d.position = walk.position.get(name, len(walk.nodes))
    result.compared = len(diffs)
    failing = [v.name for v in model.graph.outputs if v.name in diffs and not diffs[v.name].ok]
    if not failing:
        result.status, result.reason = "not found", (
            "the outputs agree on the feed the locator used" if any(
                v.name in diffs for v in model.graph.outputs) else
            "neither tap gives the graph's outputs under their ONNX names")
        result.seconds = time.monotonic() - started
        return result
    suspects = sorted(walk.ancestors(failing))
    result.walked = len(suspects)
    for i in suspects:
        node = walk.nodes[i]
        bad = [diffs[v.name] for v in node.outputs if v.name in diffs and not diffs[v.name].ok]
        if bad:
            span = unseen_span(walk, diffs, node)
            _describe(result, span, bad[0], diffs, walk)
            result.path = worst_path(walk, diffs, failing[0], node)
            break
    else:
        result.status, result.reason = "not found", "no compared intermediate value disagrees"
    result.seconds = time.monotonic() - started
    return result


def unseen_span(walk: Walk, diffs: dict[str, ValueDiff], node: ir.Node) -> list[ir.Node]:
    """``node`` and the producers it reaches through values neither stage gave, in topological
    order: the nodes that can't be told apart from it (a fused op computes them as one)."""
    order = {id(n): i for i, n in enumerate(walk.nodes)}
    span = {id(node): node}
    stack = [node]
    while stack:
        for value in node_inputs(stack.pop()):
            producer = walk.producer.get(value.name)
            if value.name in diffs or producer is None or producer.op_type == "Constant" \
                    or value.const_value is not None or id(producer) in span:
                continue
            span[id(producer)] = producer
            stack.append(producer)
    return sorted(span.values(), key=lambda n: order[id(n)])


def _describe(result: Divergence, span: list[ir.Node], bad: ValueDiff, diffs: dict[str, ValueDiff],
              walk: Walk) -> None:
    """Name the earliest node of the span (where the fault starts, as far as the taps can tell)."""
    head = span[0]
    result.node, result.op_type, result.domain = head.name or "", head.op_type, head.domain
    result.attributes = {k: _attr_text(a) for k, a in head.attributes.items()}
    result.span = [f"{n.name or '(unnamed)'} [{n.op_type}]" for n in span]
    result.value, result.error = bad.name, bad.error
    inside = {id(n) for n in span}
    for node in span:
        for value in node_inputs(node):
            if value.const_value is not None or value.is_graph_input() or value.name not in walk.producer:
                continue  # constants, initializers and graph inputs are the same on both sides
            if id(walk.producer[value.name]) in inside:
                result.unchecked_inputs.append(value.name)
            elif value.name in diffs:
                d = diffs[value.name]
                result.inputs.append({"name": value.name, "error": d.error, "ok": d.ok})
    if bad.reason:
        result.notes.append(f"{bad.name}: {bad.reason}")


def _attr_text(attr: Any) -> Any:
    import onnx_ir as ir

    if attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
        return "<subgraph>"
    value = attr.value
    if isinstance(value, ir.TensorProtocol):
        return f"<tensor {value.dtype.name} {list(value.shape)}>"
    if isinstance(value, (list, tuple)) and len(value) > 16:
        return f"<{len(value)} values>"
    return value if isinstance(value, (int, float, str)) else list(value) if \
        isinstance(value, (list, tuple)) else str(value)


def worst_path(walk: Walk, diffs: dict[str, ValueDiff], output: str, culprit: ir.Node
               ) -> list[ValueDiff]:
    """The compared values from a graph input through the culprit to ``output``: each step goes
    back to the input with the largest error, and after the culprit only through values that
    depend on it (the path the error grew along)."""
    after = _back_path(walk, diffs, output, allowed=walk.descendants(culprit))
    start = next((v.name for v in culprit.outputs if v.name in diffs), None)
    before = _back_path(walk, diffs, start, allowed=None) if start else []
    unique = {d.name: d for d in [*before, *after]}
    return sorted(unique.values(), key=lambda d: d.position)


def _back_path(walk: Walk, diffs: dict[str, ValueDiff], start: str, allowed: set[str] | None
               ) -> list[ValueDiff]:
    path: list[ValueDiff] = []
    name: str | None = start
    while name is not None:
        if name in diffs:
            path.append(diffs[name])
        node = walk.producer.get(name)
        if node is None:
            break
        pool = [v.name for v in node_inputs(node) if v.name in walk.producer
                and (allowed is None or v.name in allowed)]
        compared = [n for n in pool if n in diffs]
        pool = compared or pool
        name = max(pool, key=lambda n: diffs[n].error if n in diffs else -1.0) if pool else None
    return path


class LocatorTimeout(Exception):
    """The locator ran past its time cap."""


def _check_time(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise LocatorTimeout("the locator's time cap was reached")
