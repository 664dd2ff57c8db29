"""The precision a torch model is exported in.

The ONNX keeps the model's own precision: a bfloat16 or float16 model gives a bfloat16 or
float16 graph, and parity runs in that precision with its tolerance
(``unframe/validate/tolerances.py``). Option ``precision`` (``fp32``, ``fp16``, ``bf16``)
exports a half-precision model in another precision instead: the live model is cast in place
inside the preserve guard, which restores its storage and dtype afterwards, and floating inputs
in the model's precision follow it. A float32 model keeps float32 here: lowering float32 compute
is the backends' job (ONNX, CoreML and TensorRT read the same option and keep the I/O types).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from unframe.errors import UsageError

NAMES = {"fp32": "float32", "float32": "float32", "fp16": "float16", "float16": "float16",
         "half": "float16", "bf16": "bfloat16", "bfloat16": "bfloat16"}
LOW = ("float16", "bfloat16")


@dataclass
class Cast:
    old: Any  # torch dtypes
    new: Any
    note: str


def model_dtype(module: Any) -> Any | None:
    """The floating dtype holding most of the module's parameter and buffer elements."""
    counts: dict[Any, int] = {}
    for t in [*module.parameters(), *module.buffers()]:
        if t.dtype.is_floating_point:
            counts[t.dtype] = counts.get(t.dtype, 0) + t.numel()
    return max(counts, key=counts.__getitem__) if counts else None


def apply(native: Any, precision: str | None, what: str) -> Cast | None:
    """Cast a half-precision module to ``precision`` (in place; the guard restores it)."""
    import torch

    if precision is None or not isinstance(native, torch.nn.Module) or \
            isinstance(native, torch.jit.ScriptModule):
        return None
    name = NAMES.get(str(precision).lower())
    if name is None:
        raise UsageError(f"unknown precision {precision!r}", "use fp32, fp16 or bf16")
    old = model_dtype(native)
    new = getattr(torch, name)
    if old is None or old == new or str(old).removeprefix("torch.") not in LOW:
        return None
    native.to(new)
    return Cast(old, new, f"{what} holds {_short(old)} weights: exported in {_short(new)} as "
                          f"precision={precision} asks (the live model keeps {_short(old)})")


def optimizer_safe(native: Any) -> bool:
    """False for a bfloat16 module: onnxscript's optimizer (0.7) folds BatchNorm into the Gemm
    or Conv before it with float32 weights, which leaves a bfloat16 graph onnx's checker
    rejects (``B has inconsistent type``). The unoptimized graph is correct."""
    import torch

    return not (isinstance(native, torch.nn.Module) and model_dtype(native) == torch.bfloat16)


def cast_inputs(inputs: Any, cast: Cast) -> None:
    """Floating inputs in the model's old precision follow it to the new one."""
    names = inputs.names
    tensors = {n: (t.to(cast.new) if t.dtype == cast.old else t)
               for n, t in zip(names, inputs.tensor_leaves(), strict=True)}
    inputs.args, inputs.kwargs = inputs.rebuild(tensors)


def _short(dtype: Any) -> str:
    return {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}.get(
        str(dtype).removeprefix("torch."), str(dtype))
