"""Dynamic only where proven (issue 34): an axis is dynamic only where the model ran with it
changed (a probe feed unframe draws) and the export takes it; a probe that fails is unframe's
guess, never the user's exit 3. Cases from the peers' op suites, and a CNN that keeps its
dynamic batch and two parity feeds without paying a forward twice.

Each model is converted end to end (export, parity on onnxruntime, the ONNX artifact), then the
artifact is run by onnxruntime on the samples, independently of unframe's own parity."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch")
pytest.importorskip("onnxscript", reason="needs onnxscript (torch.onnx dynamo exporter)")

import onnxruntime as ort  # noqa: E402
import torch_models as tm  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import unframe  # noqa: E402

GEN = torch.Generator().manual_seed(34)


def randn(*shape: int) -> Any:
    return torch.randn(*shape, generator=GEN)


class Call(nn.Module):
    """forward(*args): a function of the inputs, as the peers' op suites wrap an op."""

    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


class Pair(nn.Module):
    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: Any, y: Any) -> Any:
        return self.fn(x, y)


class LstmWithState(nn.Module):
    """``LSTM(x, (h0, c0))`` (sequence first): the state's batch is its axis 1."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(6, 5)

    def forward(self, x: Any, h0: Any, c0: Any) -> Any:
        return self.lstm(x, (h0, c0))[0]


class AffineGrid(nn.Module):
    """A sampling grid whose output size (and so theta's batch) the module fixes."""

    def forward(self, theta: Any) -> Any:
        return F.affine_grid(theta, [2, 1, 4, 5], align_corners=False)


class ConstantGather(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("index", torch.tensor([[0, 1], [1, 0], [2, 2]]))

    def forward(self, x: Any) -> Any:
        return torch.gather(x, 0, self.index) * 3.0


def convert(model: nn.Module, samples: Any, **options: Any) -> Any:
    return unframe.convert(model.eval(), to="onnx", sample_inputs=samples, **options)


def eager(model: nn.Module, samples: tuple[Any, ...]) -> list[np.ndarray]:
    with torch.no_grad():
        out = model(*samples)
    return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]


def onnxruntime_outputs(result: Any, samples: tuple[Any, ...]) -> list[np.ndarray]:
    session = ort.InferenceSession(_proto(result))
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, [s.numpy() for s in samples], strict=True)))


def _proto(result: Any) -> bytes:
    import onnx_ir as ir

    return ir.serde.serialize_model(result.model).SerializeToString()


def batch_notes(result: Any) -> list[str]:
    return [n for n in result.notes if "batch" in n]


def check_numbers(model: nn.Module, samples: tuple[Any, ...], result: Any) -> None:
    for want, got in zip(eager(model, samples), onnxruntime_outputs(result, samples), strict=True):
        assert float(np.abs(want).max()) > 0.1  # parity on outputs of order one
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("name,model,samples,size", [
    ("cross on (3,)", Call(lambda a, b: torch.cross(a, b, dim=0)), (randn(3), randn(3)), 4),
    ("Linear on a rank-1 input", tm.seeded(lambda: Call(nn.Linear(4, 3))), (randn(4),), 5),
    ("affine_grid with a fixed-batch theta", AffineGrid(), (randn(2, 2, 3),), 3),
])
def test_a_probe_the_model_refuses_keeps_the_samples_shapes(name: str, model: nn.Module, samples: Any,
                                                            size: int) -> None:
    result = convert(model, samples)
    assert [v.shape is not None and all(isinstance(d, int) for d in v.shape)
            for v in result.model.graph.inputs] == [True] * len(samples), name
    assert len(result.export.feeds) == 1
    why = [n for n in batch_notes(result) if f"did not run with batch {size}:" in n]
    assert why and "RuntimeError" in why[0], result.notes
    check_numbers(model, samples, result)


def test_a_broadcast_partner_keeps_its_shape_and_the_batch_stays_dynamic() -> None:
    model, samples = Pair(lambda x, y: x * y + y), (randn(3, 4, 5), randn(5))
    result = convert(model, samples)
    x, y = result.model.graph.inputs
    assert not isinstance(x.shape[0], int) and list(y.shape) == [5]
    assert [f["x"].shape[0] for f in result.export.feeds] == [3, 4]
    assert any("dynamic batch (axis 0 of x)" in n for n in result.notes), result.notes
    check_numbers(model, samples, result)


def test_triu_on_a_square_matrix_is_dynamic_where_it_runs() -> None:
    model, samples = Call(lambda a: torch.triu(a) * 2.0), (randn(5, 5),)
    result = convert(model, samples)
    assert result.export.route == "dynamo", result.notes  # forward(*args) reaches dynamo
    assert [f["input_0"].shape for f in result.export.feeds] == [(5, 5), (6, 5)]
    check_numbers(model, samples, result)


def test_lstm_state_with_its_batch_on_axis_1() -> None:
    """The sequence axis (x's axis 0) runs changed, but the exporter bakes the samples' length
    into the graph: exported again with the samples' shapes, before any other exporter."""
    model = tm.seeded(LstmWithState)
    samples = (randn(7, 2, 6), randn(1, 2, 5), randn(1, 2, 5))
    result = convert(model, samples)
    assert result.export.route == "dynamo", result.notes
    assert [list(v.shape) for v in result.model.graph.inputs] == [[7, 2, 6], [1, 2, 5], [1, 2, 5]]
    assert len(result.export.feeds) == 1
    assert any("fixes axis 0 of output_0 at 7 where batch 8 gives 8" in n for n in result.notes), result.notes
    check_numbers(model, samples, result)


def test_constant_gather_index() -> None:
    """The gathered rows come from the constant index: x runs at another batch, the output
    keeps the index's shape."""
    model, samples = ConstantGather(), (randn(3, 2),)
    result = convert(model, samples)
    assert [f["x"].shape[0] for f in result.export.feeds] == [3, 4]
    assert list(result.model.graph.outputs[0].shape) == [3, 2]
    check_numbers(model, samples, result)


class BatchSwitch(nn.Module):
    """Eager runs at any batch, but branches on the batch size: torch.export refuses a dynamic
    batch here (it would specialize it)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: Any) -> Any:
        if x.shape[0] == 2:
            return self.lin(x) * 2.0
        return self.lin(x) - 1.0


def test_an_exporter_refusing_the_dynamic_axis_is_asked_again_static_before_the_fallback() -> None:
    model, samples = tm.seeded(BatchSwitch), (randn(2, 4),)
    result = convert(model, samples)
    assert result.export.route == "dynamo", result.notes  # not the TorchScript fallback
    assert len(result.export.feeds) == 1
    assert any("the dynamo exporter refused it" in n for n in result.notes), result.notes
    check_numbers(model, samples, result)


class Counting(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cnn = tm.make_cnn()
        self.calls: list[int] = []

    def forward(self, x: Any) -> Any:
        from torch._subclasses.fake_tensor import FakeTensor

        if not isinstance(x, FakeTensor):  # a run on real numbers, not torch.export's tracing
            self.calls.append(int(x.shape[0]))
        return self.cnn(x)


def test_a_cnn_keeps_its_dynamic_batch_with_two_parity_feeds_and_no_forward_paid_twice() -> None:
    model = Counting().eval()
    result = unframe.convert(model, to="onnx", sample_inputs=tm.cnn_sample(2))
    assert not isinstance(result.model.graph.inputs[0].shape[0], int)
    assert [f["x"].shape[0] for f in result.export.feeds] == [2, 3]
    export = next(s for s in result.report.stages if s.stage == "export")
    assert export.status == "passed" and export.cases == 2
    assert model.calls == [2, 3]  # the samples and the probe; parity reused both runs
    assert any("dynamic batch (axis 0 of x)" in n for n in result.notes), result.notes


def test_static_still_freezes_everything() -> None:
    result = convert(Pair(lambda x, y: x + y), (randn(2, 3), randn(2, 3)), static=True)
    assert [list(v.shape) for v in result.model.graph.inputs] == [[2, 3], [2, 3]]
    assert len(result.export.feeds) == 1 and not batch_notes(result)
