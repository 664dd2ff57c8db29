"""Every input kind torch.export takes (issue 34): ``forward(self, *args)``, ``**kwargs``, and
non-tensor arguments (ints, bools, None, Python numbers inside nested tuples and dicts). The
dynamic shapes handed to torch.export mirror the structure it binds the inputs to (``*args`` as
one tuple), so these reach the dynamo exporter instead of the TorchScript fallback (which lacks
``aten::frac`` and computes atan2(0, 0) as inf). Checked end to end, and the artifact run by
onnxruntime against eager."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch")
pytest.importorskip("onnxscript", reason="needs onnxscript (torch.onnx dynamo exporter)")

import onnx_ir as ir  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch_models as tm  # noqa: E402
from torch import nn  # noqa: E402

import unframe  # noqa: E402

GEN = torch.Generator().manual_seed(36)


def randn(*shape: int) -> Any:
    return torch.randn(*shape, generator=GEN)


class StarArgs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, *args: Any) -> Any:
        x, y = args
        return self.lin(x) * torch.frac(y * 3.7) + torch.atan2(x, y)


class Keywords(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: Any, **kwargs: Any) -> Any:
        return self.lin(x) * kwargs["scale"] + kwargs["shift"]


class NonTensors(nn.Module):
    """An int, a bool, None, and a nested tuple/dict holding tensors and a Python float."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: Any, repeats: int, flag: bool, mask: Any, pair: Any, cfg: dict[str, Any]) -> Any:
        a, (b, c) = pair
        y = self.lin(x) * repeats + a - b * c * cfg["k"]
        if flag:
            y = y + cfg["bias"]
        return y if mask is None else y * mask


def run_artifact(result: Any, samples: dict[str, np.ndarray]) -> list[np.ndarray]:
    proto = ir.serde.serialize_model(result.model)
    session = ort.InferenceSession(proto.SerializeToString())
    return session.run(None, {i.name: samples[i.name] for i in session.get_inputs()})


def assert_close(got: np.ndarray, want: Any) -> None:
    want = want.detach().numpy()
    assert float(np.abs(want).max()) > 0.3  # outputs of order one
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-3)


def test_forward_star_args_reaches_dynamo_and_keeps_edge_values() -> None:
    model = tm.seeded(StarArgs)
    x, y = randn(3, 4), randn(3, 4)
    x[0, :2] = 0.0
    y[0, :2] = 0.0  # atan2(0, 0) is 0; the TorchScript fallback computed inf
    result = unframe.convert(model, to="onnx", sample_inputs=(x, y))
    assert result.export.route == "dynamo", result.notes
    assert not any("retried" in n or "refused" in n for n in result.notes), result.notes
    assert len(result.export.feeds) == 2  # the batch is dynamic: *args is bound as one tuple
    names = [v.name for v in result.model.graph.inputs]
    with torch.no_grad():
        want = model(x, y)
    got = run_artifact(result, dict(zip(names, (x.numpy(), y.numpy()), strict=True)))[0]
    assert np.isfinite(got).all()
    assert_close(got, want)


def test_keyword_arguments_by_name() -> None:
    model = tm.seeded(Keywords)
    samples = {"x": randn(2, 4), "scale": randn(2, 4), "shift": randn(2, 4)}
    result = unframe.convert(model, to="onnx", sample_inputs=samples)
    assert [v.name for v in result.model.graph.inputs] == ["x", "scale", "shift"]
    with torch.no_grad():
        want = model(**samples)
    assert_close(run_artifact(result, {k: v.numpy() for k, v in samples.items()})[0], want)


@pytest.mark.parametrize("flag,with_mask", [(True, False), (False, True)])
def test_ints_bools_none_and_nested_structures(flag: bool, with_mask: bool) -> None:
    model = tm.seeded(NonTensors)
    x, a, b, c, bias = (randn(2, 4) for _ in range(5))
    mask = randn(2, 4) if with_mask else None
    args = (x, 3, flag, mask, (a, (b, c)), {"k": 0.5, "bias": bias})
    result = unframe.convert(model, to="onnx", sample_inputs=args)
    assert result.export.route == "dynamo", result.notes
    names = [v.name for v in result.model.graph.inputs]
    expected = ["x", *(["mask"] if with_mask else []), "pair_0", "pair_1_0", "pair_1_1", "cfg_bias"]
    assert names == expected
    feeds = dict(zip(expected, [t.numpy() for t in (x, *([mask] if with_mask else []), a, b, c, bias)],
                     strict=True))
    with torch.no_grad():
        want = model(*args)
    assert_close(run_artifact(result, feeds)[0], want)


class ComplexInOut(nn.Module):
    """A complex input and a complex output: torch.onnx's graph holds them as real tensors with
    a last axis of 2 (``view_as_real``); parity and the feeds follow that convention."""

    def forward(self, z: Any, x: Any) -> Any:
        return z * torch.view_as_complex(x) + 1.0


def test_complex_inputs_and_outputs_as_the_graph_holds_them() -> None:
    z = torch.complex(randn(3, 4), randn(3, 4))
    x = randn(3, 4, 2)
    result = unframe.convert(ComplexInOut(), to="onnx", sample_inputs=(z, x))
    assert next(s for s in result.report.stages if s.stage == "export").status == "passed"
    assert [list(v.shape)[1:] for v in result.model.graph.outputs] == [[4, 2]]
    got = run_artifact(result, {"z": torch.view_as_real(z).numpy(), "x": x.numpy()})[0]
    want = torch.view_as_real(ComplexInOut()(z, x))
    assert_close(got, want)
