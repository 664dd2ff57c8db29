"""Wrapped torch models, unwrapped in this one place before export.

- ``torch.compile``'s ``OptimizedModule``: the original module (``_orig_mod``); torch.export
  traces Python, not the compiled artifact, and the wrapper's ``forward(*args, **kwargs)``
  hides the parameter names the inputs are bound to;
- ``DistributedDataParallel`` / ``DataParallel``: ``.module`` (the replicas are identical; the
  wrapper only adds gradient communication);
- FSDP (``FullyShardedDataParallel``, ``fully_shard``): each rank holds a shard, so the full
  weights must be gathered, a collective every rank has to join: done before this point when
  the user asks (``gather=True``, _torch/fsdp.py), else refused with what to do;
- Hugging Face ``PreTrainedModel``: exported with ``use_cache=False`` (the KV cache is a
  generation-time output, not part of the forward a user converts) unless the sample inputs
  ask for it; ``ModelOutput`` returns give the output names;
- Lightning modules are plain modules; their ``example_input_array`` is the default sample.

Class checks go by qualified name, so nothing here imports Lightning, transformers or
torch.distributed.
"""

from __future__ import annotations

from typing import Any

from unframe.errors import UnsupportedError

_COMPILED = ("torch._dynamo.eval_frame.OptimizedModule",)
_DATA_PARALLEL = ("torch.nn.parallel.distributed.DistributedDataParallel",
                  "torch.nn.parallel.data_parallel.DataParallel")
_FSDP = ("torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
         "torch.distributed.fsdp._fully_shard._fully_shard.FSDPModule",
         "torch.distributed._composable.fsdp.fully_shard.FSDPModule")
_HF = ("transformers.modeling_utils.PreTrainedModel",)
_LIGHTNING = ("lightning.pytorch.core.module.LightningModule",
              "pytorch_lightning.core.module.LightningModule")


def class_names(obj: Any) -> set[str]:
    return {f"{c.__module__}.{c.__qualname__}" for c in type(obj).__mro__}


def is_kind(obj: Any, names: tuple[str, ...]) -> bool:
    return not class_names(obj).isdisjoint(names)


def unwrap(obj: Any, what: str) -> tuple[Any, list[str]]:
    """The module to export and notes saying what was unwrapped."""
    notes: list[str] = []
    for _ in range(8):  # e.g. torch.compile(DDP(model)): peel one layer at a time
        if is_kind(obj, _COMPILED):
            notes.append(f"{what} is torch.compile'd: exported from its original module")
            obj = obj._orig_mod
        elif is_kind(obj, _DATA_PARALLEL):
            notes.append(f"{what} is wrapped in {type(obj).__name__}: exported from .module")
            obj = obj.module
        else:
            break
    if is_sharded(obj):
        raise UnsupportedError(
            f"{what} is sharded with FSDP: each rank holds only part of the weights",
            "call unframe.convert(..., gather=True) on every rank: the full weights are gathered "
            "to rank 0's CPU and rank 0 converts")
    return obj, notes


def is_sharded(obj: Any) -> bool:
    """FSDP1 or FSDP2 (``fully_shard``), or any module whose parameters are DTensors."""
    return is_kind(obj, _FSDP) or _has_dtensor_params(obj)


def _has_dtensor_params(module: Any) -> bool:
    params = getattr(module, "parameters", None)
    if params is None:
        return False
    return any(type(p).__name__ == "DTensor" or type(getattr(p, "data", None)).__name__ == "DTensor"
               for p in params())


def prepare_hf(module: Any, samples: Any) -> list[str]:
    """Inside the preserve guard (which restores the config): a PreTrainedModel exports its
    forward without the KV cache unless the samples pass ``use_cache``."""
    if not is_kind(module, _HF):
        return []
    config = getattr(module, "config", None)
    asked = isinstance(samples, dict) and "use_cache" in samples
    if config is None or asked or not getattr(config, "use_cache", False):
        return []
    config.use_cache = False
    return [f"{type(module).__name__}: exported with use_cache=False (the KV cache is a "
            "generation output; --kv-cache exports it as past_key_values in, present out)"]


_QUANT_PACKAGES = ("torch.ao.nn.quantized", "torch.ao.nn.qat", "torch.ao.nn.intrinsic.q",
                   "torch.ao.quantization.fake_quantize", "torch.nn.quantized", "torchao.")


def quantization_modules(module: Any) -> list[str]:
    """Class names of torch.ao / torchao quantized and fake-quantized submodules."""
    modules = getattr(module, "modules", None)
    if modules is None:
        return []
    found = {type(m).__name__ for m in modules()
             if type(m).__module__.startswith(_QUANT_PACKAGES)}
    return sorted(found)


def default_samples(module: Any) -> Any:
    """Sample inputs a model carries itself: a Lightning module's ``example_input_array``."""
    if is_kind(module, _LIGHTNING):
        return getattr(module, "example_input_array", None)
    return None


def is_hf_config(obj: Any) -> bool:
    return is_kind(obj, ("transformers.configuration_utils.PretrainedConfig",  # transformers 4
                         "transformers.configuration_utils.PreTrainedConfig"))  # 5
