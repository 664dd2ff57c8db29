"""Intermediate values: what a runtime computed inside the model, under the ONNX value names.

The divergence locator (``unframe.locate``) compares two stages value by value along one ONNX
graph, and the precision pass reads the ranges of every value; so every runtime looked into must
say what it computed *by ONNX name*. Declared here, below the frontends and backends, so that a
backend offers its intermediates without knowing who reads them:

- ``Tap``: something that gives intermediate values by ONNX value name (``values(feeds, names)``).
- ``ReadsIntermediates``: the protocol a ``Runner`` implements when it can also read the values
  inside its model (the CoreML runner, through the MIL evaluator); ``unframe.locate.sources``
  turns such a runner into a tap.
- ``OnnxTap``: onnxruntime on a copy of the graph in which every node output of the main graph is
  also a graph output (nothing is fused away across a value that is an output).

A tap may give only some values (a fused op has no inner values, a subclassed Keras model has
only its outputs); the locator compares what both sides give.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    import onnx_ir as ir

Feeds = Mapping[str, np.ndarray]


class Tap(Protocol):
    """Intermediate values of one stage's runtime, by ONNX value name."""

    name: str
    limitations: list[str]

    def values(self, feeds: Feeds, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """The values for ``feeds`` (ONNX input names), keyed by ONNX value name; ``names``:
        only these, where the tap has them."""
        ...


@runtime_checkable
class ReadsIntermediates(Protocol):
    """A runner that can also read the values inside its model, by the ONNX value names they
    stand for (besides ``run``, which gives its outputs)."""

    def intermediate_limitations(self) -> list[str] | None:
        """What its intermediates leave out ([] when nothing), or None when it can't read them
        here (a stateful CoreML package: its outputs come through its states, not one call)."""
        ...

    def intermediates(self, feeds: Feeds, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """The values for ``feeds``, keyed by ONNX value name (the outputs included); ``names``:
        only these, where it has them."""
        ...


def tapped_names(model: ir.Model) -> list[str]:
    """Every named output of the main graph's nodes, in topological order, then graph inputs."""
    names: list[str] = []
    seen: set[str] = set()
    for node in model.graph:
        for value in node.outputs:
            if value.name and value.name not in seen and _is_tensor(value):
                names.append(value.name)
                seen.add(value.name)
    return names


def with_outputs(model: ir.Model, names: list[str]) -> ir.Model:
    """A copy of ``model`` (tensors shared) whose graph also outputs the node values ``names``:
    what a backend rebuilds to show intermediates its runtime fuses away (the ``probe`` of
    OpenVINO and TensorRT)."""
    marked = model.clone()
    produced = {v.name: v for node in marked.graph for v in node.outputs if v.name}
    present = {v.name for v in marked.graph.outputs}
    marked.graph.outputs.extend(produced[n] for n in names if n in produced and n not in present)
    return marked


def _is_tensor(value: ir.Value) -> bool:
    import onnx_ir as ir

    return value.type is None or isinstance(value.type, ir.TensorType)


class OnnxTap:
    """onnxruntime with every node output of the main graph as a graph output.

    Before::  x -> Conv -> c -> Relu -> r -> MatMul -> y        (outputs: y)
    After::   same nodes                                       (outputs: y, c, r)

    The session is built once per set of names asked for; values inside subgraphs (If/Loop
    bodies) are not tapped."""

    def __init__(self, model: ir.Model, *, optimization: str = "basic") -> None:
        from unframe.distributions import dist_version

        self.model = model
        self.name = f"onnxruntime {dist_version('onnxruntime') or '?'}"
        self.limitations: list[str] = []
        self._optimization = optimization
        self._runners: dict[tuple[str, ...], Any] = {}

    def values(self, feeds: Feeds, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        wanted = tuple(names) if names is not None else tuple(tapped_names(self.model))
        known = set(tapped_names(self.model)) | {v.name for v in self.model.graph.outputs}
        key = tuple(n for n in wanted if n in known)
        runner = self._runners.get(key)
        if runner is None:
            runner = self._runners[key] = self._runner(key)
        return {k: v for k, v in runner.run(feeds).items() if k in set(key)}

    def _runner(self, names: tuple[str, ...]) -> Any:
        from unframe.validate.onnxruntime import OnnxRuntimeRunner

        probe = self.model.clone()
        have = {v.name for v in probe.graph.outputs}
        by_name = {v.name: v for node in probe.graph for v in node.outputs if v.name}
        for name in names:
            if name not in have and name in by_name:
                probe.graph.outputs.append(by_name[name])
                have.add(name)
        return OnnxRuntimeRunner(probe, optimization=self._optimization)
