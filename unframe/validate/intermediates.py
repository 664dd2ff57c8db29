"""Taps: one stage's intermediate values, under the ONNX value names they stand for.

The locator compares two stages value by value along one ONNX graph, so every runtime it looks
into must say what it computed *by ONNX name*:

- ``OnnxTap``: onnxruntime on a copy of the graph in which every node output of the main graph is
  also a graph output (nothing is fused away across a value that is an output).
- ``MilTap``: unframe's MIL evaluator on a saved Core ML package, recording every op's output;
  the translation recorded which MIL var each ONNX value became (``unframe.values`` in the
  package's metadata), and coremltools' passes that rename a var (``conv_0`` ->
  ``conv_0_cast_fp16`` under fp16 compute) are undone by suffix.
- ``TorchTap`` (``torch_tap.py``) and ``KerasTap`` (``keras_tap.py``): the source frameworks.

A tap may give only some values (a fused op has no inner values, a subclassed Keras model has
only its outputs); the locator compares what both sides give.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

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


class MilTap:
    """The MIL evaluator on a saved ML Program, every op's output recorded and named back to the
    ONNX value it stands for (inputs and outputs go through the backend's own runner)."""

    # names coremltools' passes give a renamed var, after the var's own name
    RENAME_SUFFIXES = ("_cast_fp16", "_cast_fp32", "_to_fp16", "_to_fp32")

    def __init__(self, package: str | Path, io: dict[str, Any] | None = None,
                 values_map: Mapping[str, str] | None = None) -> None:
        from unframe.converters.backends.coreml.mil_eval import MILRunner

        self.inner = MILRunner(package)
        self.name = self.inner.name
        self.limitations: list[str] = []
        meta = _user_metadata(self.inner.program, package)
        self.io = io if io is not None else json.loads(meta.get("unframe.io", "{}") or "{}")
        self.values_map = dict(values_map if values_map is not None else
                               json.loads(meta.get("unframe.values", "{}") or "{}"))
        if not self.values_map:
            self.limitations.append("the package records no MIL name per ONNX value (made by "
                                    "an older unframe or another tool): only its outputs are tapped")

    def values(self, feeds: Feeds, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        from unframe.converters.backends.coreml.backend import CoreMLRunner

        captured: dict[str, Any] = {}
        recorder = _Recording(self.inner, captured)
        outputs = CoreMLRunner(recorder, self.io).run(feeds) if self.io else recorder.run(feeds)
        by_mil: dict[str, np.ndarray] = {}
        for mil_name, value in captured.items():
            if isinstance(value, np.ndarray):
                by_mil.setdefault(self._base(mil_name), value)
                by_mil[mil_name] = value
        wanted = set(names) if names is not None else None
        out: dict[str, np.ndarray] = {}
        for onnx_name, mil_name in self.values_map.items():
            if (wanted is None or onnx_name in wanted) and mil_name in by_mil:
                out[onnx_name] = by_mil[mil_name]
        for onnx_name, value in outputs.items():
            if wanted is None or onnx_name in wanted:
                out[onnx_name] = value
        return out

    def _base(self, mil_name: str) -> str:
        for suffix in self.RENAME_SUFFIXES:
            if mil_name.endswith(suffix):
                return mil_name[: -len(suffix)]
        return mil_name


class _Recording:
    """Runs the MIL program through the evaluator, keeping every top-level op's outputs."""

    def __init__(self, inner: Any, captured: dict[str, Any]) -> None:
        self.inner = inner
        self.captured = captured
        self.name = inner.name

    def run(self, feeds: Feeds) -> dict[str, Any]:
        from unframe.converters.backends.coreml.mil_eval.evaluator import evaluate

        return evaluate(self.inner.program, dict(feeds), self.inner.function, capture=self.captured)


def _user_metadata(program: Any, package: str | Path) -> dict[str, str]:
    from unframe.converters.backends.coreml.mil_eval._ct import import_coremltools

    ct = import_coremltools()
    model = ct.models.MLModel(str(package), skip_model_load=True)
    return dict(model.user_defined_metadata)
