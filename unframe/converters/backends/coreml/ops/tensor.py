"""Layout ops: Reshape Flatten Squeeze Unsqueeze Transpose Concat Split Slice Expand Tile Pad
Identity Cast CastLike DepthToSpace SpaceToDepth Trilu ReverseSequence Dropout."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from unframe import limits
from unframe.converters.backends.coreml.context import MIL_DTYPES, TranslateContext
from unframe.converters.backends.coreml.ops import translator
from unframe.converters.backends.coreml.ops._util import (
    cast,
    dim,
    dtype_name,
    is_bool,
    mb,
    norm_axis,
    np_dtype_of,
    scalar,
    shape_of,
    static_dims,
)
from unframe.converters.backends.coreml.ops.linear import transposed_for_matmuls


@translator("Identity")
def identity(ctx: TranslateContext) -> Any:
    return mb().identity(x=ctx.x(0))


def _dropout_check(node: ir.Node) -> list[str]:
    training = node.inputs[2] if len(node.inputs) > 2 else None
    if training is None:
        return []
    value = training.const_value
    if value is None or bool(value.numpy().reshape(-1)[0]):
        return ["Dropout in training mode is random (training_mode must be a constant false)"]
    return []


@translator("Dropout", check=_dropout_check)
def dropout(ctx: TranslateContext) -> Any:
    """Inference: the input passes through; the optional mask is all true."""
    x = mb().identity(x=ctx.x(0))
    if len(ctx.node.outputs) > 1:
        static = static_dims(x.shape)
        if static:  # a constant mask: its size comes from the model, so check it first
            limits.check_array([int(d) for d in x.shape], bool, f"Dropout {ctx.node.name!r}'s mask")
        ones = mb().fill(shape=shape_of(x), value=True) if not static \
            else np.ones([int(d) for d in x.shape], dtype=bool)
        return x, mb().identity(x=ones) if isinstance(ones, np.ndarray) else ones
    return x


@translator("Reshape")
def reshape(ctx: TranslateContext) -> Any:
    m, x = mb(), ctx.x(0)
    target = ctx.ints(1)
    allowzero = int(ctx.attr("allowzero", 0))
    if target is None:
        return m.reshape(x=x, shape=ctx.x(1))
    if not allowzero and 0 in target:
        if not all(isinstance(x.shape[i], (int, np.integer)) for i, t in enumerate(target) if t == 0):
            # copy the dynamic dims from the input's shape at run time
            parts = [dim(x, i) if t == 0 else t for i, t in enumerate(target)]
            return m.reshape(x=x, shape=_stack_dims(parts))
        target = [int(x.shape[i]) if t == 0 else t for i, t in enumerate(target)]
    return m.reshape(x=x, shape=np.array(target, dtype=np.int32))


def _stack_dims(parts: list[Any]) -> Any:
    m = mb()
    vals = [m.expand_dims(x=p, axes=[0]) if not isinstance(p, int) else np.array([p], dtype=np.int32)
            for p in parts]
    return m.concat(values=vals, axis=0)


@translator("Flatten")
def flatten(ctx: TranslateContext) -> Any:
    m, x = mb(), ctx.x(0)
    rank = ctx.rank(0)
    axis = norm_axis(int(ctx.attr("axis", 1)), rank)
    if axis == 0:
        return m.reshape(x=x, shape=np.array([1, -1], dtype=np.int32))
    if static_dims(x.shape[:axis]):
        lead = int(np.prod([int(d) for d in x.shape[:axis]]))
        return m.reshape(x=x, shape=np.array([lead, -1], dtype=np.int32))
    if static_dims(x.shape[axis:]):
        tail = int(np.prod([int(d) for d in x.shape[axis:]]))
        return m.reshape(x=x, shape=np.array([-1, tail], dtype=np.int32))
    return m.flatten2d(x=x, axis=axis)


@translator("Squeeze")
def squeeze(ctx: TranslateContext) -> Any:
    x = ctx.x(0)
    rank = ctx.rank(0)
    if ctx.has(1):
        axes = ctx.ints(1)
        if axes is None:
            raise ctx.err("Squeeze axes must be constant")
    else:
        if not static_dims(x.shape):
            raise ctx.err("Squeeze without axes needs a static input shape")
        axes = [i for i, d in enumerate(x.shape) if int(d) == 1]
    if not axes:
        return mb().identity(x=x)
    return mb().squeeze(x=x, axes=[norm_axis(a, rank) for a in axes])


@translator("Unsqueeze")
def unsqueeze(ctx: TranslateContext) -> Any:
    axes = ctx.ints(1)
    if axes is None:
        raise ctx.err("Unsqueeze axes must be constant")
    out_rank = ctx.rank(0) + len(axes)
    return mb().expand_dims(x=ctx.x(0), axes=sorted(norm_axis(a, out_rank) for a in axes))


@translator("Transpose")
def transpose(ctx: TranslateContext) -> Any:
    perm = ctx.attr("perm")
    if perm is None:
        perm = list(reversed(range(ctx.rank(0))))
    perm = [int(p) for p in perm]
    deferred = transposed_for_matmuls(ctx, perm)  # a weight MatMuls read with transpose_y
    return deferred if deferred is not None else mb().transpose(x=ctx.x(0), perm=perm)


@translator("Concat")
def concat(ctx: TranslateContext) -> Any:
    values = [ctx.x(i) for i in range(len(ctx.inputs)) if ctx.has(i)]
    # ONNX allows empty operands along the axis; MIL does not
    axis = int(ctx.attr("axis"))
    values = [v for v in values if not (static_dims(v.shape) and 0 in [int(d) for d in v.shape])] or values[:1]
    if len(values) == 1:
        return mb().identity(x=values[0])
    return mb().concat(values=values, axis=axis)


@translator("Split")
def split(ctx: TranslateContext) -> Any:
    m, x = mb(), ctx.x(0)
    axis = int(ctx.attr("axis", 0))
    n_out = len(ctx.node.outputs)
    if ctx.has(1):
        sizes = ctx.ints(1)
        if sizes is None:
            raise ctx.err("Split sizes must be constant")
        outs = m.split(x=x, split_sizes=np.array(sizes, dtype=np.int32), axis=axis)
    else:
        size = x.shape[norm_axis(axis, ctx.rank(0))]
        if isinstance(size, (int, np.integer)) and int(size) % n_out:
            chunk = -(-int(size) // n_out)  # ONNX: equal chunks, the last one smaller
            sizes = [chunk] * (n_out - 1) + [int(size) - chunk * (n_out - 1)]
            outs = m.split(x=x, split_sizes=np.array(sizes, dtype=np.int32), axis=axis)
        else:
            outs = m.split(x=x, num_splits=n_out, axis=axis)
    return list(outs) if isinstance(outs, (list, tuple)) else [outs]


_INT_MAX = 2**31 - 1


@translator("Slice")
def slice_(ctx: TranslateContext) -> Any:
    """Full-rank begin/end/stride with masks for the untouched axes."""
    m, x = mb(), ctx.x(0)
    rank = ctx.rank(0)
    starts, ends = ctx.ints(1), ctx.ints(2)
    if starts is None or ends is None:
        return _runtime_slice(ctx, x, rank)
    axes = ctx.ints(3) if ctx.has(3) else list(range(len(starts or [])))
    steps = ctx.ints(4) if ctx.has(4) else [1] * len(axes)
    if starts is None or ends is None or axes is None or steps is None:
        raise ctx.err("Slice starts/ends/axes/steps must be constant")
    begin, end, stride = [0] * rank, [0] * rank, [1] * rank
    begin_mask, end_mask = [True] * rank, [True] * rank
    for s, e, a, st in zip(starts, ends, axes, steps, strict=False):
        a = norm_axis(a, rank)
        size = x.shape[a]
        known = isinstance(size, (int, np.integer))
        stride[a] = st
        if known:
            s, e = _clamp_slice(s, e, st, int(size))
            begin[a], begin_mask[a] = s, False
            if not (st < 0 and e == -1):  # -1 with a negative step: run to the front
                end[a], end_mask[a] = e, False
            continue
        if not _open(s):
            begin[a], begin_mask[a] = s, False
        if not _open(e):
            end[a], end_mask[a] = e, False
    return m.slice_by_index(x=x, begin=np.array(begin, dtype=np.int32), end=np.array(end, dtype=np.int32),
                            stride=np.array(stride, dtype=np.int32), begin_mask=begin_mask,
                            end_mask=end_mask)


def _runtime_slice(ctx: TranslateContext, x: Any, rank: int) -> Any:
    """Starts or ends known only at run time (e.g. a position table cut to the sequence length,
    ``table[:Shape(x)[1]]``): begin and end are built in the program, each bound normalized as
    ONNX does (a negative one counts from the end, then clamped to [0, size]). Axes must be
    constant and steps 1."""
    m = mb()
    axes = ctx.ints(3) if ctx.has(3) else None
    count = ctx.x(1).shape[0] if ctx.x(1).shape else None
    if axes is None and isinstance(count, (int, np.integer)):
        axes = list(range(int(count)))
    if axes is None:
        raise ctx.err("Slice with run-time starts/ends needs constant axes")
    steps = ctx.ints(4) if ctx.has(4) else [1] * len(axes)
    if steps is None or any(st != 1 for st in steps):
        raise ctx.err("Slice with run-time starts/ends needs constant steps of 1")
    axes = [norm_axis(a, rank) for a in axes]
    shape = m.shape(x=x)
    bounds = {name: m.cast(x=ctx.x(i), dtype="int32") for name, i in (("begin", 1), ("end", 2))}
    begin, end = [], []
    for a in range(rank):
        size = m.slice_by_index(x=shape, begin=np.array([a], dtype=np.int32), end=np.array([a + 1], dtype=np.int32))
        if a not in axes:
            begin.append(np.zeros(1, dtype=np.int32))
            end.append(size)
            continue
        i = axes.index(a)
        for name, out in (("begin", begin), ("end", end)):
            v = m.slice_by_index(x=bounds[name], begin=np.array([i], dtype=np.int32),
                                 end=np.array([i + 1], dtype=np.int32))
            v = m.select(cond=m.less(x=v, y=np.int32(0)), a=m.add(x=v, y=size), b=v)
            out.append(m.minimum(x=m.maximum(x=v, y=np.int32(0)), y=size))
    return m.slice_by_index(x=x, begin=m.concat(values=begin, axis=0), end=m.concat(values=end, axis=0))


def _open(v: int) -> bool:
    """Whether a bound means 'to the edge' (ONNX uses huge ints for that)."""
    return v >= _INT_MAX or v <= -_INT_MAX


def _clamp_slice(s: int, e: int, st: int, n: int) -> tuple[int, int]:
    """ONNX's clamping of starts/ends for one axis of size n (end -1 means 'before 0' for
    negative steps and is returned as -1)."""
    s = s + n if s < 0 else s
    e = e + n if e < 0 else e
    if st > 0:
        s, e = min(max(s, 0), n), min(max(e, 0), n)
        return s, e
    s, e = min(max(s, -1), n - 1), min(max(e, -1), n - 1)
    return s, e


@translator("Expand")
def expand(ctx: TranslateContext) -> Any:
    """Broadcast by adding zeros of the target shape (both ways, as ONNX Expand does); a bool
    input arrives as int32 (legalize.py)."""
    m, x = mb(), ctx.x(0)
    shape = ctx.ints(1)
    if shape is not None:
        target = [max(int(s), 0) for s in shape]
        limits.check_array(target, np_dtype_of(x), f"Expand {ctx.node.name!r}'s target shape")
        return m.add(x=x, y=np.zeros(target, dtype=np_dtype_of(x)))
    return m.add(x=x, y=m.fill(shape=cast(ctx.x(1), "int32"), value=scalar(0, x)))


@translator("Tile")
def tile(ctx: TranslateContext) -> Any:
    reps = ctx.ints(1)
    if reps is None:
        return mb().tile(x=ctx.x(0), reps=ctx.x(1))
    return mb().tile(x=ctx.x(0), reps=np.array(reps, dtype=np.int32))


def _pad_check(node: ir.Node) -> list[str]:
    return []


@translator("Pad", check=_pad_check)
def pad(ctx: TranslateContext) -> Any:
    """Constant, reflect and edge padding in MIL; wrap by concatenating slices; negative pads
    crop."""
    m, x = mb(), ctx.x(0)
    rank = ctx.rank(0)
    pads = ctx.ints(1)
    if pads is None:
        raise ctx.err("Pad pads must be constant")
    axes = ctx.ints(3) if ctx.has(3) else list(range(rank))
    axes = [norm_axis(a, rank) for a in axes or []]
    before, after = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        before[a], after[a] = pads[i], pads[i + len(axes)]
    mode = ctx.attr("mode", "constant")
    if any(p < 0 for p in before + after):
        x = _crop(x, [min(p, 0) for p in before], [min(p, 0) for p in after])
        before, after = [max(p, 0) for p in before], [max(p, 0) for p in after]
    if not any(before + after):
        return m.identity(x=x)
    if mode == "wrap":
        return _wrap(x, before, after)
    value = ctx.const(2)
    cval = float(np.asarray(value).reshape(-1)[0]) if value is not None and np.asarray(value).size else 0.0
    flat = np.array([p for b, e in zip(before, after, strict=False) for p in (b, e)], dtype=np.int32)
    mil_mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}[mode]
    # integer and bool inputs arrive as fp32 (legalize.py): MIL pads floats only
    return m.pad(x=x, pad=flat, mode=mil_mode, constant_val=float(cval))


def _crop(x: Any, before: list[int], after: list[int]) -> Any:
    rank = len(before)
    return mb().slice_by_index(
        x=x, begin=np.array([-b for b in before], dtype=np.int32),
        end=np.array([a for a in after], dtype=np.int32), stride=np.ones(rank, dtype=np.int32),
        begin_mask=[b == 0 for b in before], end_mask=[a == 0 for a in after])


def _wrap(x: Any, before: list[int], after: list[int]) -> Any:
    m = mb()
    out = x
    for axis, (b, e) in enumerate(zip(before, after, strict=False)):
        parts = []
        if b:
            parts.append(_take(out, axis, -b, None))
        parts.append(out)
        if e:
            parts.append(_take(out, axis, 0, e))
        if len(parts) > 1:
            out = m.concat(values=parts, axis=axis)
    return out


def _take(x: Any, axis: int, start: int, stop: int | None) -> Any:
    rank = len(x.shape)
    begin, end = [0] * rank, [0] * rank
    begin[axis] = start
    end_mask = [True] * rank
    if stop is not None:
        end[axis], end_mask[axis] = stop, False
    begin_mask = [True] * rank
    begin_mask[axis] = False
    return mb().slice_by_index(x=x, begin=np.array(begin, dtype=np.int32), end=np.array(end, dtype=np.int32),
                               begin_mask=begin_mask, end_mask=end_mask)


def _cast_check(node: ir.Node) -> list[str]:
    to = node.attributes.get("to")
    if to is not None and ir.DataType(to.value) not in MIL_DTYPES:
        return [f"cast to {ir.DataType(to.value).name}, which CoreML can't hold"]
    return []


@translator("Cast", check=_cast_check)
def cast_(ctx: TranslateContext) -> Any:
    to = ir.DataType(int(ctx.attr("to")))
    return _cast_to(ctx, ctx.x(0), to)


@translator("CastLike")
def cast_like(ctx: TranslateContext) -> Any:
    to = ctx.onnx_in_type(1) or ir.DataType.FLOAT
    return _cast_to(ctx, ctx.x(0), to)


def _cast_to(ctx: TranslateContext, x: Any, to: ir.DataType) -> Any:
    target = MIL_DTYPES.get(to)
    if target is None:
        raise ctx.err(f"cast to {to.name}, which CoreML can't hold")
    if dtype_name(x) == target:
        return mb().identity(x=x)
    if x.val is not None:
        # fold a known value in numpy: coremltools' value inference of sign/abs fails on the
        # python float a folded scalar reduction leaves (torchvision's transform: a ReduceMax
        # of a constant, cast to int64)
        value = np.asarray(x.val)
        if target == "int32" and value.dtype.kind == "f":
            value = np.trunc(value)
        numpy_type = {"fp16": np.float16, "fp32": np.float32, "int32": np.int32, "bool": np.bool_}[target]
        return mb().const(val=value.astype(numpy_type))
    if target == "int32" and dtype_name(x).startswith("fp"):
        # ONNX float->int casts truncate toward zero
        x = mb().mul(x=mb().sign(x=x), y=mb().floor(x=mb().abs(x=x)))
    return mb().cast(x=x, dtype=target)


@translator("DepthToSpace")
def depth_to_space(ctx: TranslateContext) -> Any:
    block = int(ctx.attr("blocksize"))
    if ctx.attr("mode", "DCR") == "CRD":
        return mb().pixel_shuffle(x=ctx.x(0), upscale_factor=block)
    return mb().depth_to_space(x=ctx.x(0), block_size=block)


@translator("SpaceToDepth")
def space_to_depth(ctx: TranslateContext) -> Any:
    return mb().space_to_depth(x=ctx.x(0), block_size=int(ctx.attr("blocksize")))


@translator("Trilu")
def trilu(ctx: TranslateContext) -> Any:
    """A constant triangular mask over the last two (static) dims."""
    m, x = mb(), ctx.x(0)
    k = int(ctx.const(1)) if ctx.has(1) else 0
    rows, cols = x.shape[-2], x.shape[-1]
    if not static_dims([rows, cols]):
        raise ctx.err("Trilu needs static sizes on the last two dims")
    ones = np.ones((int(rows), int(cols)), dtype=bool)
    mask = np.triu(ones, k) if int(ctx.attr("upper", 1)) else np.tril(ones, k)
    if is_bool(x):
        return m.logical_and(x=x, y=mask)
    return m.select(cond=mask, a=x, b=scalar(0, x))


@translator("ReverseSequence")
def reverse_sequence(ctx: TranslateContext) -> Any:
    return mb().reverse_sequence(x=ctx.x(0), lengths=cast(ctx.x(1), "int32"),
                                 seq_axis=int(ctx.attr("time_axis", 0)),
                                 batch_axis=int(ctx.attr("batch_axis", 1)))
