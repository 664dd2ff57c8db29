"""Taps: one stage's intermediate values, under the ONNX value names they stand for.

The locator compares two stages value by value along one ONNX graph, so every runtime it looks
into must say what it computed *by ONNX name* (the ``Tap`` protocol, declared below the
converters in ``unframe.validate.intermediates`` with ``OnnxTap``, onnxruntime with every node
output of the main graph tapped). The locator sees runners and frontends, never backends; this
module maps each to its tap:

- a **runner**: one that implements ``validate.intermediates.ReadsIntermediates`` (the CoreML
  runner: the MIL evaluator through the translation's value map) is read through ``RunnerTap``;
  ``register_runner_tap`` adds a tap for a runner type that doesn't (a CoreML package another tool
  made runs on the bare MIL evaluator).
- a **frontend** (the source framework): ``register_source`` maps a frontend class to its tap
  (``torch_tap.py``, ``keras_tap.py``, ``sklearn_tap.py``) and, where it knows better than the
  node metadata (``origin.py``), how to name the place in the user's model a node comes from.

Both are keyed by the class's qualified name and matched along the MRO, so a subclass (a plugin's
frontend built on the torch one) gets its parent's, and nothing here imports a framework.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from unframe.validate.deferred import Deferred
from unframe.validate.intermediates import Feeds, OnnxTap, ReadsIntermediates, Tap, tapped_names

if TYPE_CHECKING:
    import onnx_ir as ir

    from unframe.converters.base import ExportResult, Frontend
    from unframe.validate.runner import Runner

__all__ = ["Feeds", "OnnxTap", "RunnerTap", "Tap", "register_runner_tap", "register_source", "runner_tap",
           "source_namer", "source_tap", "tapped_names"]

SourceTap = Callable[[Any, "ExportResult"], Tap | None]  # (native model, export) -> its tap
SourceOrigin = Callable[[Any, "ir.Node"], str]  # (native model, node) -> "layer 'dense' (Dense)"
RunnerTapFactory = Callable[[Any], Tap | None]


class RunnerTap:
    """A runner that reads its own intermediates (``ReadsIntermediates``), as a tap."""

    def __init__(self, runner: ReadsIntermediates, limitations: list[str]) -> None:
        self.runner = runner
        self.name = str(getattr(runner, "name", type(runner).__name__))
        self.limitations = list(limitations)

    def values(self, feeds: Feeds, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        return self.runner.intermediates(feeds, names)


@dataclass(frozen=True)
class SourceHooks:
    tap: SourceTap
    origin: SourceOrigin | None = None  # None: the node's metadata says (origin.node_origin)


_SOURCES: dict[str, SourceHooks] = {}
_RUNNERS: dict[str, RunnerTapFactory] = {}


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _lookup(table: dict[str, Any], obj: Any) -> Any:
    return next((table[k] for k in map(_qualified, type(obj).__mro__) if k in table), None)


def register_source(frontend_type: str, tap: SourceTap, origin: SourceOrigin | None = None) -> None:
    """The tap (and node namer) of a frontend class, by its qualified name."""
    _SOURCES[frontend_type] = SourceHooks(tap, origin)


def register_runner_tap(runner_type: str, factory: RunnerTapFactory) -> None:
    """A tap for a runner class that doesn't read its intermediates itself, by qualified name."""
    _RUNNERS[runner_type] = factory


def source_tap(frontend: Frontend, native: Any, export: ExportResult | None) -> Tap | None:
    """The source framework's tap for the export parity; None when the frontend has none."""
    hooks = _lookup(_SOURCES, frontend)
    return hooks.tap(native, export) if hooks is not None and export is not None else None


def source_namer(frontend: Frontend, native: Any) -> Callable[[ir.Node], str]:
    """node -> where in the user's model it comes from: the frontend's own namer where one is
    registered and finds it, else what the exporter wrote on the node."""
    from unframe.locate.origin import node_origin

    hooks = _lookup(_SOURCES, frontend)
    own = hooks.origin if hooks is not None else None
    if own is None:
        return node_origin
    return lambda node: own(native, node) or node_origin(node)


def runner_tap(runner: Runner | None) -> Tap | None:
    """A tap into what ``runner`` runs, or None when it can't show its intermediates here."""
    if isinstance(runner, Deferred):
        runner = runner.pin()
    if runner is None:
        return None
    factory = _lookup(_RUNNERS, runner)
    if factory is not None:
        return factory(runner)  # type: ignore[no-any-return]
    if isinstance(runner, ReadsIntermediates):
        limitations = runner.intermediate_limitations()
        return None if limitations is None else RunnerTap(runner, limitations)
    return None


# -- the built-in frontends and runners (their modules are imported when a tap is asked for) --
def _torch_tap(native: Any, export: ExportResult) -> Tap | None:
    from unframe.locate.torch_tap import TorchTap

    return TorchTap(native, export)


def _keras_tap(native: Any, export: ExportResult) -> Tap | None:
    from unframe.locate.keras_tap import KerasTap

    return KerasTap(native, export) if native.kind == "keras" else None


def _keras_layer(native: Any, node: ir.Node) -> str:
    from unframe.locate.keras_tap import layer_of_node

    return layer_of_node(native.obj, node) if native.kind == "keras" else ""


def _sklearn_tap(native: Any, export: ExportResult) -> Tap | None:
    from unframe.locate.sklearn_tap import SklearnTap

    return SklearnTap(native, export) if export.extra.get("methods") else None


def _bare_mil_tap(runner: Any) -> Tap | None:
    from unframe.converters.backends.coreml.runner import PackageValues

    return PackageValues(runner)


register_source("unframe.converters.frontends.torch.TorchFrontend", _torch_tap)
register_source("unframe.converters.frontends.tensorflow.TensorflowFrontend", _keras_tap, _keras_layer)
register_source("unframe.converters.frontends.sklearn.SklearnFrontend", _sklearn_tap)
register_runner_tap("unframe.converters.backends.coreml.mil_eval.runner.MILRunner", _bare_mil_tap)
