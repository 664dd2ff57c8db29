"""The registry of MIL kernels: one numpy function per MIL op type, registered with ``@kernel``.

A kernel is called as ``fn(ctx, **inputs)`` where ``inputs`` are the op's evaluated inputs by
parameter name (numpy arrays, numpy scalars, python strings, or lists for tuple inputs) and
``ctx`` is the :class:`~unframe.converters.backends.coreml.mil_eval.evaluator.KernelContext`.
It returns one value, or a tuple with one value per op output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from unframe.registry import Registry

KernelFn = Callable[..., Any]


class KernelError(RuntimeError):
    """A kernel failed or produced a value the program's types contradict (an evaluator bug)."""


class StateCell:
    """What the evaluator binds a state input (iOS18) to, for the state kernels: an array
    ``read_state`` copies out and ``coreml_update_state`` replaces, which outlives the call when
    the caller keeps the ``states`` dict (as MLState). Declared beside the registry so that the
    kernels never import the evaluator that loads them."""

    def __init__(self, states: dict[str, np.ndarray], name: str) -> None:
        self.states, self.name = states, name

    @property
    def value(self) -> np.ndarray:
        return self.states[self.name]

    @value.setter
    def value(self, array: np.ndarray) -> None:
        self.states[self.name] = array


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
