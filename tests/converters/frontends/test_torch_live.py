"""convert() on a live torch model from a training script: the model comes back exactly as it
was (bit for bit, train flags, hooks, RNGs) on success, failure and Ctrl-C, and training goes on
as if the call never happened; wrapped, compiled, half-precision and DDP models convert."""

from __future__ import annotations

import random
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import unframe
from unframe import pipeline as pl
from unframe.converters.frontends._torch.preserve import Float32Settings
from unframe.errors import ConversionError, UnsupportedError, UsageError


class TrainNet(nn.Module):
    """Linear-BatchNorm-Dropout: train mode changes both the output and the running stats."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.drop = nn.Dropout(0.3)
        self.l2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(self.drop(torch.relu(self.bn(self.l1(x)))))


def trained(seed: int = 0) -> tuple[TrainNet, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    """A model two SGD steps into training, in train mode, with grads from the last step."""
    torch.manual_seed(seed)
    model = TrainNet()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)  # outputs of order 1
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(16, 8), torch.randn(16, 4)
    for _ in range(2):
        step(model, opt, x, y)
    return model, opt, x, y


def step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return float(loss.detach())


def fingerprint(model: nn.Module) -> dict[str, Any]:
    """Everything the issue lists, read independently of unframe's guard."""
    def bits(t: torch.Tensor) -> bytes:
        return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()

    return {
        "state": {k: (str(v.dtype), str(v.device), tuple(v.shape), bits(v))
                  for k, v in model.state_dict(keep_vars=True).items()},
        "training": {n: m.training for n, m in model.named_modules()},
        "requires_grad": {n: p.requires_grad for n, p in model.named_parameters()},
        "grads": {n: (None if p.grad is None else bits(p.grad)) for n, p in model.named_parameters()},
        "param_ids": {n: id(p) for n, p in model.named_parameters()},
        "hooks": {n: [len(getattr(m, h)) for h in ("_forward_hooks", "_forward_pre_hooks",
                                                    "_backward_hooks", "_state_dict_hooks")]
                  for n, m in model.named_modules()},
        "attrs": {n: sorted(vars(m)) for n, m in model.named_modules()},
        "torch_rng": bits(torch.get_rng_state()),
        "numpy_rng": np.random.get_state()[1].tobytes(),
        "python_rng": random.getstate(),
        "grad_enabled": torch.is_grad_enabled(),
    }


def test_train_mode_model_is_left_bit_for_bit_and_trains_on_identically(tmp_path: Path) -> None:
    model, opt, x, y = trained()
    twin, twin_opt, _, _ = trained()  # the same seeded run: an untouched copy, optimizer included
    model.register_forward_hook(lambda m, i, o: None)
    torch.manual_seed(7), np.random.seed(7), random.seed(7)
    before = fingerprint(model)

    result = unframe.convert(model, to="onnx", sample_inputs=x, output=tmp_path / "m.onnx")

    assert fingerprint(model) == before
    assert model.training and model.bn.training and model.drop.training
    assert result.report and (tmp_path / "m.onnx").is_file()
    assert any("training mode" in n for n in result.notes)
    scale = result.report.stages[0].outputs[0].scale
    assert 0.3 < scale < 30, scale  # a check of outputs of order 1, not of ~0
    # The same next step (dropout draws from the restored RNG) on the converted model and on
    # a copy that never saw unframe: the same loss and the same weights, bit for bit.
    torch.manual_seed(11)
    loss = step(model, opt, x, y)
    torch.manual_seed(11)
    twin_loss = step(twin, twin_opt, x, y)
    assert loss == twin_loss
    for (name, a), b in zip(model.state_dict().items(), twin.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("raised", [KeyboardInterrupt, ConversionError])
def test_model_restored_and_nothing_written_when_a_stage_is_interrupted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raised: type[BaseException]) -> None:
    model, _, x, _ = trained()
    before = fingerprint(model)
    seen: dict[str, bool] = {}

    def interrupted(self: pl.ParityStage, flow: pl.Flow) -> None:
        seen["eval inside"] = not model.training and not model.bn.training
        model.bn.running_mean.add_(1.0)  # a stage that changed state before it was stopped
        raise raised("stop") if raised is KeyboardInterrupt else raised("stop", "")

    monkeypatch.setattr(pl.ParityStage, "run", interrupted)
    out = tmp_path / "m.onnx"
    with pytest.raises(raised):
        unframe.convert(model, to="onnx", sample_inputs=x, output=out)
    assert seen == {"eval inside": True}
    assert fingerprint(model) == before
    assert list(tmp_path.iterdir()) == []  # no output, no staging folder


def test_interrupt_in_the_write_stage_leaves_no_partial_file(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    model, _, x, _ = trained()
    before = fingerprint(model)
    from unframe.converters.backends.onnx import OnnxBackend

    def half_written(self: Any, artifact: Any, path: Path) -> list[Path]:
        path.write_bytes(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(OnnxBackend, "write", half_written)
    with pytest.raises(KeyboardInterrupt):
        unframe.convert(model, to="onnx", sample_inputs=x, output=tmp_path / "m.onnx")
    assert fingerprint(model) == before
    assert list(tmp_path.iterdir()) == []


def test_compiled_model_converts_and_stays_compiled(tmp_path: Path) -> None:
    model, opt, x, y = trained()
    compiled = torch.compile(model, backend="eager")
    before = fingerprint(model)
    result = unframe.convert(compiled, to="onnx", sample_inputs=x)
    assert result.report
    assert any("torch.compile" in n for n in result.notes)
    assert [v.name for v in result.model.graph.inputs] == ["x"]  # the original forward's name
    assert fingerprint(model) == before and compiled.training
    assert np.isfinite(step(compiled, opt, x, y))


def test_bf16_model_exports_in_bf16_and_checks_at_its_tolerance() -> None:
    model, _, x, _ = trained()
    model = model.to(torch.bfloat16)
    before = fingerprint(model)
    result = unframe.convert(model, to="onnx", sample_inputs=x.to(torch.bfloat16))
    graph = result.model.graph
    assert graph.inputs[0].dtype.name == "BFLOAT16" and graph.outputs[0].dtype.name == "BFLOAT16"
    out = result.report.stages[0].outputs[0]
    # bf16's defaults, the atol grown with the output's scale (validate.tolerances)
    assert out.ref_dtype == "bfloat16" and out.rtol == 5e-2 and out.atol == pytest.approx(5e-2 * max(1.0, out.scale))
    assert 0.3 < out.scale < 30 and 0 < out.max_abs <= out.atol + out.rtol * out.scale
    assert fingerprint(model) == before

    as_fp32 = unframe.convert(model, to="onnx", sample_inputs=x.to(torch.bfloat16), precision="fp32")
    assert as_fp32.model.graph.inputs[0].dtype.name == "FLOAT"
    assert as_fp32.report.stages[0].outputs[0].ref_dtype == "float32"
    assert fingerprint(model) == before  # cast for the export, restored: storage, dtype, bits


def test_fp16_model_runs_parity_in_fp16() -> None:
    model, _, x, _ = trained()
    model = model.to(torch.float16).eval()
    result = unframe.convert(model, to="onnx", sample_inputs=x.to(torch.float16))
    out = result.report.stages[0].outputs[0]
    assert out.ref_dtype == "float16" and out.out_dtype == "float16" and result.report
    assert "onnxruntime" in result.report.stages[0].candidate


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_ddp_model_on_a_single_process_gloo_group(tmp_path: Path) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0,
                            world_size=1)
    try:
        model, _, x, y = trained()
        ddp = nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        step(ddp, opt, x, y)
        before = fingerprint(ddp)
        result = unframe.convert(ddp, to="onnx", sample_inputs=x, output=tmp_path / "ddp.onnx")
        assert result.report and any("DistributedDataParallel" in n for n in result.notes)
        assert fingerprint(ddp) == before
        assert np.isfinite(step(ddp, opt, x, y))  # DDP's reducer still works
    finally:
        dist.destroy_process_group()


def test_a_model_too_big_to_copy_is_refused_before_copying(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    import unframe.preserve as preserve

    model, _, x, _ = trained()
    before = fingerprint(model)
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    monkeypatch.setattr(preserve, "available_memory", lambda: weights)  # needs room to spare
    with pytest.raises(UsageError, match="copying them to the CPU") as err:
        unframe.convert(model, to="onnx", sample_inputs=x, output=tmp_path / "m.onnx")
    assert err.value.exit_code == 2 and "checkpoint" in err.value.hint
    assert fingerprint(model) == before and list(tmp_path.iterdir()) == []


def test_fake_quantized_model_the_exporters_refuse_is_exit_4() -> None:
    import torch.ao.quantization as tq

    class Quant(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.lin, self.dq = tq.QuantStub(), nn.Linear(8, 4), tq.DeQuantStub()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.dq(self.lin(self.q(x)))

    torch.manual_seed(0)
    model = Quant().train()
    model.qconfig = tq.get_default_qat_qconfig("fbgemm")
    tq.prepare_qat(model, inplace=True)
    x = torch.randn(4, 8)
    model(x)
    before = fingerprint(model)
    with pytest.raises(UnsupportedError, match="fake-quantized") as err:
        unframe.convert(model, to="onnx", sample_inputs=x)
    assert err.value.exit_code == 4 and "FusedMovingAvgObsFakeQuantize" in err.value.message
    assert fingerprint(model) == before  # observers ran in the failed exports; stats restored


def test_hf_model_with_cache_exports_without_it_and_keeps_its_config() -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2,
                                     bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config).train()
    ids = torch.randint(0, 50, (2, 7))
    before = fingerprint(model)
    result = unframe.convert(model, to="onnx", sample_inputs={"input_ids": ids})
    assert result.report
    assert [v.name for v in result.model.graph.outputs] == ["logits"]  # the ModelOutput's key
    assert any("use_cache=False" in n for n in result.notes)
    assert model.config.use_cache is True and fingerprint(model) == before


@pytest.mark.parametrize("slice_bytes", [None, 64])
def test_large_weights_are_kept_on_disk_and_restored_from_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slice_bytes: int | None) -> None:
    """Past SPILL_BYTES the guard's copy goes to an unlinked temporary file, not to memory (a
    1B-parameter model would double its RSS): a stage that changed the weights is still undone,
    compared and written back a slice at a time (64 bytes: many slices per tensor)."""
    from unframe.converters.frontends._torch import preserve as guard

    model, _, x, _ = trained()
    before = fingerprint(model)
    monkeypatch.setattr(guard, "SPILL_BYTES", 0)
    if slice_bytes is not None:
        monkeypatch.setattr(guard, "RESTORE_SLICE_BYTES", slice_bytes)
    monkeypatch.setattr(guard, "check_copy_fits", lambda *a, **k: pytest.fail("copied to memory"))
    spills: list[Any] = []
    real_open = guard._Spill.open
    monkeypatch.setattr(guard._Spill, "open", classmethod(
        lambda cls, n, w: spills.append(real_open(n, w)) or spills[-1]))

    def changes_weights(self: pl.ParityStage, flow: pl.Flow) -> None:
        with torch.no_grad():
            model.l1.weight.data.mul_(3.0)  # through .data: no version bump to notice
            model.bn.running_mean.add_(1.0)
        raise ConversionError("stop", "")

    monkeypatch.setattr(pl.ParityStage, "run", changes_weights)
    with pytest.raises(ConversionError):
        unframe.convert(model, to="onnx", sample_inputs=x, output=tmp_path / "m.onnx")
    assert fingerprint(model) == before
    assert len(spills) == 1 and spills[0].offset == sum(
        t.numel() * t.element_size() for t in guard._unique_tensors(list(model.modules())))
    assert spills[0].file.closed


class RecordsPrecision(nn.Module):
    """A small MLP that records, on every run, how torch may compute float32."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.seen: list[tuple[Any, ...]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append((*_precisions()[1:], *_legacy()))
        return torch.tanh(self.fc(x)) * 3


_NODES = [torch.backends, torch.backends.cuda.matmul, torch.backends.cudnn, torch.backends.cudnn.conv,
          torch.backends.cudnn.rnn, torch.backends.mkldnn, torch.backends.mkldnn.matmul,
          torch.backends.mkldnn.conv, torch.backends.mkldnn.rnn]  # the global setting first, leaves after


def _precisions() -> tuple[str, ...]:
    return tuple(node.fp32_precision for node in _NODES)


def _legacy() -> tuple[Any, ...]:
    """What a script using the legacy API reads (torch raises when the two APIs were mixed)."""
    out: list[Any] = []
    for read in (lambda: torch.backends.cuda.matmul.allow_tf32, lambda: torch.backends.cudnn.allow_tf32,
                 torch.get_float32_matmul_precision):
        try:
            out.append(read())
        except RuntimeError:
            out.append("raises")
    return tuple(out)


def _set_shortcuts(how: str) -> None:
    if how == "legacy API":
        torch.set_float32_matmul_precision("high")  # cuBLAS and oneDNN matmuls in TF32
        torch.backends.cudnn.allow_tf32 = True
    elif how == "new API, global":
        torch.backends.fp32_precision = "tf32"
    else:
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        torch.backends.mkldnn.matmul.fp32_precision = "bf16"


@pytest.mark.parametrize("how", ["legacy API", "new API, global", "new API, per backend"])
def test_unframe_runs_the_model_in_full_float32_and_leaves_the_users_tf32_setting(how: str) -> None:
    """TF32 (cuDNN's default on Ampere and later, cuBLAS's after set_float32_matmul_precision
    ("high")) or oneDNN's TF32/bf16 would put the reference 1e-3 off the graph. Every run of the
    model by unframe sees full float32, torch's legacy flags readable (its exporters read them);
    the script's settings read as before, in both of torch's APIs."""
    saved_strings = _precisions()
    saved = Float32Settings.capture()
    try:
        _set_shortcuts(how)
        before, legacy = _precisions(), _legacy()
        assert before[6] in ("tf32", "bf16")  # a shortcut for the CPU, the device here
        model = RecordsPrecision()
        result = unframe.convert(model, to="onnx", sample_inputs=torch.randn(2, 8))
        assert result.report and len(model.seen) >= 2  # the eager run and parity's
        for seen in set(model.seen):
            leaves, flags = seen[:8], seen[8:]
            assert {leaves[i] for i in (0, 2, 3, 5, 6, 7)} <= {"ieee", "none"}, seen
            assert flags == (False, False, "highest"), seen
        after = _precisions()
        if how == "new API, global":  # torch won't take oneDNN's parent back (preserve.py says so)
            after, before = after[:5] + after[6:], before[:5] + before[6:]
        assert after == before and _legacy() == legacy
        assert any("CPU was allowed TF32/bf16" in n for n in result.notes)
        assert not any("TorchScript" in n for n in result.notes), result.notes  # dynamo read the flags
    finally:
        saved.restore()
    n = 5 if how == "new API, global" else len(_NODES)  # oneDNN's parent again, and what inherits it
    assert _precisions()[:n] == saved_strings[:n]
    model = RecordsPrecision()
    assert not any("TF32" in n for n in unframe.convert(model, to="onnx", sample_inputs=torch.randn(2, 8)).notes)


_REAL_RUNS: list[str] = []  # outside the module: a copy of it (the exporters make some) counts here too


class CountsRuns(nn.Module):
    """Counts its runs on real tensors (the exporters' traces see fake or functional ones); with
    ``writes_input`` its forward doubles its input in place first."""

    def __init__(self, writes_input: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.writes_input = writes_input
        _REAL_RUNS.clear()

    @property
    def runs(self) -> int:
        return len(_REAL_RUNS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if type(x) is torch.Tensor:
            _REAL_RUNS.append("run")
        if self.writes_input:
            x.mul_(2)
        return torch.tanh(self.fc(x)) * 3


def test_the_eager_run_on_the_samples_is_parity_s_reference_not_run_again() -> None:
    model, x = CountsRuns(), torch.randn(2, 8)
    result = unframe.convert(model, to="onnx", sample_inputs=x, static=True)  # one feed: the samples
    assert result.report.stages[0].status == "passed" and result.report.stages[0].cases == 1
    assert model.runs == 1  # the frontend's eager run, whose outputs parity compared against
    assert result.timings["parity:export"] > 0
    unframe.convert(model, to="onnx", sample_inputs=x, static=True, validate=False)
    assert model.runs == 2  # no parity: the eager run alone (it names the outputs)


def test_a_forward_that_writes_its_input_is_checked_on_the_samples_and_leaves_them_alone(tmp_path: Path) -> None:
    """``x.mul_(2)`` in forward (``x /= 255`` in a preprocessing model): the graph computes the
    same; unframe runs the model on its own copy of the samples, and parity's feeds are the
    samples as they were before any run (it once compared against doubled ones and failed)."""
    import onnxruntime as ort

    model, x = CountsRuns(writes_input=True), torch.randn(2, 8)
    before = x.clone()
    result = unframe.convert(model, to="onnx", sample_inputs=x, static=True)
    assert result.report.stages[0].status == "passed", result.report
    assert torch.equal(x, before)  # the caller's samples
    [path] = result.save(tmp_path / "m.onnx")
    session = ort.InferenceSession(str(path))
    got = session.run(None, {session.get_inputs()[0].name: before.numpy()})[0]
    with torch.no_grad():
        expected = (torch.tanh(model.fc(before * 2)) * 3).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
