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

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from unframe.errors import UsageError

# Backends whose runtime holds no bfloat16 tensor, and what they hold instead
NO_BFLOAT16 = {"coreml": "CoreML holds float16 and float32, not bfloat16"}
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


def widen_for(native: Any, precision: str | None, targets: tuple[str, ...], what: str) -> str | None:
    """Why a bfloat16 module is exported in float32 (None: it keeps bfloat16): a target of the
    call holds no bfloat16 and the user asked for no precision. The module itself keeps its
    bfloat16 weights: parity runs it as it is, at bfloat16's tolerance; only the graph holds
    float32 (each bfloat16 value is exactly a float32 one), and the backend then computes in
    the precision its runtime holds."""
    import torch

    if precision is not None or not isinstance(native, torch.nn.Module) or \
            isinstance(native, torch.jit.ScriptModule) or model_dtype(native) != torch.bfloat16:
        return None
    blocked = [NO_BFLOAT16[t] for t in targets if t in NO_BFLOAT16]
    if not blocked:
        return None
    return (f"{what} holds bf16 weights: exported in fp32 ({blocked[0]}); parity runs the model in "
            "bf16 at bf16's tolerance (--precision fp16 exports it in fp16)")


@contextmanager
def in_float32(module: Any) -> Iterator[None]:
    """The module's bfloat16 parameters and buffers hold float32 copies for the duration; the
    very same bfloat16 tensors are put back after (an exact round trip, and no float32 copy kept)."""
    import torch

    saved = []
    for t in [*module.parameters(), *module.buffers()]:
        if t.dtype == torch.bfloat16:
            saved.append((t, t.data))
            t.data = t.data.float()
    try:
        yield
    finally:
        for t, data in saved:
            t.data = data


def own_float32_weights(model: Any) -> None:
    """The graph's float32 initializers as copies of their own: torch.onnx's initializers read
    the live parameters, which ``in_float32`` gives back their bfloat16 storage afterwards."""
    import numpy as np
    import onnx_ir as ir

    for value in model.graph.initializers.values():
        tensor = value.const_value
        if tensor is not None and tensor.dtype == ir.DataType.FLOAT and type(tensor) is not ir.Tensor:
            value.const_value = ir.Tensor(np.array(tensor.numpy(), copy=True), name=tensor.name)


def float32_inputs(inputs: Any) -> Any:
    """``inputs``' bfloat16 tensors (and its export example's) as float32; returns what to put
    back with ``restore_inputs``."""
    import torch
    import torch.utils._pytree as pytree

    def up(x: Any) -> Any:
        return x.float() if isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16 else x

    saved = (inputs.args, inputs.kwargs, inputs.example)
    inputs.args, inputs.kwargs = pytree.tree_map(up, (inputs.args, inputs.kwargs))
    if inputs.example is not None:
        inputs.example = pytree.tree_map(up, inputs.example)
    return saved


def restore_inputs(inputs: Any, saved: Any) -> None:
    inputs.args, inputs.kwargs, inputs.example = saved


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
