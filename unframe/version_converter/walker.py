"""The walker: moves every node one schema version at a time towards the target opset.

For each node it looks up the schemas of its op between the node's current opset and the target and
takes only the steps where the schema changed. Each step uses the registered adapter for
``(op, from, to)`` or, if none, the generic adapter. On a downgrade below the opset where the op was
introduced, the node is expanded through its function body and the expansion is walked in turn.
A refusal is recorded as a ``Blocker`` and the walk goes on, so every blocker is reported at once.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections import Counter, deque
from typing import Any

import onnx.defs
import onnx_ir as ir

import unframe.version_converter.generic as generic
from unframe import opset as facts
from unframe.errors import Blocker
from unframe.version_converter.context import Refused, Step
from unframe.version_converter.expand import expand
from unframe.version_converter.registry import TYPE_FREE, AdapterKey, adapter_table
from unframe.version_converter.types import allowed_types

CONVERTED_DOMAINS = ("", facts.ML_DOMAIN)


@functools.cache
def _schema_since(op: str, version: int, domain: str) -> onnx.defs.OpSchema | None:
    try:
        schema = onnx.defs.get_schema(op, version, domain)
    except Exception:  # unknown op
        return None
    return schema if schema.since_version == version else None


# the schema facts are looked up once per (op, opset) instead of once per node and step
_since_version_at = functools.cache(facts.since_version_at)
_schema_at = functools.cache(facts.schema_at)


class Walker:
    def __init__(self, targets: dict[str, int]) -> None:
        self.targets = targets  # domain -> target opset
        self.blockers: list[Blocker] = []
        self.fired: Counter[str] = Counter()
        self.expanded: list[str] = []
        self.nodes_changed = 0
        self._opset: dict[int, int] = {}
        self._queue: deque[ir.Node] = deque()
        self._names = itertools.count()
        self._seen_graphs: set[int] = set()
        self._adapters = adapter_table()
        self._plans: dict[tuple[str, str, int, int], list[tuple[str, int, int]]] = {}
        self._resolved_plans: dict[tuple[str, str, int, int], list[tuple[Any, ...]]] = {}
        self._node_key: tuple[Any, ...] | None = None
        self.untouched: set[int] = set()  # ids of nodes the walk left exactly as they were
        self._added: list[ir.Node] | None = None  # nodes made while the fast path may undo them
        # id of a node made by an expansion -> (the node the user has, why it was expanded)
        self._origin: dict[int, tuple[ir.Node, str]] = {}
        self._root_blockers: dict[int, list[Any]] = {}
        self._common: dict[tuple[str, str, int, int], frozenset[str] | None] = {}

    def find_adapter(self, domain: str, op: str, frm: int, to: int) -> Any:
        return self._adapters.get(AdapterKey(domain, op, frm, to))

    # -- bookkeeping used by Step / expand --------------------------------------------------------
    def fresh_name(self, hint: str) -> str:
        return f"{hint}_vc{next(self._names)}"

    def opset_of(self, node: ir.Node) -> int:
        return self._opset.get(id(node), self.targets.get(facts.norm_domain(node.domain), 0))

    def register_new(self, node: ir.Node, version: int) -> None:
        self._opset[id(node)] = version
        self._queue.append(node)
        if self._added is not None:
            self._added.append(node)

    # -- the walk -----------------------------------------------------------------------------
    def walk_graph(self, graph: Any, imports: dict[str, int]) -> None:
        if id(graph) in self._seen_graphs:
            return
        self._seen_graphs.add(id(graph))
        for node in list(graph):
            self._opset.setdefault(id(node), facts.imported_opset(imports, node.domain))
            self._queue.append(node)
        while self._queue:
            node = self._queue.popleft()
            alive = self._convert_node(node)
            if alive:
                for attr in node.attributes.values():
                    for sub in _subgraphs(attr):
                        self.walk_graph(sub, imports)

    # -- the fast path ------------------------------------------------------------------------------
    def convert_generic_only(self, graphs: list[tuple[Any, dict[str, int]]]) -> bool:
        """Convert every node of ``graphs`` (graph, its opset imports; subgraphs included) when all of
        their steps are generic steps that no dtype can block, which needs no type inference.

        Every step's verdict is checked before anything changes; if one step is not of that kind, or
        its verdict finds a problem, nothing is changed and False is returned (the caller then takes
        the full walk, which reports the blockers). Changes made here: attributes at their default
        that the target lacks are dropped, and each node is marked as at the target."""
        from onnx_ir.traversal import RecursiveGraphIterator

        planned: list[tuple[ir.Node, str, list[tuple[Any, ...]]]] = []
        for graph, imports in graphs:  # first only the plans: cheap, and most refusals show here
            for node in RecursiveGraphIterator(graph):
                domain = facts.norm_domain(node.domain)
                if domain not in CONVERTED_DOMAINS or domain not in self.targets:
                    continue
                current = facts.imported_opset(imports, domain)
                if _since_version_at(node.op_type, max(current, 1), domain) is None:
                    return False
                plan = self._resolved(node.op_type, domain, current, self.targets[domain])
                if any(kind != "step" or (fn is not None and not self._type_free(domain, node.op_type, frm, to))
                       for kind, frm, to, *_, fn in plan):
                    return False
                planned.append((node, domain, plan, current))
        drops: list[tuple[ir.Node, tuple[str, ...]]] = []
        nodes: list[tuple[ir.Node, int]] = []
        adapted: list[tuple[ir.Node, int]] = []
        for node, domain, plan, current in planned:
            if any(fn is not None for *_, fn in plan):
                # the generic steps after an adapter see the node it made: checked when they run
                if self.targets.get("", 0) < 9 or not all(
                        fn is not None or _types_only_widen(domain, node.op_type, frm, to, node, widest=True)
                        for _, frm, to, _, _, fn in plan):
                    return False
                adapted.append((node, current))
                continue
            key = generic.node_key(node)
            for _, frm, to, old, new, _ in plan:
                if not _types_only_widen(domain, node.op_type, frm, to, node):
                    return False
                droppable = generic.clean_verdict(node, Step(self, node, domain, frm, to, old, new, node_key=key))
                if droppable is None:
                    return False
                if droppable:
                    drops.append((node, droppable))
            nodes.append((node, len(plan)))
        if adapted and not self._convert_undoably(adapted):
            return False
        for node, names in drops:
            for name in names:
                node.attributes.pop(name, None)
        for node, steps in nodes:
            self._opset[id(node)] = self.targets[facts.norm_domain(node.domain)]
            self.nodes_changed += int(steps > 0)
            self.fired["generic"] += steps
        return True

    def _type_free(self, domain: str, op: str, frm: int, to: int) -> bool:
        return AdapterKey(domain, op, frm, to) in TYPE_FREE

    def _convert_undoably(self, adapted: list[tuple[ir.Node, int]]) -> bool:
        """The fast path's nodes whose plans hold type-free adapters, converted by the usual walk;
        if any step refuses, every change is undone (their attributes and inputs put back, the
        nodes they added removed) and False is returned."""
        saved = [(node, list(node.attributes.values()), list(node.inputs)) for node, _ in adapted]
        added: list[ir.Node] = []
        self._added = added
        ok = True
        try:
            for node, current in adapted:
                self._opset[id(node)] = current
                ok = self._convert_node(node) and not self.blockers
                if not ok:
                    break
            while ok and self._queue:
                ok = self._convert_node(self._queue.popleft()) and not self.blockers
        finally:
            self._added = None
        if ok:
            for new in added:  # as the full walk does: no type the model did not declare
                for value in new.outputs:
                    if not value.is_graph_output():
                        value.type, value.shape = None, None
            return True
        for node, attributes, inputs in saved:
            node.attributes.clear()
            for attr in attributes:
                node.attributes[attr.name] = attr
            node.resize_inputs(len(inputs))
            for index, value in enumerate(inputs):
                node.replace_input_with(index, value)
        for new in reversed(added):
            new.graph.remove(new, safe=True)
        self._queue.clear()
        self.blockers.clear()
        return False

    def _block(self, node: ir.Node, reason: str) -> None:
        origin = self._origin.get(id(node))
        if origin is None:
            self.blockers.append(Blocker(op=node.op_type, reason=reason, node=node.name or "",
                                         domain=facts.norm_domain(node.domain)))
            return
        # a node of an expansion: the user has the expanded node, so the blocker names that one,
        # why it was expanded, and the first node of its body that can't reach the target
        root, why = origin
        entry = self._root_blockers.get(id(root))
        if entry is None:
            first = (f"{why}; its function body does not reach opset {self.targets.get(facts.norm_domain(root.domain))} "
                     f"either: [{node.op_type}] {reason}")
            self._root_blockers[id(root)] = [len(self.blockers), first, 0]
            self.blockers.append(Blocker(op=root.op_type, node=root.name or "", domain=facts.norm_domain(root.domain),
                                         reason=first))
            return
        index, first, more = entry[0], entry[1], entry[2] + 1
        entry[2] = more
        self.blockers[index] = dataclasses.replace(
            self.blockers[index], reason=f"{first} (and {more} more node{'s' * (more > 1)} of the body)")

    def _convert_node(self, node: ir.Node) -> bool:
        """Walk one node to its target; False when it was replaced by other nodes."""
        domain = facts.norm_domain(node.domain)
        if domain not in CONVERTED_DOMAINS or domain not in self.targets:
            return True
        target = self.targets[domain]
        current = self._opset[id(node)]
        if _since_version_at(node.op_type, max(current, 1), domain) is None:
            self._block(node, f"not a known {domain or 'ai.onnx'} op at opset {current}")
            return True
        plan = self._resolved(node.op_type, domain, current, target)
        if not plan or self._clean_plan(node, domain, current, target, plan):
            self._opset[id(node)] = target
            self.nodes_changed += int(bool(plan))
            self.fired["generic"] += len(plan)
            if not any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
                self.untouched.add(id(node))  # serializes as before (its subgraphs may have changed)
            return True
        changed = False
        self._node_key = None
        at = current  # the opset whose schema the node satisfies now
        try:
            for kind, frm, to, old, new, fn in plan:
                changed = True
                if kind == "expand":
                    assert old is not None
                    self._expand(node, old, f"{node.op_type} does not exist before opset {frm}")
                    return False
                if self._step(node, domain, frm, to, old, new, fn):
                    self.nodes_changed += 1
                    return False
                at = to
        except Refused as exc:
            if target < at and self._expand_instead(node, domain, at, exc.reason):
                return False
            self._block(node, exc.reason)
            return True
        self._opset[id(node)] = target
        self.nodes_changed += int(changed)
        return True

    def _clean_plan(self, node: ir.Node, domain: str, current: int, target: int,
                    plan: list[tuple[Any, ...]]) -> bool:
        """True when every step of the plan is a generic step that leaves the node as it is (no
        problem, nothing to drop or fix): then the walk only has to mark it as at the target.
        Decided once per kind of node (op, attributes, counts, dtypes) and plan."""
        plan_key = (domain, node.op_type, current, target)
        if plan_key not in self._common:
            self._common[plan_key] = _common_attributes(plan)
        common = self._common[plan_key]
        if common is None:
            return False
        extra = tuple(sorted((n, repr(a.value)) for n, a in node.attributes.items() if n not in common))
        key = (plan_key, generic.node_key(node), extra)
        clean = _CLEAN_PLANS.get(key)
        if clean is None:
            clean = _CLEAN_PLANS[key] = all(
                generic.clean_verdict(node, Step(self, node, domain, frm, to, old, new)) == ()
                for _, frm, to, old, new, _ in plan)
        return clean

    def _expand(self, node: ir.Node, schema: Any, why: str) -> None:
        root = self._origin.get(id(node), (node, why))  # nested expansions answer to the first
        for new in expand(node, schema, self):
            self._origin[id(new)] = root
        self.expanded.append(node.op_type)
        self.fired[f"expand:{node.op_type}"] += 1
        self.nodes_changed += 1

    def _expand_instead(self, node: ir.Node, domain: str, at: int, why: str) -> bool:
        """On a refused downgrade step, expand the node through the function body of the schema it
        satisfies (at opset ``at``) when it has one: the body is that op's definition, and its nodes
        are converted on to the target (where they may be refused in turn). False: no body."""
        schema = _schema_at(node.op_type, at, domain)
        if schema is None or not (schema.has_function or schema.has_context_dependent_function):
            return False
        try:
            self._expand(node, schema, why)
        except Refused:
            return False
        return True

    def _resolved(self, op: str, domain: str, current: int, target: int) -> list[tuple[Any, ...]]:
        """The plan with each step's schemas and adapter looked up once: (kind, from, to, old schema,
        new schema, adapter or None); for "expand", old is the schema whose function body is used."""
        key = (op, domain, current, target)
        resolved = self._resolved_plans.get(key)
        if resolved is not None:
            return resolved
        resolved = []
        for kind, frm, to in self._plan(op, domain, current, target):
            if kind == "expand":
                resolved.append((kind, frm, to, _schema_since(op, frm, domain), None, None))
                continue
            old = _schema_since(op, frm, domain) if frm > to else _schema_at(op, frm, domain)
            new = _schema_since(op, to, domain) if to > frm else _schema_at(op, to, domain)
            resolved.append((kind, frm, to, old, new, self.find_adapter(domain, op, frm, to)))
        self._resolved_plans[key] = resolved
        return resolved

    def _plan(self, op: str, domain: str, current: int, target: int) -> list[tuple[str, int, int]]:
        """The steps from ``current`` to ``target``: ("step", from, to) where the schema changes, or a
        final ("expand", since, since - 1) below the op's introduction with no adapter for it."""
        key = (op, domain, current, target)
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        plan = []
        if target > current:
            plan = [("step", v - 1, v) for v in facts.since_versions(op, domain) if current < v <= target]
        else:
            version = current
            while True:
                since = facts.since_version_at(op, version, domain)
                if since is None or since <= target:
                    break
                if facts.schema_at(op, since - 1, domain) is None and \
                        self.find_adapter(domain, op, since, since - 1) is None:
                    plan.append(("expand", since, since - 1))
                    break
                plan.append(("step", since, since - 1))
                version = since - 1
        self._plans[key] = plan
        return plan

    def _step(self, node: ir.Node, domain: str, frm: int, to: int, old: Any, new: Any, fn: Any) -> bool:
        step = Step(self, node, domain, frm, to, old, new)
        if fn is not None:
            self._node_key = None  # an adapter may change the node's attributes, inputs or types
            fn(node, step)
            self.fired[str(AdapterKey(domain, node.op_type, frm, to))] += 1
        else:
            if new is not None and new.deprecated:
                step.refuse(f"{node.op_type} was removed at opset {to} and has no rewrite to a successor")
            if self._node_key is None:
                self._node_key = generic.node_key(node)
            step.node_key = self._node_key
            generic.generic_step(node, step)
            if len(node.attributes) != len(self._node_key[1]):  # it dropped an attribute
                self._node_key = None
            self.fired["generic"] += 1
        return step.replaced


# (all-generic plan, node key, attributes some step's schema lacks) -> every step a clean generic
# step (schema facts only, so shared by every walk)
_CLEAN_PLANS: dict[tuple[Any, ...], bool] = {}


def _common_attributes(plan: list[tuple[Any, ...]]) -> frozenset[str] | None:
    """The attribute names every step's target schema has, for an all-generic plan; None when a step
    is an adapter or an expansion."""
    if not all(kind == "step" and fn is None and new is not None for kind, *_, new, fn in plan):
        return None
    return frozenset.intersection(*(frozenset(new.attributes) for *_, new, _ in plan))


def _types_only_widen(domain: str, op: str, frm: int, to: int, node: ir.Node, *, widest: bool = False) -> bool:
    """True when the schema at ``to`` allows every type the schema at ``frm`` allows, for each of the
    node's inputs and outputs (``widest``: for every input the schema may take, as an adapter may
    have added some): then no dtype can block the step (and no type inference is needed)."""
    n_in = len(node.inputs)
    if widest:
        schema = _schema_at(op, frm, domain)
        n_in = max(n_in, min(schema.max_input, 16)) if schema is not None else n_in
    return _types_widen(domain, op, frm, to, n_in, len(node.outputs))


@functools.cache
def _types_widen(domain: str, op: str, frm: int, to: int, n_in: int, n_out: int) -> bool:
    old, new = _schema_at(op, frm, domain), _schema_at(op, to, domain)
    if old is None or new is None:
        return False
    for n, old_params, new_params in ((n_in, old.inputs, new.inputs), (n_out, old.outputs, new.outputs)):
        for i in range(n):
            before, after = allowed_types(old, old_params, i), allowed_types(new, new_params, i)
            if after is not None and (before is None or not before <= after):
                return False
    return True


def _subgraphs(attr: ir.Attr) -> list[ir.Graph]:
    if attr.type == ir.AttributeType.GRAPH:
        return [attr.value]
    if attr.type == ir.AttributeType.GRAPHS:
        return list(attr.value)
    return []
