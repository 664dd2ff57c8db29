"""Slice: ``starts``/``ends``/``axes`` attributes -> inputs (plus ``steps``) at 10.

9->10::  Slice(x, starts=s, ends=e, axes=a)   ->  Slice(x, Constant(s), Constant(e), Constant(a))
10->9::  Slice(x, s, e, a, steps)             ->  Slice(x, starts=, ends=, axes=)  (all folded, steps 1)
10->9::  Slice(x, s, e, a, steps=[2])         ->  Gather(x, Constant(range(D)[s:e:2]), axis=a)
                                                  (folded, a static axis length D; Slice-9 for the
                                                  axes that step by 1); without a static D,
                                                  the run-time form below
10->9::  Slice(x, s, e, a, t) run-time        ->  per sliced axis:
                                                  Compress(Gather(x, order), mask, axis)  (see dynamic.py)
                                                  below opset 9 (final target 7/8):
                                                  Gather(x, s' + t' * arange(count), axis), arange
                                                  scanned out by a Loop (see dynamic.py)
         run-time axes (static rank r): every axis d < r is sliced with the start/end/step whose axis
         is d (ReduceSum(Where(Equal(axes, d), starts, 0))), or the whole axis when none is
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

import unframe.version_converter.dynamic as dyn
from unframe.version_converter.context import Step
from unframe.version_converter.moves import drop_inputs_from, require_types
from unframe.version_converter.registry import adapter

INT64_MAX = np.iinfo(np.int64).max


@adapter("Slice", 9, 10, type_free=True)
def slice_9_10(node: ir.Node, step: Step) -> None:
    starts, ends, axes = step.drop_attr("starts"), step.drop_attr("ends"), step.drop_attr("axes")
    node.resize_inputs(4 if axes is not None else 3)
    node.replace_input_with(1, step.const(np.asarray(starts, dtype=np.int64)))
    node.replace_input_with(2, step.const(np.asarray(ends, dtype=np.int64)))
    if axes is not None:
        node.replace_input_with(3, step.const(np.asarray(axes, dtype=np.int64)))


@adapter("Slice", 10, 9)
def slice_10_9(node: ir.Node, step: Step) -> None:
    require_types(step)
    folded = [step.fold(step.input(i)) for i in range(1, 5)]
    if all(f is not None or step.input(i + 1) is None for i, f in enumerate(folded)):
        starts, ends, axes, steps = (None if f is None else f.reshape(-1) for f in folded)
        axes = _static_axes(step, node, axes, len(starts))
        if steps is None or np.all(steps == 1):
            _to_attributes(node, step, starts, ends, axes)
            return
        if _static_lengths(node, axes, steps):
            _strided_gather(node, step, starts, ends, axes, steps)
            return
    _runtime_slice(node, step, folded)


def _static_axes(step: Step, node: ir.Node, axes: np.ndarray | None, count: int) -> list[int]:
    if axes is None:
        return list(range(count))
    if np.any(axes < 0):
        rank = step.rank(node.inputs[0])
        if rank is None:
            step.refuse("negative axes need a known input rank before opset 10")
        axes = axes % rank
    return [int(a) for a in axes]


def _to_attributes(node: ir.Node, step: Step, starts: np.ndarray, ends: np.ndarray, axes: list[int]) -> None:
    drop_inputs_from(step, 1)
    step.set_attr("starts", ir.AttrInt64s("starts", [int(v) for v in starts]))
    step.set_attr("ends", ir.AttrInt64s("ends", [int(v) for v in ends]))
    step.set_attr("axes", ir.AttrInt64s("axes", axes))
    out = node.outputs[0]
    if out.shape is None:
        out.shape = _sliced_shape(node.inputs[0], axes, starts, ends, np.ones(len(axes), dtype=np.int64))


def _sliced_shape(x: ir.Value, axes: list[int], starts: np.ndarray | None, ends: np.ndarray | None,
                  steps: np.ndarray | None) -> ir.Shape | None:
    """x's shape with each sliced axis' length (unknown unless everything is static): users of the
    output need at least its rank below opset 11 (negative axes), which inference may not give."""
    if x.shape is None:
        return None
    dims: list[int | None] = [d if isinstance(d, int) else None for d in x.shape]
    for j, axis in enumerate(axes):
        known = dims[axis] is not None and starts is not None and ends is not None and steps is not None
        dims[axis] = len(_picked(dims[axis], int(starts[j]), int(ends[j]), int(steps[j]))) if known else None
    return ir.Shape(dims)


def _static_lengths(node: ir.Node, axes: list[int], steps: np.ndarray) -> bool:
    shape = node.inputs[0].shape
    return shape is not None and all(isinstance(shape[axes[j]], int) for j, t in enumerate(steps) if t != 1)


def _picked(length: int, start: int, end: int, stride: int) -> list[int]:
    """The indices Slice-13 takes along an axis of ``length``. Not Python's slicing: backwards, a
    start before the axis clamps to 0 (its first element is taken), where Python takes nothing."""
    start, end = (v + length if v < 0 else v for v in (start, end))
    back = int(stride < 0)
    start = min(max(start, 0), length - back)
    end = min(max(end, -back), length - back)
    return list(range(start, end, stride))


def _strided_gather(node: ir.Node, step: Step, starts: np.ndarray, ends: np.ndarray, axes: list[int],
                    steps: np.ndarray) -> None:
    """Axes stepping by 1 stay a Slice-9; every other axis takes the exact index list Slice-13's
    clamping gives through a Gather."""
    x = node.inputs[0]
    shape = x.shape
    strided = [j for j, t in enumerate(steps) if t != 1]
    out = x
    plain = [j for j, t in enumerate(steps) if t == 1]
    if plain:
        out = step.op("Slice", [x], {"starts": [int(starts[j]) for j in plain],
                                     "ends": [int(ends[j]) for j in plain], "axes": [axes[j] for j in plain]})
        out.type, out.shape = x.type, _sliced_shape(x, [axes[j] for j in plain], starts[plain], ends[plain],
                                                    steps[plain])
    for j in strided:
        length = int(shape[axes[j]])
        picked = _picked(length, int(starts[j]), int(ends[j]), int(steps[j]))
        taken = step.op("Gather", [out, step.const(np.asarray(picked, dtype=np.int64))], {"axis": axes[j]})
        taken.type, taken.shape = x.type, _sliced_shape(out, [axes[j]], starts[[j]], ends[[j]], steps[[j]])
        out = taken
    step.replace_with([out])


def _runtime_slice(node: ir.Node, step: Step, folded: list[np.ndarray | None]) -> None:
    x = node.inputs[0]
    rank = step.rank(x)
    starts_value = step.input(1)
    count = None if starts_value is None or starts_value.shape is None else starts_value.shape[0]
    axes = folded[2]
    if step.input(3) is not None and axes is None:
        if rank is None or not isinstance(count, int):
            step.refuse("run-time Slice axes need a known input rank and starts length before opset 10")
        _slice_every_axis(node, step, rank, folded)
        return
    if axes is None and not isinstance(count, int):
        step.refuse("run-time Slice starts of unknown length need explicit axes before opset 10")
    axes_list = _static_axes(step, node, None if axes is None else axes.reshape(-1), count or 0)
    out = x
    for j, axis in enumerate(axes_list):
        start, end = _pick(step, 1, folded, j), _pick(step, 2, folded, j)
        stride, sign = _stride(step, folded, j)
        out = dyn.slice_axis(step, out, axis, start, end, stride, sign)
    _finish(step, x, out, axes_list)


def _pick(step: Step, index: int, folded: list[np.ndarray | None], j: int) -> ir.Value:
    known = folded[index - 1]
    if known is not None:
        return dyn.const1(step, int(known.reshape(-1)[j]))
    return dyn.op(step, "Gather", [dyn.as_int64(step, step.input(index)), dyn.const1(step, j)])


def _stride(step: Step, folded: list[np.ndarray | None], j: int) -> tuple[ir.Value | None, int | None]:
    if step.input(4) is None:
        return None, 1
    known = folded[3]
    if known is None:
        return _pick(step, 4, folded, j), None
    value = int(known.reshape(-1)[j])
    return (None, 1) if value == 1 else (dyn.const1(step, value), 1 if value > 0 else -1)


def _slice_every_axis(node: ir.Node, step: Step, rank: int, folded: list[np.ndarray | None]) -> None:
    x = node.inputs[0]
    axes = dyn.wrap_negative(step, dyn.as_int64(step, step.input(3)), dyn.const1(step, rank))
    values = [None if step.input(i) is None else dyn.as_int64(step, step.input(i)) for i in (1, 2, 4)]
    zero = dyn.const1(step, 0)
    out = x
    for d in range(rank):
        match = dyn.op(step, "Equal", [axes, dyn.const1(step, d)], dyn.BOOL)
        count = dyn.op(step, "ReduceSum", [dyn.op(step, "Cast", [match], to=ir.DataType.INT64)])
        present = dyn.less(step, zero, count)

        def chosen(value: ir.Value, default: int) -> ir.Value:
            total = dyn.op(step, "ReduceSum", [dyn.where(step, match, value, zero)])  # noqa: B023
            return dyn.where(step, present, total, dyn.const1(step, default))  # noqa: B023

        start, end = chosen(values[0], 0), chosen(values[1], INT64_MAX)
        stride = None if values[2] is None else chosen(values[2], 1)
        out = dyn.slice_axis(step, out, d, start, end, stride, None if stride is not None else 1)
    _finish(step, x, out, list(range(rank)))


def _finish(step: Step, x: ir.Value, out: ir.Value, axes: list[int]) -> None:
    if out is x:  # nothing sliced: the node's output must stay a value of its own
        out = step.op("Identity", [x])
    if step.node.outputs[0].shape is None:
        out.shape = _sliced_shape(x, axes, None, None, None)
    step.replace_with([out])
