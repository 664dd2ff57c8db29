"""The opset version converter: any model between opset 7 and the newest opset, up or down.

``convert_opset(model, target)`` converts an ``onnx_ir.Model`` in place, collecting every blocker,
so the error lists all blockers at once, and a refused model is left as it was:

* fast path: when every node's steps are generic steps that no dtype can block, every verdict is
  checked before anything changes (no type inference, no snapshot);
* full walk: a weight-less snapshot of the model (the proto that type inference needs anyway) is
  taken first; the walk converts the model in place and, if anything blocks, the model is restored
  from the snapshot. Initializer tensors are never read or copied.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import onnx_ir as ir

from unframe import opset as facts
from unframe.errors import Blocker, UnsupportedError, UsageError
from unframe.version_converter.registry import ADAPTERS, adapter
from unframe.version_converter.walker import Walker


@dataclass
class OpsetConversion:
    source_opset: int
    target_opset: int
    path: list[str] = field(default_factory=list)
    nodes_changed: int = 0
    expanded: list[str] = field(default_factory=list)
    adapters_used: dict[str, int] = field(default_factory=dict)
    ir_version: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _required_ir_version(opset: int, ml_opset: int | None) -> int:
    import onnx.helper

    def first_ir(column: int, version: int) -> int:
        rows = [row[1] for row in onnx.helper.VERSION_TABLE if row[column] >= version]
        return min(rows) if rows else max(row[1] for row in onnx.helper.VERSION_TABLE)

    need = first_ir(2, opset)
    if ml_opset:
        need = max(need, first_ir(3, ml_opset))
    return need


def _targets(model: ir.Model, target: int, ml_target: int | None) -> dict[str, int]:
    newest = facts.newest_opset()
    if not facts.MIN_OPSET <= target <= newest:
        raise UsageError(f"target opset {target} is outside {facts.MIN_OPSET}..{newest}",
                         f"choose an opset between {facts.MIN_OPSET} and {newest}")
    source = facts.model_opset(model)
    if source and source < 1:
        raise UsageError(f"the model imports ai.onnx opset {source}", "fix the model's opset_import")
    targets = {"": target}
    ml_source = facts.model_opset(model, facts.ML_DOMAIN)
    if ml_target is not None:
        newest_ml = facts.newest_opset(facts.ML_DOMAIN)
        if not 1 <= ml_target <= newest_ml:
            raise UsageError(f"target ai.onnx.ml opset {ml_target} is outside 1..{newest_ml}",
                             f"choose an ai.onnx.ml opset between 1 and {newest_ml}")
        targets[facts.ML_DOMAIN] = ml_target
    elif ml_source:
        targets[facts.ML_DOMAIN] = ml_source
    return targets


def _imports_of(owner: Any) -> dict[str, int]:
    return {facts.norm_domain(k): int(v) for k, v in owner.opset_imports.items()}


def _all_values(model: ir.Model) -> list[ir.Value]:
    from onnx_ir.traversal import RecursiveGraphIterator

    values: list[ir.Value] = []
    for graph in [model.graph, *model.functions.values()]:
        values.extend(graph.inputs)
        for node in RecursiveGraphIterator(graph):
            values.extend(node.outputs)
    return values


def _graphs(model: ir.Model) -> list[tuple[Any, dict[str, int]]]:
    return [(model.graph, _imports_of(model.graph))] + [(f, _imports_of(f)) for f in model.functions.values()]


def _run(model: ir.Model, targets: dict[str, int], proto: Any = None) -> Walker:
    from unframe.version_converter.types import fill_ranks, infer_types

    # types and ranks of intermediate values let adapters check dtypes and fix axes; shape
    # inference serializes the graph without large initializers, so no weight is read. The inferred
    # types are only for the adapters: the declared ones are put back afterwards.
    values = _all_values(model)
    declared = {id(v): (v.type, v.shape) for v in values}
    infer_types(model, values, proto)
    fill_ranks([graph for graph, _ in _graphs(model)])
    walker = Walker(targets)
    for graph, imports in _graphs(model):
        walker.walk_graph(graph, imports)
    for value in _all_values(model):
        if id(value) in declared:
            value.type, value.shape = declared[id(value)]
        elif not value.is_graph_output():
            value.type, value.shape = None, None
    return walker


def _set_imports(owner: Any, targets: dict[str, int]) -> None:
    imports = owner.opset_imports
    for alias in [d for d in imports if d and facts.is_default_domain(d)]:
        del imports[alias]  # the default domain is written as ""
    for domain, version in targets.items():
        if domain == "" or domain in imports:
            imports[domain] = version


def _final_check(original: ir.Model | Any, work: ir.Model, targets: dict[str, int], walker: Walker,
                 snapshot: Any = None) -> None:
    """Refuse a result the ONNX checker rejects (when the original, a model or its snapshot proto,
    passes it): a safety net for what the adapters could not see, e.g. a dtype of an untyped value
    inside an expansion. With the ``snapshot``, the nodes the walk left as they were are not
    serialized again; a complaint about that patched proto is confirmed on the full one."""
    from unframe.version_converter.types import checker_error

    _finish(work, targets)  # idempotent: convert_opset finishes the same model again
    patched = snapshot.patched(work, walker.untouched) if snapshot is not None else None
    problem = checker_error(patched) if patched is not None else "unchecked"
    if problem:
        problem = checker_error(work)
    if problem and not checker_error(original):
        walker.blockers.append(Blocker(op="(model)", reason=f"the converted model fails the ONNX checker: {problem}"))


def _finish(work: ir.Model, targets: dict[str, int]) -> int:
    """Set opset imports and the IR version the target needs; returns the IR version."""
    _set_imports(work.graph, targets)
    for function in work.functions.values():
        _set_imports(function, targets)
    ml_final = targets.get(facts.ML_DOMAIN) if facts.ML_DOMAIN in work.graph.opset_imports else None
    ir_version = _required_ir_version(targets[""], ml_final)
    if work.functions:
        ir_version = max(ir_version, 8)  # model-local functions exist from IR version 8
    if ir_version < 4:
        from onnx_ir.passes.common import AddInitializersToInputsPass

        AddInitializersToInputsPass()(work)  # before IR 4 every initializer must be a graph input
    work.ir_version = ir_version
    return ir_version


def preflight(model: ir.Model, target: int, *, ml_target: int | None = None) -> list[Blocker]:
    """Every reason ``model`` can't be converted to ``target`` (empty list: it can). Doesn't modify it."""
    targets = _targets(model, target, ml_target)
    work = model.clone()
    walker = _run(work, targets)
    if not walker.blockers:
        _final_check(model, work, targets, walker)
    return walker.blockers


def convert_opset(model: ir.Model, target: int, *, ml_target: int | None = None) -> OpsetConversion:
    """Convert ``model`` in place to ``target`` (ai.onnx) and ``ml_target`` (ai.onnx.ml, default: kept).

    Raises ``UnsupportedError`` listing every blocker, with ``model`` untouched, if anything blocks.
    """
    from unframe.version_converter.types import Snapshot

    targets = _targets(model, target, ml_target)
    source = facts.model_opset(model)
    ml_source = facts.model_opset(model, facts.ML_DOMAIN)
    walker = Walker(targets)
    if not walker.convert_generic_only(_graphs(model)):
        ir_version = model.ir_version
        snapshot = Snapshot.take(model)
        walker = _run(model, targets, snapshot.proto)
        if not walker.blockers:
            _final_check(snapshot.proto, model, targets, walker, snapshot)
        if walker.blockers:
            snapshot.restore(model)
            model.ir_version = ir_version
    if walker.blockers:
        n = len(walker.blockers)
        raise UnsupportedError(
            f"cannot convert the model from opset {source} to {target}: {n} blocker{'s' * (n > 1)}: "
            + "; ".join(str(b) for b in walker.blockers[:5]) + (" ..." if n > 5 else ""),
            "see the blockers list; choose another target opset or change the listed nodes",
            blockers=walker.blockers)
    ir_version = _finish(model, targets)
    ml_final = targets.get(facts.ML_DOMAIN) if facts.ML_DOMAIN in model.graph.opset_imports else None
    path = [f"ai.onnx {source}->{target}"]
    if ml_final is not None and ml_source and ml_source != ml_final:
        path.append(f"ai.onnx.ml {ml_source}->{ml_final}")
    return OpsetConversion(source, target, path, walker.nodes_changed, sorted(set(walker.expanded)),
                           dict(walker.fired), ir_version)


class ConvertVersionPass(ir.passes.InPlacePass):
    """Convert a model to another opset (see ``convert_opset``); the pass result's model is the input."""

    def __init__(self, target: int, *, ml_target: int | None = None) -> None:
        super().__init__()
        self.target = target
        self.ml_target = ml_target
        self.last: OpsetConversion | None = None

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        before = facts.model_opset(model)
        self.last = convert_opset(model, self.target, ml_target=self.ml_target)
        return ir.passes.PassResult(model, modified=before != self.target or self.last.nodes_changed > 0)


__all__ = ["convert_opset", "preflight", "ConvertVersionPass", "OpsetConversion", "adapter", "ADAPTERS"]
