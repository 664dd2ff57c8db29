"""FSDP-sharded models gathered to full weights on rank 0, when the user asks (``gather=True``).

Each rank of an FSDP run holds a shard of every parameter, so the full weights exist nowhere
until they are gathered, and gathering is a collective: every rank has to call
``unframe.convert(..., gather=True)``. Then:

1. rank 0 says whether the full weights fit in its CPU memory, and tells the others (a refusal
   must be every rank's, or the others would wait in the gather for ever);
2. torch.distributed.checkpoint's ``get_model_state_dict(full_state_dict=True,
   cpu_offload=True)`` all-gathers each tensor and keeps it, on the CPU, on rank 0 only (FSDP1's
   ``FullyShardedDataParallel`` and FSDP2's ``fully_shard`` alike, with their clean names);
3. rank 0 builds a plain copy of the module tree (``plain_copy``): the same classes without
   FSDP's (FSDP2 swaps each sharded module's class for an ``FSDP<Name>`` subclass), FSDP1's
   wrapper nodes left out, FSDP's hooks and state dropped, user hooks kept, and the gathered
   tensors as its parameters and buffers. The live, sharded model is not touched: its forward
   and its state (training flags included) are as they were.

The other ranks get ``None`` and return. FSDP modules can't be deep-copied (FSDP2 refuses), which
is why the copy is built node by node.
"""

from __future__ import annotations

from typing import Any

from unframe.converters.frontends._torch.unwrap import class_names, is_sharded
from unframe.errors import UnsupportedError, UsageError

_FSDP1_WRAPPERS = ("torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
                   "torch.distributed.algorithms._checkpoint.checkpoint_wrapper.CheckpointWrapper",
                   "torch.distributed.algorithms._checkpoint.checkpoint_wrapper.OffloadWrapper")
_WRAPPED_CHILD = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module")
_FSDP2_MIXIN = "torch.distributed.fsdp._fully_shard._fully_shard.FSDPModule"


def gather_to_rank0(model: Any, what: str) -> Any:
    """Every rank calls this. Rank 0 gets a plain module with the full weights on the CPU; the
    other ranks get None. A model that isn't sharded is returned as it is, on every rank."""
    if not is_sharded(model):
        return model
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise UsageError(f"{what} is sharded with FSDP but torch.distributed is not initialized "
                         "in this process", "call unframe.convert(..., gather=True) on every "
                         "rank inside the training run, before destroy_process_group()")
    refusal = [_fits(model, what) if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(refusal, src=0)
    if refusal[0] is not None:
        message, hint = refusal[0]
        raise UsageError(message, hint)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                 cpu_offload=True))
    if dist.get_rank() != 0:
        return None
    return plain_copy(model, state, what)


def full_bytes(model: Any) -> int:
    """Bytes of the gathered weights: a DTensor's global shape, an FSDP1 flat parameter's
    unsharded size (its padding aside), else the tensor itself; buffers included."""
    total = 0
    for p in model.parameters():
        unsharded = getattr(p, "_unpadded_unsharded_size", None)
        numel = unsharded.numel() if unsharded is not None else p.numel()  # DTensor: global
        total += numel * p.element_size()
    return total + sum(b.numel() * b.element_size() for b in model.buffers())


def _fits(model: Any, what: str) -> tuple[str, str] | None:
    from unframe.preserve import check_copy_fits

    try:
        check_copy_fits(full_bytes(model), what, purpose="gather them on rank 0",
                        hint="save a sharded checkpoint (torch.distributed.checkpoint), "
                             "consolidate it on a machine with more memory and convert that")
    except UsageError as exc:
        return str(exc.message), str(exc.hint or "")
    return None


def plain_copy(model: Any, state: dict[str, Any], what: str) -> Any:
    """A copy of ``model``'s module tree without FSDP, holding ``state`` (clean names)."""
    import torch

    assigned: set[str] = set()
    copy = _copy_node(model, "", state, assigned)
    for name in sorted(set(state) - assigned):  # FSDP1 (flat parameters) unregisters originals
        owner, _, leaf = name.rpartition(".")
        try:
            module = copy.get_submodule(owner)
        except AttributeError:
            raise UnsupportedError(f"{what}: the gathered weight {name} has no module in the "
                                   "unsharded copy", "gather the state dict yourself and load it "
                                   "into an unsharded model") from None
        module.__dict__.pop(leaf, None)  # FSDP1's view of the flat parameter
        module._parameters[leaf] = torch.nn.Parameter(state[name], requires_grad=False)
        assigned.add(name)
    missing = sorted(set(copy.state_dict()) - set(state))
    if missing:
        raise UnsupportedError(f"{what}: the gathered state has no value for {', '.join(missing[:3])}",
                               "gather the state dict yourself and load it into an unsharded model")
    return copy


def _copy_node(module: Any, prefix: str, state: dict[str, Any], assigned: set[str]) -> Any:
    import torch

    while not class_names(module).isdisjoint(_FSDP1_WRAPPERS):
        module = next(getattr(module, n) for n in _WRAPPED_CHILD if hasattr(module, n))
    cls = _original_class(type(module))
    node = cls.__new__(cls)
    node.__dict__.update({k: v for k, v in module.__dict__.items()
                          if not k.startswith("__composable_api_state_key")  # FSDP2's state
                          and not k.startswith("_fsdp")})
    for hooks in [k for k, v in module.__dict__.items() if k.endswith("hooks") and isinstance(v, dict)]:
        node.__dict__[hooks] = type(module.__dict__[hooks])(
            (i, h) for i, h in module.__dict__[hooks].items() if not _from_torch_distributed(h))
    node._parameters = {}
    for name, param in module._parameters.items():
        key = prefix + name
        if param is None:
            node._parameters[name] = None
        elif key in state:
            node._parameters[name] = torch.nn.Parameter(state[key], requires_grad=False)
            assigned.add(key)
    node._buffers = {}
    for name, buf in module._buffers.items():
        key = prefix + name
        if buf is not None and key in state:
            node._buffers[name] = state[key]
            assigned.add(key)
        else:  # a non-persistent buffer: not sharded, every rank holds it whole
            node._buffers[name] = None if buf is None else buf.detach().to("cpu", copy=True)
    node._modules = {name: None if child is None else _copy_node(child, f"{prefix}{name}.", state, assigned)
                     for name, child in module._modules.items()}
    return node


def _original_class(cls: type) -> type:
    """FSDP2's ``FSDP<Name>`` subclass (bases: FSDPModule, Name) back to ``Name``: the class
    right after FSDPModule in its MRO."""
    names = [f"{c.__module__}.{c.__qualname__}" for c in cls.__mro__]
    return cls.__mro__[names.index(_FSDP2_MIXIN) + 1] if _FSDP2_MIXIN in names else cls


def _from_torch_distributed(hook: Any) -> bool:
    fn = hook[0] if isinstance(hook, tuple) else hook
    for _ in range(4):  # functools.partial, bound methods, weakref'd methods
        fn = getattr(fn, "func", None) or getattr(fn, "__func__", None) or fn
    return str(getattr(fn, "__module__", "") or "").startswith("torch.distributed")
