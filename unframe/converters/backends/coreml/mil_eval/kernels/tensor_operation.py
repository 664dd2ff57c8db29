"""Tensor-building and rearranging ops (iOS15/16/17 tensor_operation.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.mil_eval.registry import kernel


@kernel("band_part")
def band_part(ctx: Any, x: np.ndarray, lower: Any = -1, upper: Any = -1) -> np.ndarray:
    rows, cols = x.shape[-2:]
    m = np.arange(rows)[:, None]
    n = np.arange(cols)[None, :]
    keep = ((int(lower) < 0) | (m - n <= int(lower))) & ((int(upper) < 0) | (n - m <= int(upper)))
    return np.where(keep, x, np.zeros((), x.dtype))


@kernel("cumsum")
def cumsum(ctx: Any, x: np.ndarray, axis: Any = 0, exclusive: Any = False, reverse: Any = False) -> np.ndarray:
    ax = int(axis)
    data = np.flip(x, axis=ax) if bool(reverse) else np.asarray(x)
    out = np.cumsum(data, axis=ax, dtype=data.dtype)
    if bool(exclusive):
        out = np.concatenate([np.zeros_like(np.take(out, [0], axis=ax)),
                              np.take(out, np.arange(out.shape[ax] - 1), axis=ax)], axis=ax)
    return np.flip(out, axis=ax) if bool(reverse) else out


@kernel("fill")
def fill(ctx: Any, shape: Any, value: Any = 0.0) -> np.ndarray:
    return np.full([int(s) for s in np.atleast_1d(shape)], value, dtype=ctx.output_dtype())


@kernel("fill_like")
def fill_like(ctx: Any, ref_tensor: np.ndarray, value: Any = 0.0) -> np.ndarray:
    return np.full(np.shape(ref_tensor), value, dtype=ctx.output_dtype())


@kernel("non_zero")
def non_zero(ctx: Any, x: np.ndarray) -> np.ndarray:
    return np.transpose(np.nonzero(x)).astype(np.int32)


@kernel("one_hot")
def one_hot(ctx: Any, indices: np.ndarray, one_hot_vector_size: Any, axis: Any = -1, on_value: Any = 1,
            off_value: Any = 0) -> np.ndarray:
    depth = int(one_hot_vector_size)
    idx = np.asarray(indices).astype(np.int64)
    hot = idx[..., None] == np.arange(depth)
    out = np.where(hot, np.asarray(on_value), np.asarray(off_value)).astype(ctx.output_dtype())
    return np.moveaxis(out, -1, int(axis) % out.ndim)


@kernel("pad")
def pad(ctx: Any, x: np.ndarray, pad: Any, mode: str = "constant", constant_val: Any = 0.0) -> np.ndarray:
    """``pad`` holds (before, after) pairs for the last len(pad)//2 dims."""
    x = np.asarray(x)
    flat = [int(p) for p in np.atleast_1d(pad)]
    pairs = [(0, 0)] * (x.ndim - len(flat) // 2) + [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
    if mode == "constant":
        return np.pad(x, pairs, mode="constant", constant_values=np.asarray(constant_val, x.dtype))
    return np.pad(x, pairs, mode={"reflect": "reflect", "replicate": "edge"}[str(mode)])


@kernel("range_1d")
def range_1d(ctx: Any, end: Any, start: Any, step: Any) -> np.ndarray:
    return np.arange(start, end, step).astype(ctx.output_dtype())


@kernel("tile")
def tile(ctx: Any, x: np.ndarray, reps: Any) -> np.ndarray:
    return np.tile(x, [int(r) for r in np.atleast_1d(reps)])


@kernel("argsort")
def argsort(ctx: Any, x: np.ndarray, axis: Any = -1, ascending: Any = False) -> np.ndarray:
    x = np.asarray(x)
    keyed = x if bool(ascending) else -x
    return np.argsort(keyed, axis=int(axis), kind="stable").astype(np.int32)


@kernel("topk")
def topk(ctx: Any, x: np.ndarray, k: Any = 1, axis: Any = -1, ascending: Any = False, sort: Any = True,
         return_indices: Any = True, output_indices_dtype: str = "int32") -> Any:
    x = np.asarray(x)
    ax = int(axis) % x.ndim
    keyed = x if bool(ascending) else -x
    order = np.argsort(keyed, axis=ax, kind="stable")
    indices = np.take(order, np.arange(int(k)), axis=ax)
    values = np.take_along_axis(x, indices, axis=ax)
    if len(ctx.op.outputs) == 1:  # iOS16+ return_indices=False
        return values
    return values, indices


@kernel("flatten2d")
def flatten2d(ctx: Any, x: np.ndarray, axis: Any = 1) -> np.ndarray:
    x = np.asarray(x)
    ax = int(axis) % x.ndim if x.ndim else 0
    return x.reshape(int(np.prod(x.shape[:ax])), int(np.prod(x.shape[ax:])))


@kernel("shape")
def shape(ctx: Any, x: np.ndarray) -> np.ndarray:
    return np.asarray(np.shape(x), dtype=np.int32)


@kernel("concat")
def concat(ctx: Any, values: list[np.ndarray], axis: Any, interleave: Any = False) -> np.ndarray:
    arrays = [np.asarray(v) for v in values]
    ax = int(axis)
    if not bool(interleave):
        return np.concatenate(arrays, axis=ax)
    stacked = np.stack(arrays, axis=(ax % arrays[0].ndim) + 1)
    shape_ = list(arrays[0].shape)
    shape_[ax] *= len(arrays)
    return stacked.reshape(shape_)


@kernel("split")
def split(ctx: Any, x: np.ndarray, axis: Any, num_splits: Any = None, split_sizes: Any = None) -> tuple:
    x = np.asarray(x)
    ax = int(axis)
    if split_sizes is not None:
        bounds = np.cumsum([int(s) for s in np.atleast_1d(split_sizes)])[:-1]
        return tuple(np.split(x, bounds, axis=ax))
    return tuple(np.split(x, int(num_splits), axis=ax))


@kernel("stack")
def stack(ctx: Any, values: list[np.ndarray], axis: Any) -> np.ndarray:
    return np.stack([np.asarray(v) for v in values], axis=int(axis))


@kernel("non_maximum_suppression")
def non_maximum_suppression(ctx: Any, boxes: np.ndarray, scores: np.ndarray, iou_threshold: Any,
                            max_boxes: Any, score_threshold: Any = None,
                            per_class_suppression: Any = False) -> tuple:
    """iOS15: boxes [n, B, 4], scores [n, B, K] -> boxes [n, M, 4], scores [n, M, K], indices
    [n, M], count [n]. iOS17: boxes [n, 4, B], scores [n, K, B], no score_threshold -> boxes
    [n, 4, M], scores [n, K, M], indices [n, M]. Boxes are (center x, center y, width, height).

    Per batch, as coremltools' reference of the op (its tests against Core ML): a box's score is
    its best class's; the candidates are the boxes scoring above ``score_threshold``, taken best
    first (ties: the lower index first); a candidate is dropped when its IoU with a box already
    taken (of its own best class, with ``per_class_suppression``) is above ``iou_threshold``;
    at most ``max_boxes`` are taken. When no box passes the score threshold, the best box is
    taken all the same. Padding: index -1, boxes and scores 0."""
    columns = len(ctx.op.outputs) == 3  # the iOS17 layout: boxes along the last axis
    box = np.asarray(boxes, dtype=np.float32)
    score = np.asarray(scores, dtype=np.float32)
    if columns:
        box, score = np.swapaxes(box, 1, 2), np.swapaxes(score, 1, 2)
    n_batch, n_box, n_class = score.shape
    m = int(max_boxes)
    out_boxes = np.zeros((n_batch, m, 4), np.float32)
    out_scores = np.zeros((n_batch, m, n_class), np.float32)
    out_indices = np.full((n_batch, m), -1, np.int32)
    counts = np.zeros((n_batch,), np.int32)
    cut = None if score_threshold is None else np.float32(score_threshold)
    for b in range(n_batch):
        best = score[b].max(axis=-1) if n_class else np.zeros(n_box, np.float32)
        label = score[b].argmax(axis=-1) if n_class else np.zeros(n_box, np.int64)
        taken = _nms_one(box[b], best, label if bool(per_class_suppression) else None,
                         np.float32(iou_threshold), cut, m)
        if not taken and n_box and m:
            taken = [int(np.argmax(best))]
        k = len(taken)
        out_boxes[b, :k] = box[b, taken]
        out_scores[b, :k] = score[b, taken]
        out_indices[b, :k] = taken
        counts[b] = k
    if columns:
        return np.swapaxes(out_boxes, 1, 2), np.swapaxes(out_scores, 1, 2), out_indices
    return out_boxes, out_scores, out_indices, counts


def _nms_one(box: np.ndarray, score: np.ndarray, label: np.ndarray | None, iou_threshold: np.float32,
             cut: np.float32 | None, limit: int) -> list[int]:
    """Greedy NMS of one batch: the indices taken, best first."""
    candidates = np.arange(len(score)) if cut is None else np.flatnonzero(score > cut)
    order = candidates[np.argsort(-score[candidates], kind="stable")]
    half_w, half_h = box[:, 2] / np.float32(2), box[:, 3] / np.float32(2)
    x_a, x_b = box[:, 0] - half_w, box[:, 0] + half_w
    y_a, y_b = box[:, 1] - half_h, box[:, 1] + half_h
    x_lo, x_hi = np.minimum(x_a, x_b), np.maximum(x_a, x_b)
    y_lo, y_hi = np.minimum(y_a, y_b), np.maximum(y_a, y_b)
    area = (x_hi - x_lo) * (y_hi - y_lo)
    dropped = np.zeros(len(score), bool)
    taken: list[int] = []
    for i in order:
        if len(taken) >= limit:
            break
        if dropped[i]:
            continue
        taken.append(int(i))
        inter = (np.maximum(np.minimum(x_hi, x_hi[i]) - np.maximum(x_lo, x_lo[i]), np.float32(0))
                 * np.maximum(np.minimum(y_hi, y_hi[i]) - np.maximum(y_lo, y_lo[i]), np.float32(0)))
        with np.errstate(divide="ignore", invalid="ignore"):
            iou = inter / (area + area[i] - inter)
        # a box of no area overlaps nothing (IoU 0)
        over = (iou > iou_threshold) & (area > 0) & (area[i] > 0)
        if label is not None:
            over &= label == label[i]
        dropped |= over
    return taken
