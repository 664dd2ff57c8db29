"""A minimal repro of a divergence: an ONNX file of at most five nodes around the culprit and the
inputs that make its stage disagree on their own.

The culprit node is cut out with its initializers; every other value it reads becomes a graph
input fed with the reference stage's value. If the stage applied to that one-node model does not
disagree (the fault needs its neighbours: a fused pattern, a constant folded from a producer),
the nearest producers are added one at a time, up to ``MAX_NODES``::

    model:  ... -> Relu -> r -> MatMul(r, W) -> m -> Add -> ...
    repro:  r (input) -> MatMul(r, W) -> m (output)        repro_inputs.npz: {"r": ...}

``Constant`` nodes feeding the kept nodes come along and are not counted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from unframe.locate.search import Walk, diff, node_inputs

if TYPE_CHECKING:
    import onnx
    import onnx_ir as ir

MAX_NODES = 5
# model, feeds -> the candidate stage's outputs for that model
Reproduce = Callable[["ir.Model", dict[str, np.ndarray]], dict[str, np.ndarray]]


def run_on_onnxruntime(model: ir.Model, feeds: dict[str, Any]) -> dict[str, Any]:
    """The ONNX stages' ``Reproduce``: onnxruntime on the cut."""
    from unframe.validate.onnxruntime import onnx_runner

    return onnx_runner(model).run(feeds)


@dataclass
class Repro:
    model: ir.Model
    feeds: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]  # the reference stage's outputs
    got: dict[str, np.ndarray] | None  # the candidate stage's outputs on the repro (None: not run)
    reproduces: bool | None
    nodes: int
    note: str = ""


def minimal_repro(model: ir.Model, culprit_value: str, reference: Mapping[str, np.ndarray],
                  candidate: Mapping[str, np.ndarray], reproduce: Reproduce | None,
                  tolerance: float) -> Repro | None:
    """The smallest cut (1..MAX_NODES nodes) around the node producing ``culprit_value`` on which
    ``reproduce`` still disagrees with the reference; the largest tried when none does."""
    walk = Walk.of(model)
    culprit = walk.producer.get(culprit_value)
    if culprit is None:
        return None
    kept: list[ir.Node] = [culprit]
    last: Repro | None = None
    note = ""
    while True:
        cut = _cut(model, kept, walk, reference, candidate)
        if cut is None:
            break
        last = _try(cut, reference, reproduce, tolerance)
        if last.reproduces or reproduce is None:
            break
        grown = _grow(kept, walk, reference, candidate)
        if grown is None or _counted(grown) > MAX_NODES:
            note = f"the stage agrees on every cut of up to {MAX_NODES} nodes around the culprit"
            break
        kept = grown
    if last is not None and note:
        last.note = note
    return last


def _counted(nodes: list[ir.Node]) -> int:
    return sum(1 for n in nodes if n.op_type != "Constant")


def _grow(kept: list[ir.Node], walk: Walk, reference: Mapping[str, np.ndarray],
          candidate: Mapping[str, np.ndarray]) -> list[ir.Node] | None:
    """``kept`` plus the nearest producer of one of its inputs (the latest in topological order)."""
    mine = {id(n) for n in kept}
    producers = [walk.producer[v.name] for n in kept for v in node_inputs(n)
                 if v.name in walk.producer and id(walk.producer[v.name]) not in mine]
    if not producers:
        return None
    order = {id(n): i for i, n in enumerate(walk.nodes)}
    nearest = max(producers, key=lambda n: order[id(n)])
    return [nearest, *kept]


def _cut(model: ir.Model, kept: list[ir.Node], walk: Walk, reference: Mapping[str, np.ndarray],
         candidate: Mapping[str, np.ndarray]) -> tuple[onnx.ModelProto, dict[str, np.ndarray],
                                                      list[str]] | None:
    """The proto of the kept nodes (plus Constant producers), its feeds, and its outputs."""
    import onnx
    import onnx_ir as ir

    order = {id(n): i for i, n in enumerate(walk.nodes)}
    nodes = sorted(_with_constants(kept, walk), key=lambda n: order[id(n)])
    produced = {v.name for n in nodes for v in n.outputs if v.name}
    feeds: dict[str, np.ndarray] = {}
    initializers: dict[str, Any] = {}
    for node in nodes:
        for value in node_inputs(node):
            if not value.name or value.name in produced or value.name in feeds:
                continue
            if value.const_value is not None:
                initializers[value.name] = value.const_value
                continue
            array = reference.get(value.name, candidate.get(value.name))
            if array is None:
                return None  # an input neither stage gave: this cut can't be fed
            feeds[value.name] = np.asarray(array)
    outputs = [v.name for v in kept[-1].outputs if v.name]
    graph = onnx.helper.make_graph(
        [ir.serde.serialize_node(n) for n in nodes], "unframe_repro",
        [_value_info(name, array) for name, array in feeds.items()],
        [_value_info(name, np.asarray(reference[name])) if name in reference else
         onnx.helper.make_empty_tensor_value_info(name) for name in outputs],
        [ir.serde.serialize_tensor(t) for t in initializers.values()])
    proto = onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in model.opset_imports.items()],
        producer_name="unframe locator")
    proto.ir_version = model.ir_version
    for fn in model.functions.values():
        proto.functions.append(ir.serde.serialize_function(fn))
    return proto, feeds, outputs


def _with_constants(kept: list[ir.Node], walk: Walk) -> list[ir.Node]:
    out = list(kept)
    mine = {id(n) for n in kept}
    for node in kept:
        for value in node_inputs(node):
            producer = walk.producer.get(value.name)
            if producer is not None and producer.op_type == "Constant" and id(producer) not in mine:
                out.append(producer)
                mine.add(id(producer))
    return out


def _value_info(name: str, array: np.ndarray) -> Any:
    import onnx

    elem = onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
    return onnx.helper.make_tensor_value_info(name, elem, list(array.shape))


def _try(cut: tuple[onnx.ModelProto, dict[str, np.ndarray], list[str]],
         reference: Mapping[str, np.ndarray], reproduce: Reproduce | None, tolerance: float) -> Repro:
    import onnx_ir as ir

    proto, feeds, outputs = cut
    model = ir.serde.deserialize_model(proto)
    expected = {n: np.asarray(reference[n]) for n in outputs if n in reference}
    nodes = _counted(list(model.graph))
    if reproduce is None:
        return Repro(model, feeds, expected, None, None, nodes)
    try:
        got = reproduce(ir.serde.deserialize_model(proto), dict(feeds))
    except Exception as exc:  # the stage refuses the cut on its own: say so, keep the cut
        return Repro(model, feeds, expected, None, None, nodes,
                     note=f"the stage could not run the cut alone: {type(exc).__name__}: {exc}")
    bad = any(not diff(n, expected[n], got[n], tolerance).ok for n in expected if n in got)
    return Repro(model, feeds, expected, got, bad, nodes)


def write_repro(repro: Repro, folder: Path) -> dict[str, str]:
    """repro.onnx, repro_inputs.npz (feeds by input name: ``--sample-inputs`` takes it) and
    repro_outputs.npz (``reference/<name>``, ``candidate/<name>``)."""
    import onnx_ir as ir

    folder.mkdir(parents=True, exist_ok=True)
    model_path, inputs_path = folder / "repro.onnx", folder / "repro_inputs.npz"
    outputs_path = folder / "repro_outputs.npz"
    ir.save(repro.model, model_path)
    np.savez(inputs_path, **repro.feeds)
    arrays = {f"reference/{k}": v for k, v in repro.expected.items()}
    arrays.update({f"candidate/{k}": np.asarray(v) for k, v in (repro.got or {}).items()})
    np.savez(outputs_path, **arrays)
    return {"repro": str(model_path), "inputs": str(inputs_path), "outputs": str(outputs_path)}
