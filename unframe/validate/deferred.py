"""Runners built on first use, and the errors a runtime's refusal becomes.

A stage offers a runner of what it produced, but building one (an onnxruntime session, the MIL
program of a CoreML package) costs time that only a comparison needs: ``Deferred`` builds it when
parity first runs it, or when ``pin()`` asks (before a later stage changes the model in place).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from unframe import io
from unframe.errors import ConversionError, InputError, UnframeError
from unframe.validate.runner import Runner

if TYPE_CHECKING:
    import onnx_ir as ir


class Deferred(Runner):
    """A runner built on first use. The source framework's runner names its outputs after the
    exported graph, so it can only be built after the export; ``pin()`` builds it early, before
    a stage changes the model it would run.

    ``what`` names the model it runs and ``failure`` the error a runtime's refusal becomes: the
    source model failing in its own framework is bad input (``InputError``); a graph unframe or
    an exporter produced failing is a tool failure (``ConversionError``)."""

    timed = False  # the runner it builds is timed (its build too: a session is a tool's time)

    def __init__(self, factory: Callable[[], Runner], what: str = "the converted model",
                 failure: type[UnframeError] = ConversionError) -> None:
        self._factory = factory
        self._runner: Runner | None = None
        self.what = what
        self.failure = failure
        self._known: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def remember(self, feeds: dict[str, Any], outputs: dict[str, Any], name: str = "") -> None:
        """Outputs a run on these very feeds already gave (a frontend's own check of the same
        graph, by the runner named ``name``): the first ``run`` on them returns them instead of
        running again (once each), and the runner is built only if something else needs it."""
        self._known.append((feeds, outputs))
        self._known_name = name or getattr(self, "_known_name", "")

    @property
    def pinned(self) -> bool:
        """Whether the runner was built (a runtime holds the model)."""
        return self._runner is not None

    def pin(self) -> Runner:
        if self._runner is None:
            with self._typed("load"):
                self._runner = self._factory()
        return self._runner

    @property
    def name(self) -> str:  # type: ignore[override]
        if self._runner is None and getattr(self, "_known_name", ""):
            return self._known_name
        return self.pin().name

    def input_specs(self) -> Any:
        return self.pin().input_specs()

    def output_names(self) -> Any:
        return self.pin().output_names()

    def run(self, feeds: Any) -> dict[str, Any]:
        for i, (known, outputs) in enumerate(self._known):
            if known.keys() == feeds.keys() and all(known[k] is feeds[k] for k in feeds):
                del self._known[i]
                return dict(outputs)
        runner = self.pin()
        with self._typed("run", runner.name):
            return runner.run(feeds)

    @contextmanager
    def _typed(self, verb: str, runner: str = "its runner") -> Iterator[None]:
        try:
            yield
        except (UnframeError, KeyboardInterrupt):
            raise
        except Exception as exc:  # a runtime refusing the model: say which model, which runtime
            hint = ("the model is invalid for its runtime; pass --sample-inputs that fit it, or "
                    "--no-validate to convert without running it") if self.failure is InputError else \
                   ("report it with --debug output; --no-validate converts without running it")
            raise self.failure(f"{self.what} can't be {'run' if verb == 'run' else 'loaded'} by "
                               f"{runner} for parity: {type(exc).__name__}: {io.first_line(exc)}",
                               hint) from exc


def graph_fingerprint(model: ir.Model) -> tuple[Any, ...]:
    """What a run's outputs depend on, cheaply (no tensor read): each node's op and value names,
    and which tensor object each initializer holds. Outputs remembered for one fingerprint are
    reused only while the graph still has it (a frontend that edits the graph after its own check
    gets its graph run again)."""
    nodes = tuple((n.op_type, n.domain, tuple(v.name if v is not None else "" for v in n.inputs),
                   tuple(v.name for v in n.outputs)) for n in model.graph)
    weights = tuple((name, id(v.const_value)) for name, v in model.graph.initializers.items())
    return nodes, weights


def onnx_runner_of(model: ir.Model, what: str = "the converted model", optimization: str = "basic",
                   isolated: bool = False) -> Deferred:
    from unframe.validate.onnxruntime import onnx_runner

    return Deferred(lambda: onnx_runner(model, optimization, isolated), what)
