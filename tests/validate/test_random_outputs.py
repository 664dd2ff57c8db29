"""Random ops (randn, multinomial, dropout in training mode): a reference that changes between two
runs of the source on the same input can't be reproduced, so its values are not compared; the
stage is weak with that reason (shapes, dtypes and the deterministic outputs still compared) and
--strict-parity fails it. The second run is made only when an output disagrees. Real torch,
TensorFlow and onnxruntime on both sides; until this, every such model failed parity (exit 5)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import unframe
from unframe.errors import ParityError
from unframe.validate.compare import UNSTABLE, compare
from unframe.validate.runner import Runner

torch = pytest.importorskip("torch")


def _weak_outputs(stage) -> dict[str, str]:
    return {o.name: o.weak for o in stage.outputs if o.weak}


class Noisy(torch.nn.Module):
    """A deterministic head and a noisy one: ``(linear(x), x + randn_like(x))``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(6, 4)
        with torch.no_grad():
            self.linear.weight.mul_(3.0)  # outputs of order 1

    def forward(self, x):
        return self.linear(x), x + torch.randn_like(x)


class Sampler(torch.nn.Module):
    def forward(self, x):
        return torch.multinomial(torch.softmax(x, -1), 3), x * 2


class TrainingDropout(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.linear = torch.nn.Linear(6, 8)

    def forward(self, x):
        return torch.nn.functional.dropout(self.linear(x) * 2, 0.5, training=True)


X = torch.randn(3, 6, generator=torch.Generator().manual_seed(2))


def test_randn_output_is_weak_and_the_deterministic_one_is_still_compared() -> None:
    result = unframe.convert(Noisy().eval(), to="onnx", sample_inputs=(X,))
    stage = result.report.stages[0]
    assert stage and stage.stage == "export"
    weak = _weak_outputs(stage)
    assert list(weak) == [stage.outputs[1].name] and weak[stage.outputs[1].name] == UNSTABLE
    head = stage.outputs[0]
    assert not head.weak and head.total > 0 and head.scale > 0.5 and head.max_abs < 1e-4
    assert stage.outputs[1].out_shape == [3, 6] and stage.outputs[1].passed
    assert any("random ops" in n for n in result.notes)


def test_multinomial_and_training_dropout_are_weak_not_failures() -> None:
    for module in (Sampler(), TrainingDropout()):
        stage = unframe.convert(module, to="onnx", sample_inputs=(X,)).report.stages[0]
        assert stage and _weak_outputs(stage), type(module).__name__
        assert all(w == UNSTABLE for w in _weak_outputs(stage).values())


def test_strict_parity_fails_a_random_reference(tmp_path: Path) -> None:
    with pytest.raises(ParityError) as info:
        unframe.convert(Noisy().eval(), to="onnx", sample_inputs=(X,), output=tmp_path / "n.onnx",
                        strict_parity=True)
    assert info.value.exit_code == 5 and "random ops" in str(info.value)
    assert not (tmp_path / "n.onnx").exists()


def test_tensorflow_random_op_is_weak() -> None:
    tf = pytest.importorskip("tensorflow")

    @tf.function(input_signature=[tf.TensorSpec([None, 5], tf.float32)])
    def noisy(x):
        return x * 3.0 + tf.random.normal(tf.shape(x))

    x = np.random.default_rng(3).standard_normal((2, 5)).astype(np.float32)
    stage = unframe.convert(noisy, to="onnx", sample_inputs=(x,)).report.stages[0]
    assert stage and list(_weak_outputs(stage).values()) == [UNSTABLE]


class Counting(Runner):
    """Counts the runs of a runner it wraps."""

    def __init__(self, inner: Runner) -> None:
        self.inner, self.name, self.runs = inner, inner.name, 0

    def run(self, feeds):
        self.runs += 1
        return self.inner.run(feeds)


def test_the_reference_runs_again_only_when_an_output_disagrees(tmp_path: Path) -> None:
    from unframe.validate.onnxruntime import onnx_runner

    def graph(scale: float) -> object:
        import onnx_ir as ir

        c = numpy_helper.from_array(np.array(scale, np.float32), "c")
        g = helper.make_graph([helper.make_node("Mul", ["x", "c"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [c])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        return ir.serde.deserialize_model(m)

    feeds = [{"x": np.random.default_rng(i).standard_normal((2, 4)).astype(np.float32)} for i in range(2)]
    ref = Counting(onnx_runner(graph(2.0)))
    assert compare(ref, onnx_runner(graph(2.0)), feeds) and ref.runs == 2  # passes: one run per feed
    ref = Counting(onnx_runner(graph(2.0)))
    wrong = compare(ref, onnx_runner(graph(2.5)), feeds)  # a real difference: still a failure
    assert not wrong and ref.runs == 4 and not wrong.unstable and "output 'y'" in wrong.reason
