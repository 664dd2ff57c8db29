"""Small MIL-building helpers shared by the translators."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from unframe.converters.backends.coreml.context import TranslateContext


def mb() -> Any:
    from coremltools.converters.mil import Builder

    return Builder


def np_dtype_of(var: Any) -> type:
    """The numpy scalar type matching a MIL var's element type."""
    from coremltools.converters.mil.mil import types

    dt = var.dtype
    if dt == types.fp16:
        return np.float16
    if dt == types.fp32:
        return np.float32
    if dt == types.bool:
        return np.bool_
    return np.int32


def scalar(value: float, like: Any) -> np.ndarray:
    """A rank-0 constant of ``like``'s element type."""
    return np.array(value, dtype=np_dtype_of(like))


def is_float(var: Any) -> bool:
    from coremltools.converters.mil.mil import types

    return bool(types.is_float(var.dtype))


def is_bool(var: Any) -> bool:
    from coremltools.converters.mil.mil import types

    return var.dtype == types.bool


def dtype_name(var: Any) -> str:
    from coremltools.converters.mil.mil import types

    return {types.fp16: "fp16", types.fp32: "fp32", types.bool: "bool"}.get(var.dtype, "int32")


_NP_OF = {"fp16": np.float16, "fp32": np.float32, "int32": np.int32, "bool": np.bool_}


def cast(var: Any, dtype: str) -> Any:
    if dtype_name(var) == dtype:
        return var
    if var.val is not None:
        # fold known values in numpy: coremltools' own folding of a scalar cast yields a Python
        # float, on which the value inference of later unary ops (abs, floor...) fails
        return mb().const(val=np.asarray(var.val).astype(_NP_OF[dtype]))
    return mb().cast(x=var, dtype=dtype)


def norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def static_dims(shape: Sequence[Any]) -> bool:
    return all(isinstance(d, (int, np.integer)) for d in shape)


def shape_of(var: Any) -> Any:
    """The shape as a const when static, else a ``shape`` op."""
    if static_dims(var.shape):
        return np.array([int(d) for d in var.shape], dtype=np.int32)
    return mb().shape(x=var)


def dim(var: Any, axis: int) -> Any:
    """One dim as an int when static, else a rank-0 int32 var."""
    d = var.shape[axis]
    if isinstance(d, (int, np.integer)):
        return int(d)
    return mb().gather(x=mb().shape(x=var), indices=np.int32(axis), axis=0)


def broadcast_to_rank(vec: Any, rank: int, axis: int) -> Any:
    """Reshape a 1-D per-channel tensor so it broadcasts along ``axis`` of a rank-``rank`` tensor."""
    shape = [1] * rank
    shape[axis] = -1
    if isinstance(vec, np.ndarray):
        return vec.reshape(shape)
    return mb().reshape(x=vec, shape=np.array(shape, dtype=np.int32))


def round_half_even(x: Any) -> Any:
    """numpy/ONNX rounding (ties to even), built from floor so it does not depend on how a
    runtime rounds ties."""
    m = mb()
    half = scalar(0.5, x)
    f = m.floor(x=m.add(x=x, y=half))
    tie = m.equal(x=m.sub(x=f, y=x), y=half)
    odd = m.not_equal(x=m.mod(x=f, y=scalar(2.0, x)), y=scalar(0.0, x))
    return m.select(cond=m.logical_and(x=tie, y=odd), a=m.sub(x=f, y=scalar(1.0, x)), b=f)


def ints(value: Any) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


@contextlib.contextmanager
def in_fp32(ctx: TranslateContext) -> Iterator[None]:
    """Every MIL op written inside stays in float32 in an fp16 program (left out of the fp16 cast
    pass, by its outputs' names). For integers computed in float (an integer Div or Mod, a
    MaxPool or Resize of int32, NonMaxSuppression's indices): float32 holds every integer below
    2**24 exactly, fp16 only those up to 2048, so a torchvision detector's ``topk_index // 3``
    over 9,207 candidates came out of an fp16 program pointing at other anchors and classes."""
    from coremltools.converters.mil.mil.block import curr_block

    block = curr_block()
    before = len(block.operations)
    yield
    added = len(block.operations) - before
    for op, _ in zip(reversed(block.operations), range(added), strict=False):
        ctx.graph.fp32_ops.update(v.name for v in op.outputs)
