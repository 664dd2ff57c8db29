"""The export parity's float32 floor: the source model run in float64 says what float32 alone
moves its outputs by (unframe/validate/rounding.py ``source_float32_error``), real torch and
onnxruntime on both sides."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import unframe  # noqa: E402
from unframe.converters.frontends._torch.inputs import ModelInputs  # noqa: E402
from unframe.converters.frontends._torch.runner import TorchRunner, float64_runner  # noqa: E402
from unframe.validate.compare import compare  # noqa: E402
from unframe.validate.onnxruntime import OnnxRuntimeRunner  # noqa: E402
from unframe.validate.rounding import FLOAT32_MAX_SHARE, FLOAT32_WIDEN, source_float32_error  # noqa: E402

WIDTH = 256


class Cancelling(torch.nn.Module):
    """y = p(h) - q(h), h ~ 1e4 and q's weights p's times (1 + 1e-3 noise): y is of order 10 while
    float32 leaves p and q an error of ~1e-3, far past the default atol (1e-4 of the scale) and
    summed in other orders by torch and onnxruntime. Weights are order 1 (the outputs are not ~0)."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.body = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
                                        torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())
        for layer in (self.body[0], self.body[2]):
            torch.nn.init.normal_(layer.weight, std=2.0 / WIDTH ** 0.5, generator=g)
        self.p = torch.nn.Linear(WIDTH, 32, bias=False)
        self.q = torch.nn.Linear(WIDTH, 32, bias=False)
        w = torch.randn(32, WIDTH, generator=g) * 0.5
        with torch.no_grad():
            self.p.weight.copy_(w)
            self.q.weight.copy_(w * (1 + torch.randn(32, WIDTH, generator=g) * 1e-3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x) * 100
        return self.p(h) - self.q(h)


def _sample(seed: int = 0) -> torch.Tensor:
    return torch.randn(4, WIDTH, generator=torch.Generator().manual_seed(seed))


def _runners(model: torch.nn.Module, x: torch.Tensor) -> tuple[TorchRunner, TorchRunner]:
    inputs = ModelInputs(args=(x,), kwargs={}, names=["x"])
    ref = TorchRunner(model, inputs, ["y"], "Cancelling")
    precise = float64_runner(model, inputs, ["y"], "Cancelling")
    assert precise is not None
    return ref, precise


def test_the_float64_run_is_float64_arithmetic():
    """The measured error is |float32 torch - the same model in numpy float64| (by hand)."""
    model = Cancelling().eval()
    x = _sample()
    with torch.no_grad():
        y32 = model(x).numpy()
    w = {k: v.double().numpy() for k, v in model.state_dict().items()}
    h = np.maximum(x.double().numpy() @ w["body.0.weight"].T + w["body.0.bias"], 0)
    h = np.maximum(h @ w["body.2.weight"].T + w["body.2.bias"], 0) * 100
    y64 = h @ w["p.weight"].T - h @ w["q.weight"].T
    assert np.abs(y64).max() > 1  # order-1 outputs, not a model that proves nothing
    ref, precise = _runners(model, x)
    measured = source_float32_error(ref, precise, [{"x": x.numpy()}])
    assert measured is not None
    by_hand = float(np.abs(y32 - y64).max())
    assert by_hand > 1e-4  # float32 really costs this model something
    assert measured.errors["y"] == pytest.approx(by_hand, rel=1e-6)
    assert measured.allowance("y") == pytest.approx(
        min(FLOAT32_WIDEN * by_hand, FLOAT32_MAX_SHARE * measured.scales["y"]))


def test_export_parity_fails_at_the_default_and_passes_on_the_float32_floor(tmp_path):
    model = Cancelling().eval()
    x = _sample()
    out = tmp_path / "m.onnx"
    result = unframe.convert(model, to="onnx", sample_inputs=(x,), output=str(out), locate=False)
    text = str(result)
    assert "from the source's own float32 error" in text and "float64" in text
    # the same comparison without the floor fails: the floor is what let it through
    ref, _ = _runners(model, x)
    plain = compare(ref, OnnxRuntimeRunner(str(out)), [{"x": x.numpy()}])
    assert not plain, plain.summary()


def test_the_floor_is_capped_at_a_share_of_the_scale():
    """A model float32 can't compute (q = p (1 + 1e-7 noise): y is float32's noise itself) gets
    no more than FLOAT32_MAX_SHARE of its scale: a difference that large is still a failure."""
    model = Cancelling().eval()
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        model.q.weight.copy_(model.p.weight * (1 + torch.randn(model.p.weight.shape, generator=g) * 1e-7))
    x = _sample()
    ref, precise = _runners(model, x)
    measured = source_float32_error(ref, precise, [{"x": x.numpy()}])
    assert measured is not None
    assert FLOAT32_WIDEN * measured.errors["y"] > FLOAT32_MAX_SHARE * measured.scales["y"]
    assert measured.allowance("y") == pytest.approx(FLOAT32_MAX_SHARE * measured.scales["y"])
