"""End to end on programs we did not write: small torch models converted by coremltools' OWN torch
frontend, saved as .mlpackage, loaded back by MILRunner and compared with torch eager."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mil_eval_helpers import ct

from unframe.converters.backends.coreml.mil_eval import MILRunner

torch = pytest.importorskip("torch", reason="needs torch")


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2)
        self.fc = torch.nn.Linear(8 * 4 * 4, 5)

    def forward(self, x: Any) -> Any:
        y = torch.relu(self.bn(self.conv1(x)))
        y = torch.nn.functional.max_pool2d(y, 2)
        y = torch.nn.functional.avg_pool2d(torch.relu(self.conv2(y)), 1)
        y = torch.nn.functional.adaptive_avg_pool2d(y, 4)
        return torch.softmax(self.fc(y.flatten(1)), dim=-1)


class Recurrent(torch.nn.Module):
    def __init__(self, cell: str) -> None:
        super().__init__()
        kind = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell]
        self.rnn = kind(6, 8, batch_first=True)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x: Any) -> Any:
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


class Encoder(torch.nn.Module):
    """A pre-built-free transformer encoder layer: multi-head self-attention + GELU FFN, post-norm.

    (coremltools 9's torch frontend cannot convert torch 2.13's traced nn.MultiheadAttention.)
    """

    def __init__(self, shape: tuple[int, int, int] = (2, 7, 16), heads: int = 4) -> None:
        super().__init__()
        dim = shape[-1]
        self.shape = shape
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm1 = torch.nn.LayerNorm(dim)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.ffn = torch.nn.Sequential(torch.nn.Linear(dim, 2 * dim), torch.nn.GELU(), torch.nn.Linear(2 * dim, dim))

    def forward(self, x: Any) -> Any:
        b, s, d = self.shape  # python ints: coremltools 9 mis-converts traced int(shape) on torch 2.13
        q, k, v = self.qkv(x).reshape(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        attended = (scores @ v).transpose(1, 2).reshape(b, s, d)
        y = self.norm1(x + self.proj(attended))
        return self.norm2(y + self.ffn(y))


MODELS = {
    "cnn": (SmallCNN, (2, 3, 16, 16)),
    "lstm": (lambda: Recurrent("lstm"), (2, 5, 6)),
    "gru": (lambda: Recurrent("gru"), (2, 5, 6)),
    "transformer": (Encoder, (2, 7, 16)),
}
TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2}


def _convert(model: Any, x: Any, precision: str, folder: Path, target: Any = None) -> Path:
    mlmodel = ct.convert(
        torch.jit.trace(model, x), inputs=[ct.TensorType(name="x", shape=tuple(x.shape))],
        convert_to="mlprogram", minimum_deployment_target=target,
        compute_precision=ct.precision.FLOAT32 if precision == "fp32" else ct.precision.FLOAT16,
    )
    path = folder / f"model_{precision}.mlpackage"
    mlmodel.save(str(path))
    return path


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("name", list(MODELS))
def test_coremltools_torch_conversion_matches_torch(name: str, precision: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    factory, shape = MODELS[name]
    model = factory().eval()
    if name == "cnn":
        with torch.no_grad():  # non-trivial batch-norm statistics
            model.bn.running_mean.uniform_(-0.5, 0.5)
            model.bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(*shape)
    with torch.no_grad():
        expected = model(x).numpy()
    runner = MILRunner(_convert(model, x, precision, tmp_path))
    (got,) = runner.run({"x": x.numpy()}).values()
    assert got.shape == expected.shape
    np.testing.assert_allclose(got.astype(np.float32), expected, atol=TOLERANCE[precision], rtol=TOLERANCE[precision])
    if precision == "fp16":
        assert "cast" in runner.ops_evaluated  # the program really computed in fp16


def test_runner_describes_the_package(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model = Recurrent("lstm").eval()
    x = torch.randn(2, 5, 6)
    runner = MILRunner(_convert(model, x, "fp32", tmp_path))
    assert runner.name.startswith("MIL evaluator (coremltools ")
    (spec,) = runner.input_specs()
    assert (spec.name, spec.shape, spec.dtype) == ("x", (2, 5, 6), "float32")
    assert list(runner.run({"x": x.numpy()})) == runner.output_names()


def test_runner_accepts_an_in_memory_mlmodel(tmp_path: Path) -> None:
    torch.manual_seed(2)
    model = SmallCNN().eval()
    x = torch.randn(1, 3, 16, 16)
    mlmodel = ct.convert(torch.jit.trace(model, x), inputs=[ct.TensorType(name="x", shape=tuple(x.shape))],
                         convert_to="mlprogram", compute_precision=ct.precision.FLOAT32)
    (got,) = MILRunner(mlmodel).run({"x": x.numpy()}).values()
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), atol=1e-4)


class Fn(torch.nn.Module):
    """A one-expression model for the op sweep below."""

    def __init__(self, fn: Any, *modules: Any) -> None:
        super().__init__()
        self.fn = fn
        self.mods = torch.nn.ModuleList(modules)

    def forward(self, x: Any) -> Any:
        return self.fn(self.mods, x)


F = torch.nn.functional
SWEEP = {  # what coremltools' torch frontend emits for common layers (upsample caught a real bug)
    "conv_transpose": (lambda: Fn(lambda m, x: m[0](x), torch.nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1)), (1, 3, 5, 6)),
    "upsample": (lambda: Fn(lambda m, x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
                            + F.interpolate(x, scale_factor=2, mode="nearest")), (1, 3, 5, 6)),
    "pad": (lambda: Fn(lambda m, x: F.pad(x, (1, 2, 2, 1), mode="reflect") + F.pad(x, (1, 2, 2, 1), mode="replicate")), (1, 3, 5, 6)),
    "activations": (lambda: Fn(lambda m, x: torch.cumsum(x, 1) + torch.topk(x, 2, dim=-1).values.sum(-1, keepdim=True)
                               + x.flip(-1) + F.hardswish(x) + F.hardsigmoid(x) + F.elu(x) + F.leaky_relu(x, 0.2)), (2, 3, 4, 6)),
    "norms": (lambda: Fn(lambda m, x: m[0](x) + m[1](x) + F.normalize(x, dim=1),
                         torch.nn.GroupNorm(3, 6), torch.nn.InstanceNorm2d(6, affine=True)), (2, 6, 4, 5)),
    "ceil_pools": (lambda: Fn(lambda m, x: F.avg_pool2d(x, 3, 2, padding=1, ceil_mode=True)
                              + F.max_pool2d(x, 3, 2, padding=1, ceil_mode=True)), (1, 2, 9, 8)),
    "bilstm": (lambda: Fn(lambda m, x: m[0](x)[0], torch.nn.LSTM(4, 5, batch_first=True, bidirectional=True, num_layers=2)), (2, 6, 4)),
    "indexing": (lambda: Fn(lambda m, x: torch.gather(x, 1, torch.tensor([[0, 2, 1], [1, 1, 0]])) + x[:, [2, 0, 1]]
                            + torch.where(x > 0, x, x * 0.1).clamp(-0.5, 0.7)), (2, 3)),
}


@pytest.mark.parametrize("name", list(SWEEP))
def test_torch_op_sweep_matches_torch(name: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    factory, shape = SWEEP[name]
    model = factory().eval()
    x = torch.randn(*shape)
    with torch.no_grad():
        expected = model(x).numpy()
    (got,) = MILRunner(_convert(model, x, "fp32", tmp_path)).run({"x": x.numpy()}).values()
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)


IOS18 = {  # at iOS18 coremltools emits scaled_dot_product_attention, and GRU as a while_loop
    "sdpa": (lambda: Fn(lambda m, x: F.scaled_dot_product_attention(x, x, x, is_causal=True)), (1, 2, 5, 4),
             "scaled_dot_product_attention"),
    "gru_loop": (lambda: Recurrent("gru"), (2, 5, 6), "while_loop"),
}


@pytest.mark.parametrize("name", list(IOS18))
def test_ios18_programs_match_torch_in_fp16(name: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    factory, shape, op = IOS18[name]
    model = factory().eval()
    x = torch.randn(*shape)
    with torch.no_grad():
        expected = model(x).numpy()
    runner = MILRunner(_convert(model, x, "fp16", tmp_path, ct.target.iOS18))
    (got,) = runner.run({"x": x.numpy()}).values()
    assert op in runner.ops_evaluated
    np.testing.assert_allclose(got.astype(np.float32), expected, atol=1e-2, rtol=1e-2)
