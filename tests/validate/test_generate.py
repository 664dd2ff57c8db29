"""Token-level parity for decoders (``unframe.validate.generate``): onnxruntime against the MIL
evaluator for a prefill and 4 decode steps with the KV cache, and the comparison itself failing
on a token flipped at a wide margin, admitting a flip at a near-tie, and failing prefill logits
beyond tolerance."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="needs torch (the 'torch' extra)")
pytest.importorskip("transformers", reason="needs transformers (the 'dev' extra)")
pytest.importorskip("onnxscript", reason="needs onnxscript (torch.onnx dynamo exporter)")

import llm_models as lm  # noqa: E402

import unframe  # noqa: E402
from unframe.validate.generate import DecoderSignature, compare_generation  # noqa: E402
from unframe.validate.onnxruntime import OnnxRuntimeRunner  # noqa: E402
from unframe.validate.runner import Runner  # noqa: E402

FP32 = (1e-4, 1e-3)  # the export stage's fp32 (atol, rtol)


@pytest.mark.parametrize("arch,precision", [("llama", "fp32"), ("qwen2", "fp32"), ("llama", "fp16")])
def test_onnxruntime_vs_mil_evaluator_prefill_and_4_decode_steps(arch: str, precision: str,
                                                                 tmp_path: Path) -> None:
    pytest.importorskip("coremltools", reason="needs coremltools (the 'coreml' extra)")
    _, _, onnx_path = lm.exported(arch, kv_cache=True)
    result = unframe.convert(onnx_path, to="coreml", precision=precision,
                             output=tmp_path / f"{arch}.mlpackage")
    stage = next(s for s in result.report.stages if s.candidate.startswith("MIL evaluator"))
    assert stage.status == "passed", str(result.report)
    gen = stage.generation
    assert gen is not None and gen.cached and gen.steps == 5, str(result.report)
    assert gen.identical == 5 and gen.reference_tokens == gen.candidate_tokens
    assert gen.status == "passed" and gen.min_margin > 0, gen.summary()
    assert 0 < gen.prefill_max_abs <= gen.prefill_tolerance, gen.summary()
    if precision == "fp32":  # fp16 compute's tolerance is wide: some steps are within it
        assert gen.decisive == 5, gen.summary()  # no token was a near-tie
    else:
        assert gen.prefill_max_abs > 1e-4, "fp16 compute should differ from fp32 at all"
    assert "5/5 tokens identical (prefill + 4 decode steps" in str(result.report)


class _EditedLogits(Runner):
    """A real onnxruntime session whose logits are edited at one generation step: the error a
    broken converter would make, at a place the test chooses."""

    def __init__(self, path: Path, step: int, edit: str) -> None:
        self.inner, self.step, self.edit, self.calls = OnnxRuntimeRunner(path), step, edit, 0
        self.name = "edited onnxruntime"

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = self.inner.run(feeds)
        if self.calls == self.step:
            logits = out["logits"].copy()
            last = logits[0, -1]
            if self.edit == "swap":  # the runner-up wins
                first, second = np.argsort(last)[::-1][:2]
                last[first], last[second] = last[second], last[first]
            else:  # every logit moved, the ranking kept
                logits += 0.05 * np.abs(logits) + 0.01
            out["logits"] = logits
        self.calls += 1
        return out


def _signature(path: Path) -> tuple[DecoderSignature, dict[str, np.ndarray]]:
    runner = OnnxRuntimeRunner(path)
    specs = runner.input_specs()
    sig = DecoderSignature.of([s.name for s in specs], runner.output_names())
    assert sig is not None
    feed = {"input_ids": lm.prompt()["input_ids"].numpy()}
    feed.update({p: np.zeros((1, 2, 0, 8), np.float32) for p, _ in sig.cache})
    return sig, feed


def test_a_token_flipped_at_a_wide_margin_fails() -> None:
    _, _, path = lm.exported("llama", kv_cache=True)
    sig, feed = _signature(path)
    gen = compare_generation(OnnxRuntimeRunner(path), _EditedLogits(path, 3, "swap"), sig, feed,
                             8, FP32)
    assert not gen and gen.status == "failed", gen.summary()
    assert gen.identical == 3 and "token 4 differs" in gen.reason, gen.reason
    assert "wider than the tolerance could flip" in gen.reason


def test_a_token_flipped_at_a_near_tie_is_admitted_and_said_so() -> None:
    _, _, path = lm.exported("llama", kv_cache=True)
    sig, feed = _signature(path)
    loose = (1.0, 0.0)  # a tolerance wider than every margin: any flip is a tie it allows
    gen = compare_generation(OnnxRuntimeRunner(path), _EditedLogits(path, 2, "swap"), sig, feed,
                             6, loose)
    assert gen and gen.status == "tie", gen.summary()
    assert gen.identical == 2 and "a tie within the logits' tolerance" in gen.reason


def test_prefill_logits_beyond_tolerance_fail_even_with_the_same_tokens() -> None:
    _, _, path = lm.exported("qwen2", kv_cache=True)
    sig, feed = _signature(path)
    gen = compare_generation(OnnxRuntimeRunner(path), _EditedLogits(path, 0, "shift"), sig, feed,
                             4, FP32)
    assert gen.identical == 4 and gen.reference_tokens == gen.candidate_tokens
    assert not gen and "prefill logits differ" in gen.reason, gen.summary()
    assert gen.prefill_max_abs > gen.prefill_tolerance > 0


def test_signature_only_for_graphs_it_can_drive() -> None:
    past = ["past_key_values.0.key", "past_key_values.0.value"]
    present = ["present.0.key", "present.0.value"]
    sig = DecoderSignature.of(["input_ids", "attention_mask", *past], ["logits", *present])
    assert sig is not None and sig.position_ids is None
    assert sig.cache == (("past_key_values.0.key", "present.0.key"),
                         ("past_key_values.0.value", "present.0.value"))
    assert DecoderSignature.of(["input_ids", *past], ["logits", present[0]]) is None
    assert DecoderSignature.of(["input_ids", "pixel_values"], ["logits"]) is None
    assert DecoderSignature.of(["x"], ["y"]) is None


def test_generated_feeds_agree_on_a_dim_named_as_a_sum() -> None:
    """Converting a KV-cache ONNX file (no sample inputs): the mask's
    ``past_sequence_length + sequence_length`` is the sum of the other two dims."""
    from unframe import io
    from unframe.validate.inputs import generate_feeds

    _, _, path = lm.exported("llama", kv_cache=True)
    for feed in generate_feeds(io.load_model(path)):
        past, new = feed["past_key_values.0.key"].shape[2], feed["input_ids"].shape[1]
        assert feed["attention_mask"].shape[1] == past + new > new
        OnnxRuntimeRunner(path).run(feed)  # a consistent feed: the graph runs on it


def test_converting_a_decoder_file_whose_drawn_mask_attends_to_nothing(tmp_path: Path) -> None:
    """A decoder exported without a cache, converted from its .onnx file: the first drawn feed's
    attention_mask can be all zeros; the prompt is then the whole row (an empty prompt made
    onnxruntime's Reshape fail and the conversion exit 3)."""
    from unframe.validate.generate import prompt_of

    feed = {"input_ids": np.array([[5, 6, 7]]), "attention_mask": np.zeros((1, 3), np.int64)}
    assert prompt_of(feed).tolist() == [5, 6, 7]
    feed["attention_mask"] = np.array([[0, 1, 1]])
    assert prompt_of(feed).tolist() == [6, 7]
    _, _, path = lm.exported("llama", kv_cache=False)
    result = unframe.convert(path, to="onnx", opset=20, output=tmp_path / "m.onnx")
    gen = result.report.stages[-1].generation
    assert gen is not None and gen.identical == gen.steps, str(result.report)
