"""The torch frontend on small real architectures: export, then torch eager vs onnxruntime on
the frontend's own parity feeds (two batch sizes when the batch is dynamic)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch")
pytest.importorskip("onnxscript", reason="needs onnxscript (torch.onnx dynamo exporter)")

import onnx_ir as ir  # noqa: E402
import torch_models as tm  # noqa: E402

from unframe.converters.base import ConvertOptions, ExportResult, InputSpec  # noqa: E402
from unframe.converters.registry import FRONTENDS  # noqa: E402
from unframe.validate.onnxruntime import OnnxRuntimeRunner  # noqa: E402
from unframe.validate.runner import TensorSpec  # noqa: E402


def export(model: Any, samples: Any = None, expect_route: str = "dynamo",
           **options: Any) -> tuple[Any, ExportResult]:
    """Export; the route must be the expected one (a silent fallback would hide a bug)."""
    fe = FRONTENDS.get("torch")
    spec = InputSpec(samples=samples, tensors=options.pop("tensors", None),
                     static=options.pop("static", False), dynamic=options.pop("dynamic", []))
    opts = ConvertOptions(opset=options.pop("opset", None), options=options)
    native = fe.load(model, opts)
    result = fe.to_onnx(native, spec, opts)
    assert result.route == expect_route, result.notes
    return native, result


def assert_parity(native: Any, result: ExportResult, atol: float = 1e-4) -> None:
    ref = FRONTENDS.get("torch").runner(native, result)
    ort = OnnxRuntimeRunner(result.model)
    assert result.feeds, "the frontend gave no parity feeds"
    for feed in result.feeds:
        expected, got = ref.run(feed), ort.run(feed)
        assert list(expected) == list(got) == [v.name for v in result.model.graph.outputs]
        for name in expected:
            assert expected[name].shape == got[name].shape, name
            np.testing.assert_allclose(got[name], expected[name], atol=atol, rtol=1e-4, err_msg=name)


def batch_sizes(result: ExportResult) -> list[int]:
    return [next(iter(feed.values())).shape[0] for feed in result.feeds]


def is_symbolic(value: ir.Value, axis: int) -> bool:
    assert value.shape is not None
    return not isinstance(value.shape[axis], int)


def test_cnn_batchnorm_pooling_interpolate_dynamic_batch() -> None:
    native, result = export(tm.make_cnn(), tm.cnn_sample(2))
    assert result.route == "dynamo" and result.tool == "torch.onnx (dynamo)"
    ops = {n.op_type for n in result.model.graph}
    assert {"Conv", "MaxPool", "Resize"} <= ops
    assert [v.name for v in result.model.graph.outputs] == ["output_0", "output_1"]
    assert is_symbolic(result.model.graph.inputs[0], 0)
    assert batch_sizes(result) == [2, 3]
    assert_parity(native, result)


def test_lstm_dynamic_batch() -> None:
    x = torch.randn(3, 5, 6, generator=torch.Generator().manual_seed(2))
    native, result = export(tm.seeded(tm.Recurrent, cell="lstm"), x)
    assert "LSTM" in {n.op_type for n in result.model.graph}
    assert batch_sizes(result) == [3, 4]
    assert_parity(native, result)


def test_gru() -> None:
    # Static: torch.export needs ~13 s here to trace a GRU with a symbolic batch.
    x = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(2))
    native, result = export(tm.seeded(tm.Recurrent, cell="gru"), x, static=True)
    assert "GRU" in {n.op_type for n in result.model.graph}
    assert_parity(native, result)


def test_transformer_encoder_attention_layernorm_gelu() -> None:
    tokens = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(3))
    native, result = export(tm.seeded(tm.TinyEncoder), tokens)
    assert [v.name for v in result.model.graph.inputs] == ["tokens"]
    assert result.model.graph.inputs[0].dtype == ir.DataType.INT64
    assert_parity(native, result)


class MaskedAttention(torch.nn.Module):
    """Attention with a bias mask whose output is reshaped after a transpose, as in HF BEiT, Swin
    and T5: traced with CPU flash attention the reshape is recorded as a view that torch.onnx's
    own re-trace (math kernel layout) can't take."""

    def __init__(self, width: int = 32, heads: int = 4, length: int = 17) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.out = (torch.nn.Linear(width, width) for _ in range(4))
        self.bias = torch.nn.Parameter(torch.randn(heads, length, length))

    def forward(self, x: Any) -> Any:
        b, n, d = x.shape
        q, k, v = (f(x).view(b, n, self.heads, d // self.heads).transpose(1, 2)
                   for f in (self.q, self.k, self.v))
        att = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=self.bias.unsqueeze(0))
        return self.out(att.transpose(1, 2).reshape(b, n, -1))


def test_masked_attention_reshaped_after_transpose_exports_with_dynamo() -> None:
    x = torch.randn(2, 17, 32, generator=torch.Generator().manual_seed(4))
    native, result = export(tm.seeded(MaskedAttention), x)  # no TorchScript retry
    assert not any("retried" in n for n in result.notes), result.notes
    assert batch_sizes(result) == [2, 3]
    with torch.no_grad():
        assert float(native(x).abs().max()) > 0.3  # parity on outputs of order one
    assert_parity(native, result)


def test_dict_inputs_and_dict_outputs() -> None:
    gen = torch.Generator().manual_seed(4)
    batch = {"image": torch.randn(4, 10, generator=gen), "meta": torch.randn(4, 3, generator=gen)}
    native, result = export(tm.seeded(tm.DictModel), batch)
    assert result.route == "dynamo", result.notes
    assert [v.name for v in result.model.graph.inputs] == ["image", "meta"]
    assert [v.name for v in result.model.graph.outputs] == ["score", "embedding"]
    assert batch_sizes(result) == [4, 5]
    assert_parity(native, result)


def test_dict_samples_by_parameter_name_and_numpy() -> None:
    rng = np.random.default_rng(5)
    samples = {"y": rng.standard_normal((2, 3)).astype(np.float32),
               "x": rng.standard_normal((2, 4)).astype(np.float32)}
    native, result = export(tm.make_two_inputs(), samples)
    assert [v.name for v in result.model.graph.inputs] == ["x", "y"]
    assert_parity(native, result)


def test_batch_of_one_still_exports_a_dynamic_batch() -> None:
    gen = torch.Generator().manual_seed(8)
    pair = (torch.randn(1, 4, generator=gen), torch.randn(1, 3, generator=gen))
    native, result = export(tm.make_two_inputs(), pair)
    assert is_symbolic(result.model.graph.inputs[0], 0)
    assert batch_sizes(result) == [1, 3]
    assert_parity(native, result)


def test_static_freezes_and_extra_dynamic_axis() -> None:
    x = torch.randn(2, 5, 4, generator=torch.Generator().manual_seed(6))
    y = torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(7))
    _, static = export(tm.make_two_inputs(), (x, y), static=True)
    assert list(static.model.graph.inputs[0].shape) == [2, 5, 4]
    assert len(static.feeds) == 1
    native, seq = export(tm.make_two_inputs(), (x, y), dynamic=[("x", 1, "seq"), ("y", 1, "seq")])
    shape = seq.model.graph.inputs[0].shape
    assert str(shape[0]) == "batch" and str(shape[1]) == "seq"
    assert_parity(native, seq)


def test_inputs_from_tensor_specs() -> None:
    spec = [TensorSpec("x", ("batch", 4), "float32"), TensorSpec("y", (None, 3), "float32")]
    native, result = export(tm.make_two_inputs(), tensors=spec)
    assert is_symbolic(result.model.graph.inputs[0], 0)
    assert_parity(native, result)


def test_torchscript_exporter_forced_and_opset_clamped() -> None:
    native, result = export(tm.make_cnn(), tm.cnn_sample(2), expect_route="torchscript",
                            exporter="torchscript", opset=21)
    assert result.route == "torchscript" and result.opset == 20
    assert any("opsets 7-20" in note for note in result.notes)
    assert is_symbolic(result.model.graph.inputs[0], 0)
    assert_parity(native, result)


def test_dynamo_opset_request() -> None:
    native, result = export(tm.make_two_inputs(), (torch.ones(2, 4), torch.ones(2, 3)), opset=15)
    assert result.opset == 18  # dynamo exports at 18+; the version converter does the rest
    assert any("exported at 18" in note for note in result.notes)
    assert_parity(native, result)


def test_output_names_option() -> None:
    pair = (torch.ones(2, 4), torch.ones(2, 3))
    native, result = export(tm.make_two_inputs(), pair, output_names=["scaled"])
    assert [v.name for v in result.model.graph.outputs] == ["scaled"]
    assert_parity(native, result)


def test_exported_program_object_uses_its_own_inputs() -> None:
    model = tm.make_cnn()
    batch = torch.export.Dim("batch", min=1, max=64)
    ep = torch.export.export(model, (tm.cnn_sample(2),), dynamic_shapes=({0: batch},))
    native, result = export(ep)
    assert is_symbolic(result.model.graph.inputs[0], 0)
    assert len(result.feeds) == 2
    assert_parity(native, result)


STATIC_BATCH_NOTES = ("static (torch.export fixed", "(the model fixes it)")


def batch_notes(result: ExportResult) -> list[str]:
    return [n for n in result.notes if any(k in n for k in STATIC_BATCH_NOTES)]


def test_static_exported_program_says_torch_export_fixed_its_shapes(tmp_path: Any) -> None:
    pair = (torch.ones(2, 4), torch.ones(2, 3))
    ep = torch.export.export(tm.make_two_inputs(), pair)
    native, result = export(ep)
    assert batch_notes(result) == ["the ExportedProgram's shapes are static (torch.export fixed them); "
                                   "parity runs one batch size"]
    assert len(result.feeds) == 1
    assert_parity(native, result)
    path = tmp_path / "m.pt2"
    torch.export.save(ep, path)
    _, from_file = export(str(path))
    assert batch_notes(from_file) == ["the .pt2's shapes are static (torch.export fixed them); "
                                      "parity runs one batch size"]


def test_static_option_and_dynamic_batch_add_no_batch_note() -> None:
    pair = (torch.ones(2, 4), torch.ones(2, 3))
    _, static = export(tm.make_two_inputs(), pair, static=True)
    _, dynamic = export(tm.make_two_inputs(), pair)
    assert batch_notes(static) == batch_notes(dynamic) == []


def test_a_module_with_a_static_batch_is_said_to_fix_it() -> None:
    """(dynamo refuses a module that pins its batch and TorchScript keeps the dim symbolic, so
    the note is checked directly)"""
    from unframe.converters.frontends.torch import _static_batch_note

    assert _static_batch_note(tm.make_two_inputs()) == (
        "the batch axis came out static (the model fixes it); parity runs one batch size")


def test_training_mode_module_is_exported_in_eval_mode_and_given_back_training() -> None:
    model = tm.make_two_inputs().train()
    with FRONTENDS.get("torch").preserve(model):  # the guard the load stage holds
        native, result = export(model, (torch.ones(2, 4), torch.ones(2, 3)))
        assert not native.training
        assert_parity(native, result)
    assert model.training
    assert any("training mode" in note for note in result.notes)


def test_transformers_model_from_tiny_config() -> None:
    pytest.importorskip("transformers", reason="needs transformers")
    model = tm.tiny_bert()
    gen = torch.Generator().manual_seed(7)
    samples = {"input_ids": torch.randint(0, 64, (2, 8), generator=gen),
               "attention_mask": torch.ones(2, 8, dtype=torch.int64)}
    native, result = export(model, samples)
    outputs = [v.name for v in result.model.graph.outputs]
    assert outputs[:2] == ["last_hidden_state", "pooler_output"]
    assert [v.name for v in result.model.graph.inputs] == ["input_ids", "attention_mask"]
    assert_parity(native, result, atol=2e-4)
