"""Tiny Hugging Face decoders for the LLM-scale tests: the same code paths as Llama-3.2-1B and
Qwen2.5-1.5B (grouped-query attention, RoPE, RMSNorm, SwiGLU; Qwen2's q/k/v biases), built from
their config classes with seeded weights (no download). Full-size runs live in bench/llm.py.

Weights are perturbed by half their own spread and the LM head is scaled, so that logits are of
order 5 and greedy tokens win by a margin (HF's 0.02-std init gives flat logits, where every
token is a near-tie and token parity proves nothing).
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

VOCAB, PROMPT = 96, 8
HEAD_SCALE = 12.0  # the LM head's weights times this: logits of order 5
# With 96 tokens, some step of 32 greedy ones is often a near-tie (top-2 within what fp32
# tolerances allow). This prompt was picked so that every step of both decoders, from the whole
# prompt and from its last 3 tokens (the --kv-cache example's new part), wins by more than the
# tolerance could move: the tests assert it (GenerationParity.decisive), so it can't rot silently.
PROMPT_SEED = 9


def config(arch: str, layers: int = 2) -> Any:
    import transformers

    small = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=layers, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=64, max_position_embeddings=128)
    if arch == "llama":
        return transformers.LlamaConfig(**small)
    if arch == "qwen2":
        return transformers.Qwen2Config(**small)
    raise ValueError(arch)


def seeded_decoder(arch: str, layers: int = 2, seed: int = 0) -> Any:
    import torch
    import transformers

    torch.manual_seed(seed)
    cls = {"llama": transformers.LlamaForCausalLM, "qwen2": transformers.Qwen2ForCausalLM}[arch]
    model = cls(config(arch, layers)).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            spread = float(p.std()) if p.numel() > 1 and float(p.std()) > 0 else 0.1
            p.add_(torch.randn(p.shape, generator=gen) * spread * 0.5)
        model.lm_head.weight.mul_(HEAD_SCALE)
    return model


def prompt(batch: int = 1, tokens: int = PROMPT, seed: int = PROMPT_SEED) -> dict[str, Any]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (batch, tokens), generator=gen)
    return {"input_ids": ids, "attention_mask": torch.ones(batch, tokens, dtype=torch.long)}


def logits_scale(model: Any, samples: dict[str, Any]) -> tuple[float, float]:
    """(largest |logit|, spread of the logits) on the samples, to assert outputs of order 1+."""
    import torch

    with torch.no_grad():
        logits = model(**samples).logits.float()
    return float(logits.abs().max()), float(logits.std())


@functools.cache
def exported(arch: str, kv_cache: bool) -> tuple[Any, Any, Path]:
    """(model, ConversionResult, path of the .onnx written) for one tiny decoder, exported once
    per test process: several test files read the same export."""
    import unframe

    model = seeded_decoder(arch)
    folder = Path(tempfile.mkdtemp(prefix=f"unframe-llm-{arch}-"))
    path = folder / f"{arch}{'_kv' if kv_cache else ''}.onnx"
    # without a cache, generation needs a sequence axis that grows
    options: dict[str, Any] = {"kv_cache": True} if kv_cache else {
        "dynamic": [("input_ids", 1, "sequence_length"), ("attention_mask", 1, "sequence_length")]}
    result = unframe.convert(model, to="onnx", sample_inputs=prompt(), output=path, **options)
    return model, result, path
