"""States (iOS18): ``read_state`` copies a state's tensor out, ``coreml_update_state`` replaces it.

The evaluator binds a state input to a ``StateCell`` over the caller's ``states`` dict, so what a
call writes is there for the next call (Core ML's ``MLState``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.mil_eval.registry import KernelError, StateCell, kernel


def _cell(ctx: Any, state: Any) -> Any:
    if not isinstance(state, StateCell):
        raise KernelError(f"MIL op {ctx.op.op_type!r} (name {ctx.op.name!r}) reads a value that "
                          "is not a state")
    return state


@kernel("read_state")
def read_state(ctx: Any, input: Any) -> np.ndarray:  # noqa: A002 - the op's argument name
    return np.array(_cell(ctx, input).value, copy=True)


@kernel("coreml_update_state")
def coreml_update_state(ctx: Any, state: Any, value: np.ndarray) -> np.ndarray:
    cell = _cell(ctx, state)
    current = cell.value
    array = np.asarray(value)
    if array.shape != current.shape:
        raise KernelError(f"coreml_update_state {ctx.op.name!r}: a value of shape {array.shape} "
                          f"for a state of shape {current.shape}")
    cell.value = array.astype(current.dtype, copy=True)
    return array
