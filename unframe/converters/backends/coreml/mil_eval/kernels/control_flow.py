"""cond, while_loop, select and the tensor-list ops (iOS15 control_flow.py).

cond:       blocks[0] runs when pred is true, blocks[1] otherwise; no block inputs.
while_loop: blocks[0] (cond) and blocks[1] (body) both take the loop vars as block inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from unframe.converters.backends.coreml.mil_eval._ct import mil_types
from unframe.converters.backends.coreml.mil_eval.registry import kernel

MAX_ITERATIONS = 10_000_000  # a guard against a program whose loop never ends


@kernel("cond")
def cond(ctx: Any, pred: Any) -> Any:
    branch = ctx.op.blocks[0] if bool(np.asarray(pred).item()) else ctx.op.blocks[1]
    outputs = ctx.run_block(branch)
    return tuple(outputs) if len(outputs) != 1 else outputs[0]


@kernel("while_loop")
def while_loop(ctx: Any, loop_vars: list[Any]) -> Any:
    cond_block, body_block = ctx.op.blocks
    values = list(loop_vars)
    for _ in range(MAX_ITERATIONS):
        if not bool(np.asarray(ctx.run_block(cond_block, values)[0]).item()):
            break
        values = ctx.run_block(body_block, values)
    else:
        raise RuntimeError(f"while_loop {ctx.op.name!r} ran {MAX_ITERATIONS} iterations")
    return tuple(values) if len(values) != 1 else values[0]


@kernel("select")
def select(ctx: Any, cond: Any, a: Any, b: Any) -> np.ndarray:
    return np.where(np.asarray(cond).astype(bool), a, b)


@dataclass(frozen=True)
class TensorList:
    """A MIL list value: list ops return a new TensorList rather than mutate (SSA)."""

    items: tuple[Any, ...]
    elem_shape: tuple[int, ...]
    dtype: Any
    dynamic: bool

    def element(self, index: int) -> np.ndarray:
        item = self.items[index] if index < len(self.items) else None
        return np.zeros(self.elem_shape, self.dtype) if item is None else item

    def written(self, index: int, value: np.ndarray) -> TensorList:
        items = list(self.items)
        if index >= len(items):
            if not self.dynamic:
                raise IndexError(f"list_write at {index} past a fixed-length list of {len(items)}")
            items.extend([None] * (index + 1 - len(items)))
        items[index] = np.asarray(value, self.dtype)
        return TensorList(tuple(items), self.elem_shape, self.dtype, self.dynamic)


@kernel("make_list")
def make_list(ctx: Any, elem_shape: Any, init_length: Any = 1, dynamic_length: Any = True,
              dtype: str = "fp32") -> TensorList:
    types = mil_types()
    elem_type = ctx.op.outputs[0].elem_type
    np_dtype = types.nptype_from_builtin(elem_type.get_primitive())
    shape = tuple(int(s) for s in np.atleast_1d(elem_shape)) if not isinstance(elem_shape, list) else \
        tuple(int(np.asarray(s)) for s in elem_shape)
    return TensorList((None,) * int(init_length), shape, np_dtype, bool(dynamic_length))


@kernel("list_length")
def list_length(ctx: Any, ls: TensorList) -> np.ndarray:
    return np.int32(len(ls.items))


@kernel("list_write")
def list_write(ctx: Any, ls: TensorList, index: Any, value: Any) -> TensorList:
    return ls.written(int(index), value)


@kernel("list_read")
def list_read(ctx: Any, ls: TensorList, index: Any) -> np.ndarray:
    return ls.element(int(index))


@kernel("list_gather")
def list_gather(ctx: Any, ls: TensorList, indices: Any) -> np.ndarray:
    return np.stack([ls.element(int(i)) for i in np.atleast_1d(indices)])


@kernel("list_scatter")
def list_scatter(ctx: Any, ls: TensorList, indices: Any, value: np.ndarray) -> TensorList:
    out = ls
    for i, index in enumerate(np.atleast_1d(indices)):
        out = out.written(int(index), np.asarray(value)[i])
    return out
