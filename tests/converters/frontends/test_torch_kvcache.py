"""``--kv-cache``: Hugging Face decoders exported with past_key_values in and present out, named
and dimensioned as optimum does, checked against torch by tensors and by 32 greedy tokens; a
model without a cache is refused with exit 4."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch (the 'torch' extra)")
transformers = pytest.importorskip("transformers", reason="needs transformers (the 'dev' extra)")
pytest.importorskip("onnxscript", reason="needs onnxscript (torch.onnx dynamo exporter)")

import llm_models as lm  # noqa: E402
import onnxruntime as ort  # noqa: E402
from click.testing import CliRunner  # noqa: E402

import unframe  # noqa: E402
from unframe import io  # noqa: E402
from unframe.cli.main import cli  # noqa: E402
from unframe.converters.frontends._torch import kvcache  # noqa: E402
from unframe.errors import UnsupportedError  # noqa: E402

LAYERS = 2


def test_tiny_decoder_has_order_one_logits_and_margins() -> None:
    model = lm.seeded_decoder("llama")
    scale, spread = lm.logits_scale(model, lm.prompt())
    assert 2 < scale < 100 and spread > 0.5, (scale, spread)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_kv_cache_names_and_dims_as_optimum_gives_them(arch: str) -> None:
    _, result, path = lm.exported(arch, kv_cache=True)
    assert result.report, str(result.report)
    session = ort.InferenceSession(str(path))
    inputs = {i.name: i.shape for i in session.get_inputs()}
    outputs = {o.name: o.shape for o in session.get_outputs()}
    past = [f"past_key_values.{i}.{k}" for i in range(LAYERS) for k in ("key", "value")]
    present = [f"present.{i}.{k}" for i in range(LAYERS) for k in ("key", "value")]
    assert list(inputs) == ["input_ids", "attention_mask", "position_ids", *past]
    assert list(outputs) == ["logits", *present]
    total = "past_sequence_length + sequence_length"
    assert inputs["input_ids"] == ["batch_size", "sequence_length"]
    assert inputs["attention_mask"] == ["batch_size", total]
    assert inputs["past_key_values.0.key"] == ["batch_size", 2, "past_sequence_length", 8]
    assert outputs["present.1.value"] == ["batch_size", 2, total, 8]
    assert outputs["logits"] == ["batch_size", "sequence_length", lm.VOCAB]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_kv_cache_export_matches_torch_in_tensors_and_32_greedy_tokens(arch: str) -> None:
    _, result, _ = lm.exported(arch, kv_cache=True)
    stage = next(s for s in result.report.stages if s.stage == "export")
    assert stage.status == "passed" and stage.cases == 2, str(result.report)  # two batch sizes
    gen = stage.generation
    assert gen is not None and gen.cached and gen.steps == 32
    assert gen.identical == 32 and gen.reference_tokens == gen.candidate_tokens
    # the check means something: every greedy token won by more than the tolerance could move
    assert gen.decisive == 32 and gen.min_margin > 0, gen.summary()
    assert len(set(gen.reference_tokens)) > 3, "generation stuck on one token proves little"
    assert "32/32 tokens identical" in str(result.report) and "margin" in str(result.report)
    stamped = io.read_provenance(result.model.metadata_props)["parity"]
    assert stamped["passed"] and "32/32 tokens identical" in stamped["stages"][0]["generation"]


@pytest.mark.parametrize("batch,new,cached", [(3, 2, 5), (1, 6, 0), (2, 1, 9)])
def test_dims_are_dynamic_against_the_model_itself(batch: int, new: int, cached: int) -> None:
    """The ONNX graph against the HF model's own forward with a DynamicCache (not unframe's
    wrapper) at batch sizes, new-token and cache lengths the export never saw."""
    model, _, path = lm.exported("llama", kv_cache=True)
    gen = torch.Generator().manual_seed(batch * 100 + new * 10 + cached)
    ids = torch.randint(0, lm.VOCAB, (batch, new), generator=gen)
    past = [torch.randn(batch, 2, cached, 8, generator=gen) for _ in range(2 * LAYERS)]
    mask = torch.ones(batch, cached + new, dtype=torch.long)
    positions = torch.arange(cached, cached + new).expand(batch, new)
    cache = transformers.DynamicCache([(past[2 * i], past[2 * i + 1]) for i in range(LAYERS)],
                                      config=model.config)
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                    past_key_values=cache, use_cache=True)
    feeds: dict[str, Any] = {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
                             "position_ids": positions.numpy()}
    feeds.update({kvcache.past_name(i, k): past[2 * i + j].numpy()
                  for i in range(LAYERS) for j, k in enumerate(("key", "value"))})
    got = ort.InferenceSession(str(path)).run(None, feeds)
    assert np.abs(ref.logits.numpy()).max() > 1
    np.testing.assert_allclose(got[0], ref.logits.numpy(), atol=1e-4, rtol=1e-3)
    layer = ref.past_key_values.layers[1]
    np.testing.assert_allclose(got[3], layer.keys.numpy(), atol=1e-5, rtol=1e-4)
    assert got[4].shape == (batch, 2, cached + new, 8)


def test_a_decoder_without_cache_still_gets_token_parity() -> None:
    _, result, _ = lm.exported("llama", kv_cache=False)
    gen = next(s for s in result.report.stages if s.stage == "export").generation
    assert gen is not None and not gen.cached and gen.identical == 32
    assert gen.decisive == 32, gen.summary()


def test_a_model_without_a_cache_is_refused() -> None:
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 4)).eval()
    with pytest.raises(UnsupportedError) as info:
        unframe.convert(mlp, to="onnx", sample_inputs=torch.ones(2, 4), kv_cache=True)
    assert info.value.exit_code == 4
    assert "not a Hugging Face decoder" in str(info.value) and "past_key_values" in str(info.value)
    bert = transformers.BertModel(transformers.BertConfig(
        vocab_size=lm.VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
        intermediate_size=64)).eval()
    with pytest.raises(UnsupportedError) as info:
        unframe.convert(bert, to="onnx", sample_inputs=lm.prompt(), kv_cache=True)
    assert "no past_key_values" in str(info.value) and "no KV cache" in str(info.value)


def test_cli_kv_cache_on_a_model_without_cache_exits_4_and_writes_nothing(tmp_path: Path) -> None:
    module = torch.nn.Sequential(torch.nn.Linear(4, 3)).eval()
    pt2 = tmp_path / "mlp.pt2"
    torch.export.save(torch.export.export(module, (torch.ones(2, 4),)), pt2)
    out = tmp_path / "mlp.onnx"
    res = CliRunner().invoke(cli, ["convert", str(pt2), "--to", "onnx", "--kv-cache", "-o", str(out)])
    assert res.exit_code == 4, res.output
    assert "KV cache" in res.output or "past_key_values" in res.output
    assert "Traceback" not in res.output and not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp.pt2"]


def test_split_point_keeps_dims_apart() -> None:
    splits = 0
    for tokens in range(7, 40):
        for batch in (1, 2, 3, 4, 5, 16):
            past = kvcache.split_point(tokens, batch)
            if past is None:  # _prompt doubles the prompt until it splits
                assert kvcache.split_point(2 * tokens, batch) is not None or \
                    kvcache.split_point(4 * tokens, batch) is not None, (tokens, batch)
                continue
            splits += 1
            new = tokens - past
            assert past >= 3 and new >= 3 and past != new
            assert max(batch, 2) not in (past, new, tokens)
    assert splits > 150


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_a_kv_cache_decoder_passes_tensorrt_preflight_and_builds(arch: str, tmp_path: Path) -> None:
    """The cache's graph (past_key_values in, present out, dynamic batch, sequence and past
    length) goes to TensorRT: pre-flight with the live parser agrees there is nothing to block,
    and tensorrt-rtx builds an engine on the CPU whose network has the cache's inputs."""
    from unframe.converters.backends.tensorrt import trtmodule

    if trtmodule.load_or_none() is None:
        pytest.skip("needs tensorrt or tensorrt-rtx-cu12 (the 'tensorrt' extra)")
    _, _, path = lm.exported(arch, kv_cache=True)
    checked = unframe.check(path, to="tensorrt")
    assert checked and any("parser agree" in n for n in checked.notes), checked.notes
    out = tmp_path / f"{arch}.engine"
    result = unframe.convert(path, to="tensorrt", output=out, builder_optimization_level=0)
    inputs = {t["name"] for t in result.artifact.metadata["network"]["inputs"]}
    assert {"input_ids", "past_key_values.0.key", f"past_key_values.{LAYERS - 1}.value"} <= inputs
    assert out.stat().st_size > 0
