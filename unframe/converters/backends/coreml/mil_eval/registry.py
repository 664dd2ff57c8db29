"""The registry of MIL kernels: one numpy function per MIL op type, registered with ``@kernel``.

A kernel is called as ``fn(ctx, **inputs)`` where ``inputs`` are the op's evaluated inputs by
parameter name (numpy arrays, numpy scalars, python strings, or lists for tuple inputs) and
``ctx`` is the :class:`~unframe.converters.backends.coreml.mil_eval.evaluator.KernelContext`.
It returns one value, or a tuple with one value per op output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from unframe.registry import Registry

KernelFn = Callable[..., Any]


class KernelError(RuntimeError):
    """A kernel failed or produced a value the program's types contradict (an evaluator bug)."""


_FAMILIES = (
    "elementwise", "activation", "reduction", "conv", "pool", "normalization", "linear",
    "tensor_operation", "tensor_transformation", "scatter_gather", "image_resizing",
    "recurrent", "control_flow", "constexpr", "quantization", "transformers", "classify", "states", "random",
)

KERNELS: Registry[KernelFn] = Registry(
    "MIL kernel",
    entry_point_group="unframe.mil_kernels",
    builtins=[f"unframe.converters.backends.coreml.mil_eval.kernels.{f}" for f in _FAMILIES],
)


def kernel(*op_types: str) -> Callable[[KernelFn], KernelFn]:
    """Register ``fn`` as the kernel of each MIL op type in ``op_types``."""

    def deco(fn: KernelFn) -> KernelFn:
        for op_type in op_types:
            KERNELS.register(op_type, fn)
        return fn

    return deco
