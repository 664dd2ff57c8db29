"""``--kv-cache``: a Hugging Face decoder exported with its key/value cache in and out.

The graph takes the cache as flat tensors and returns the grown cache, with the names and dims
optimum gives them, so that onnxruntime-genai, optimum's ``ORTModelForCausalLM`` and the
public-architecture zoo read it the same way::

    inputs:  input_ids [batch_size, sequence_length]
             attention_mask [batch_size, past_sequence_length + sequence_length]
             position_ids [batch_size, sequence_length]            (when the forward takes it)
             past_key_values.{i}.key|value [batch_size, kv_heads, past_sequence_length, head_dim]
    outputs: logits [batch_size, sequence_length, vocab]
             present.{i}.key|value [batch_size, kv_heads, past_sequence_length + sequence_length, head_dim]

``KVCacheDecoder`` wraps the model: it rebuilds a ``DynamicCache`` from the flat tensors, calls
the model with ``use_cache=True`` and flattens the cache it returns. torch.export traces it with
three independent dynamic dims (batch, new tokens, cached tokens); the example cache is the
model's own, from a prefill of the first part of the sample prompt, so parity runs on a cache
the model really produces.

A model without a cache (not a Hugging Face decoder, a forward without ``past_key_values``, an
encoder, an encoder-decoder cache) is refused with exit 4 naming why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from unframe.converters.frontends._torch.inputs import ModelInputs, param_names
from unframe.converters.frontends._torch.unwrap import is_kind
from unframe.errors import UnsupportedError, UsageError

BATCH, NEW, PAST = "batch_size", "sequence_length", "past_sequence_length"
TOTAL = f"{PAST} + {NEW}"
_HF = ("transformers.modeling_utils.PreTrainedModel",)
_DYNAMIC_CACHE = "transformers.cache_utils.DynamicCache"
MIN_EXAMPLE_TOKENS = 7  # shortest prompt the example is split from (see ``split_point``)


def past_name(layer: int, kind: str) -> str:
    return f"past_key_values.{layer}.{kind}"


def present_name(layer: int, kind: str) -> str:
    return f"present.{layer}.{kind}"


@dataclass
class KVExport:
    """What the torch frontend exports instead of the model itself."""

    module: Any  # KVCacheDecoder
    inputs: ModelInputs
    output_names: list[str]
    notes: list[str]


def kv_cache_wrapper_class() -> type:
    import torch

    class KVCacheDecoder(torch.nn.Module):
        """The decoder with its cache as flat tensors (see the module docstring)."""

        def __init__(self, model: torch.nn.Module, layers: int, with_positions: bool) -> None:
            super().__init__()
            self.model = model
            self.layers = layers
            self.with_positions = with_positions

        def forward(self, input_ids: Any, attention_mask: Any, position_ids: Any = None,
                    past_key_values: Any = ()) -> tuple[Any, ...]:
            from transformers import DynamicCache

            pairs = [(past_key_values[2 * i], past_key_values[2 * i + 1]) for i in range(self.layers)]
            cache = DynamicCache(pairs, config=self.model.config)
            extra = {"position_ids": position_ids} if self.with_positions else {}
            out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             past_key_values=cache, use_cache=True, return_dict=True, **extra)
            flat = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
            return (out.logits, *flat)

    return KVCacheDecoder


def refuse_reason(module: Any) -> str | None:
    """Why ``module`` can't be exported with a KV cache; None when it can be tried."""
    name = type(module).__name__
    if not is_kind(module, _HF):
        return (f"{name} is not a Hugging Face decoder: --kv-cache needs a model whose forward "
                "takes and returns past_key_values (a transformers *ForCausalLM)")
    if "past_key_values" not in (param_names(module) or []):
        return f"{name}.forward takes no past_key_values: the model has no KV cache"
    config = getattr(module, "config", None)
    if config is not None and getattr(config, "is_encoder_decoder", False):
        return (f"{name} is an encoder-decoder: its cache holds cross-attention keys too, which "
                "--kv-cache does not export yet")
    return None


def prepare(module: Any, samples: Any, static: bool, what: str) -> KVExport:
    """The wrapper, its example inputs (with the model's own cache) and the dynamic dims."""
    import torch

    if static:
        raise UsageError("--kv-cache needs dynamic sequence and cache lengths", "drop --static")
    reason = refuse_reason(module)
    if reason is not None:
        raise UnsupportedError(f"{what}: {reason}", "export it without --kv-cache")
    ids, mask = _prompt(samples, module, what)
    with_positions = "position_ids" in (param_names(module) or [])
    past_len = split_point(ids.shape[1], ids.shape[0])
    assert past_len is not None  # _prompt lengthened the prompt until it splits
    with torch.no_grad():
        out = module(input_ids=ids[:, :past_len], attention_mask=mask[:, :past_len],
                     use_cache=True, return_dict=True)
    cache = getattr(out, "past_key_values", None)
    layers = _cache_layers(cache, what)
    wrapper = kv_cache_wrapper_class()(module, len(layers), with_positions).eval()
    past = [t for layer in layers for t in layer]
    positions = positions_of(mask)[:, past_len:]
    args = (ids[:, past_len:], mask, positions if with_positions else None, past)
    inputs = ModelInputs(args=args, kwargs={}, names=io_names(len(layers), with_positions)[0],
                         batch=int(ids.shape[0]))
    inputs.dynamic = dynamic_dims(inputs.names)
    notes = [f"{type(module).__name__}: exported with its KV cache ({len(layers)} layers: "
             "past_key_values.N.key/value in, present.N.key/value out; dynamic batch, sequence and "
             "cache lengths)"]
    return KVExport(wrapper, inputs, io_names(len(layers), with_positions)[1], notes)


def io_names(layers: int, with_positions: bool) -> tuple[list[str], list[str]]:
    inputs = ["input_ids", "attention_mask"] + (["position_ids"] if with_positions else [])
    inputs += [past_name(i, k) for i in range(layers) for k in ("key", "value")]
    outputs = ["logits"] + [present_name(i, k) for i in range(layers) for k in ("key", "value")]
    return inputs, outputs


def dynamic_dims(names: list[str]) -> dict[str, dict[int, str]]:
    """The three dims torch.export traces independently; the mask's is renamed to ``TOTAL``
    after the export (``name_dims``), since torch.export can't state it as a sum."""
    dims: dict[str, dict[int, str]] = {}
    for name in names:
        if name.startswith("past_key_values."):
            dims[name] = {0: BATCH, 2: PAST}
        elif name == "attention_mask":
            dims[name] = {0: BATCH, 1: "attention_length"}
        else:
            dims[name] = {0: BATCH, 1: NEW}
    return dims


def name_dims(model: Any) -> None:
    """Dim names as optimum writes them: the mask's and the present's length is
    ``past_sequence_length + sequence_length`` (torch writes ``past_sequence_length + sequence_length``
    for the outputs already, and its own name for the mask)."""
    import onnx_ir as ir

    for value in [*model.graph.inputs, *model.graph.outputs]:
        shape = value.shape
        if shape is None:
            continue
        dims = [ir.SymbolicDim(TOTAL) if isinstance(d, ir.SymbolicDim) and d.value in
                ("attention_length", f"{NEW} + {PAST}", TOTAL) else d for d in shape]
        value.shape = ir.Shape(dims)


def split_point(tokens: int, batch: int) -> int | None:
    """Where the example prompt is split into cached and new tokens; None when ``tokens`` is too
    short (``_prompt`` lengthens it). torch.export specializes a dim whose example is 0 or 1 and
    may merge dims with equal examples, so both parts get at least 3 tokens, and the two parts,
    their sum and the traced batch (2 when 1 is given) all differ."""
    taken = {0, 1, 2, max(batch, 2)}
    if tokens in taken:
        return None
    for past in range(tokens // 2, tokens - 2):
        new = tokens - past
        if past not in taken and new not in taken and past != new:
            return past
    return None


def positions_of(mask: Any) -> Any:
    """Position ids as transformers' generate computes them: the running count of attended tokens
    (left padding gets position 1, never read)."""
    positions = mask.long().cumsum(-1) - 1
    return positions.masked_fill(mask == 0, 1)


def _prompt(samples: Any, module: Any, what: str) -> tuple[Any, Any]:
    """input_ids and attention_mask from the samples, lengthened by repetition to at least
    ``MIN_EXAMPLE_TOKENS`` tokens (the example must split into two traceable parts)."""
    import torch

    from unframe.converters.frontends._torch.inputs import to_torch

    samples = to_torch(samples)
    if isinstance(samples, (list, tuple)) and samples and isinstance(samples[0], dict):
        samples = samples[0]
    ids = samples.get("input_ids") if isinstance(samples, dict) else samples
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype.is_floating_point:
        raise UsageError(f"{what}: --kv-cache needs sample input_ids (a [batch, tokens] integer "
                         "tensor)", "pass sample_inputs={'input_ids': ..., 'attention_mask': ...}")
    mask = samples.get("attention_mask") if isinstance(samples, dict) else None
    mask = torch.ones_like(ids) if mask is None else mask.to(ids.dtype)
    while ids.shape[1] < MIN_EXAMPLE_TOKENS or split_point(ids.shape[1], ids.shape[0]) is None:
        ids, mask = torch.cat([ids, ids], dim=1), torch.cat([mask, mask], dim=1)
    return ids, mask


def _cache_layers(cache: Any, what: str) -> list[tuple[Any, Any]]:
    if cache is None:
        raise UnsupportedError(f"{what} returned no past_key_values with use_cache=True: the model "
                               "has no KV cache (an encoder, or a config with is_decoder=False)",
                               "export it without --kv-cache")
    names = {f"{c.__module__}.{c.__qualname__}" for c in type(cache).__mro__}
    layers = getattr(cache, "layers", None)
    if _DYNAMIC_CACHE not in names or not layers or not all(
            getattr(la, "keys", None) is not None for la in layers):
        raise UnsupportedError(f"{what} keeps its cache in a {type(cache).__name__}, not a "
                               "DynamicCache of key/value tensors per layer",
                               "export it without --kv-cache")
    return [(la.keys, la.values) for la in layers]

