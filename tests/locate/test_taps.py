"""The locator sees runners, not backends: ``locate.taps.runner_tap`` turns a runner into a tap.

A runner that reads its own intermediates (``validate.intermediates.ReadsIntermediates``) is read
through it; a runner type registered with ``register_runner_tap`` gets its factory (a subclass
too, by the MRO); a runner that does neither has no tap; a ``Deferred`` runner is looked through.
The end-to-end case (the CoreML runner naming a wrong translator) is in test_locator.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx_ir as ir
import pytest

from unframe.locate import taps
from unframe.validate.deferred import Deferred
from unframe.validate.intermediates import ReadsIntermediates
from unframe.validate.onnxruntime import OnnxRuntimeRunner
from unframe.validate.runner import Runner


def _graph() -> ir.Model:
    """y = Relu(x) * 2, with the Relu's output named h."""
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([3]))
    relu = ir.node("Relu", [x], outputs=[ir.Value(name="h")])
    two = ir.Value(name="two", const_value=ir.tensor(np.array([2.0], np.float32)))
    mul = ir.node("Mul", [relu.outputs[0], two], outputs=[ir.Value(name="y")])
    graph = ir.Graph([x], mul.outputs, nodes=[relu, mul], initializers=[two], opset_imports={"": 21})
    return ir.Model(graph, ir_version=10)


class Reading(Runner):
    """Computes y = relu(x) * 2 in numpy and reads h, its intermediate, as the protocol says."""

    name = "numpy"

    def __init__(self, limitations: list[str] | None = None) -> None:
        self.limitations = limitations

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"y": np.maximum(feeds["x"], 0) * 2}

    def intermediate_limitations(self) -> list[str] | None:
        return self.limitations

    def intermediates(self, feeds: Mapping[str, np.ndarray],
                      names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        values = {"h": np.maximum(feeds["x"], 0), **self.run(feeds)}
        return {k: v for k, v in values.items() if names is None or k in names}


def test_a_runner_that_reads_its_intermediates_is_a_tap():
    feeds = {"x": np.array([-1.0, 0.5, 2.0], np.float32)}
    runner = Reading(["only h"])
    assert isinstance(runner, ReadsIntermediates)
    tap = taps.runner_tap(runner)
    assert tap is not None and tap.name == "numpy" and tap.limitations == ["only h"]
    got = tap.values(feeds, ["h"])
    assert list(got) == ["h"]
    # the same values onnxruntime computes for h with every intermediate tapped
    want = taps.OnnxTap(_graph()).values(feeds, ["h"])["h"]
    np.testing.assert_array_equal(got["h"], want)


def test_a_runner_that_cant_read_them_here_has_no_tap():
    assert taps.runner_tap(Reading(None)) is None  # (a stateful CoreML package says None)


def test_a_plain_runner_has_no_tap_and_a_deferred_one_is_looked_through():
    assert taps.runner_tap(OnnxRuntimeRunner(_graph())) is None
    assert taps.runner_tap(None) is None
    tap = taps.runner_tap(Deferred(lambda: Reading([]), "the numpy model"))
    assert isinstance(tap, taps.RunnerTap) and tap.limitations == []


def test_a_registered_runner_type_gets_its_factory_a_subclass_too(monkeypatch: pytest.MonkeyPatch):
    class Plain(Runner):
        def run(self, feeds):
            return {}

    class Sub(Plain):
        pass

    made: list[Runner] = []
    monkeypatch.setitem(taps._RUNNERS, f"{Plain.__module__}.{Plain.__qualname__}",
                        lambda runner: made.append(runner) or "the tap")
    assert taps.runner_tap(Plain()) == "the tap"
    assert taps.runner_tap(Sub()) == "the tap"
    assert [type(r) for r in made] == [Plain, Sub]


def test_the_built_in_frontends_have_taps_by_class_and_backends_none():
    from unframe.converters.base import Backend, Frontend

    known = set(taps._SOURCES)
    assert {"unframe.converters.frontends.torch.TorchFrontend",
            "unframe.converters.frontends.tensorflow.TensorflowFrontend",
            "unframe.converters.frontends.sklearn.SklearnFrontend"} <= known
    # nothing on the protocols themselves looks into a stage: that is the locator's
    assert not hasattr(Frontend, "tap") and not hasattr(Backend, "tap")
