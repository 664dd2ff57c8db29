"""Detection post-processing: NonMaxSuppression.

ONNX ``NonMaxSuppression`` returns ``selected_indices`` [num_selected, 3] = (batch, class, box),
a length only the data decides; MIL's ``non_maximum_suppression`` returns a fixed ``max_boxes``
rows padded with index -1 (iOS15/16: boxes [B, N, 4] and scores [B, N, K], iOS17+: boxes
[B, 4, N] and scores [B, K, N]). The translation maps the case that is exact, one batch and one
class (torchvision's detectors: ``batched_nms`` offsets each class's boxes apart and runs a
single-class NMS), with constant max_output_boxes_per_class / iou_threshold / score_threshold::

    boxes [1, N, 4] ─► (corners -> center, width, height) ─► non_maximum_suppression
    scores [1, 1, N] ─┘        (iou_threshold; max_boxes = min(max_output, N); no score cut)
        ─► indices [1, M] (-1 padded) ─► kept = index >= 0 [and score > score_threshold]
        ─► count = sum(kept) ─► the first ``count`` indices ─► [count, 3] = (0, 0, index)

Both sides suppress a box whose IoU with a kept one is above ``iou_threshold``, and select in
descending score order; the score threshold is applied after suppression, as a prefix of that
order: a box at or below it comes after every box above it, so it never suppressed one of
them, and ONNX's cut (``score > score_threshold``) is exact without relying on Core ML's
own (which keeps the best box when none passes). Every op stays in float32: the IoU of boxes
hundreds of pixels apart (or offset by class, as torchvision does) means nothing in fp16.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.context import TranslateContext
from unframe.converters.backends.coreml.ops import translator
from unframe.converters.backends.coreml.ops._util import cast, dtype_name, in_fp32, mb

# max_boxes when the number of boxes is only known at run time and max_output_boxes_per_class
# does not bound it (torchvision exports INT64_MAX): coremltools' own choice for torchvision's
# nms (its notes: int32's maximum there makes Core ML's NMS crash)
DYNAMIC_MAX_BOXES = 10000


def _static(d: Any) -> int | None:
    return int(d) if isinstance(d, (int, np.integer)) else None


def _scalar(ctx: TranslateContext, i: int, what: str, default: float | None) -> float | None:
    """An optional scalar input's value, which must be known at conversion time."""
    if not ctx.has(i):
        return default
    value = ctx.const(i)
    if value is None:
        raise ctx.err(f"NonMaxSuppression's {what} is computed at run time; CoreML's "
                      "non_maximum_suppression takes it as a constant",
                      "make it a constant (an initializer or a Constant node)")
    return float(np.asarray(value).reshape(-1)[0])


def _center_boxes(ctx: TranslateContext, boxes: Any) -> Any:
    """[1, N, 4] boxes as MIL wants them: (center x, center y, width, height)."""
    m = mb()
    parts = m.split(x=boxes, num_splits=4, axis=2)
    if int(ctx.attr("center_point_box", 0)):
        # [x_center, y_center, width, height] already; onnxruntime lets a box of width or
        # height <= 0 neither suppress nor be suppressed: as a zero-area box (IoU 0) here
        cx, cy, w, h = parts
        zero = np.float32(0.0)
        return m.concat(values=[cx, cy, m.maximum(x=w, y=zero), m.maximum(x=h, y=zero)], axis=2)
    # [y1, x1, y2, x2], any diagonal pair of corners
    y1, x1, y2, x2 = parts
    x_lo, x_hi = m.minimum(x=x1, y=x2), m.maximum(x=x1, y=x2)
    y_lo, y_hi = m.minimum(x=y1, y=y2), m.maximum(x=y1, y=y2)
    w, h = m.sub(x=x_hi, y=x_lo), m.sub(x=y_hi, y=y_lo)
    half = np.float32(0.5)
    return m.concat(values=[m.add(x=x_lo, y=m.mul(x=w, y=half)), m.add(x=y_lo, y=m.mul(x=h, y=half)),
                            w, h], axis=2)


def _shapes(ctx: TranslateContext) -> int | None:
    """Check that the node is one batch, one class; the number of boxes when static."""
    boxes, scores = ctx.x(0), ctx.x(1)
    if len(boxes.shape) != 3 or len(scores.shape) != 3:
        raise ctx.err("NonMaxSuppression needs boxes [batches, boxes, 4] and scores [batches, "
                      "classes, boxes]")
    batches = {_static(boxes.shape[0]), _static(scores.shape[0])}
    if batches != {1}:
        shown = "a batch size only known at run time" if None in batches else f"{max(batches)} batches"
        raise ctx.err(f"NonMaxSuppression over {shown}: CoreML's non_maximum_suppression maps onto "
                      "it exactly for one batch only", "run the model once per image")
    classes = _static(scores.shape[1])
    if classes != 1:
        shown = "a number of classes only known at run time" if classes is None else f"{classes} classes"
        raise ctx.err(f"NonMaxSuppression with {shown}: CoreML's non_maximum_suppression selects per "
                      "box, not per class (ONNX keeps max_output_boxes_per_class boxes of each class)",
                      "offset each class's boxes apart and run one single-class NMS "
                      "(torchvision's batched_nms does)")
    n_boxes, n_scores = _static(boxes.shape[1]), _static(scores.shape[2])
    return n_boxes if n_boxes is not None else n_scores


@translator("NonMaxSuppression")
def non_max_suppression(ctx: TranslateContext) -> Any:

    n = _shapes(ctx)
    limit = _scalar(ctx, 2, "max_output_boxes_per_class", 0.0)
    iou = _scalar(ctx, 3, "iou_threshold", 0.0)
    score_cut = _scalar(ctx, 4, "score_threshold", None)
    assert limit is not None and iou is not None
    if limit <= 0:
        raise ctx.err("NonMaxSuppression with max_output_boxes_per_class 0 (its default) or less "
                      "always selects no box: an always-empty tensor, which coremltools' passes "
                      "can't carry", "remove the node, or give it max_output_boxes_per_class > 0")
    if n is not None:
        max_boxes = int(min(limit, n))
    else:
        max_boxes = int(min(limit, DYNAMIC_MAX_BOXES))
        if limit > DYNAMIC_MAX_BOXES:
            # a limit at int32's top is ONNX's INT64_MAX saturated (legalize): no limit
            theirs = "all" if limit >= np.iinfo(np.int32).max else f"up to {int(limit)}"
            ctx.graph.notes.append(
                f"NonMaxSuppression {ctx.node.name!r}: the number of boxes is only known at run "
                f"time, so CoreML keeps at most {DYNAMIC_MAX_BOXES} of them (onnxruntime: {theirs}); "
                "exact whenever no more survive")
    with in_fp32(ctx):  # every op written here (see the module docstring)
        return _build(ctx, max_boxes, iou, score_cut)


def _build(ctx: TranslateContext, max_boxes: int, iou: float, score_cut: float | None) -> Any:
    m = mb()
    boxes, scores = ctx.x(0), ctx.x(1)
    if dtype_name(boxes) != "fp32":
        boxes = cast(boxes, "fp32")
    if dtype_name(scores) != "fp32":
        scores = cast(scores, "fp32")
    centered = _center_boxes(ctx, boxes)
    if ctx.ios >= 17:  # boxes [1, 4, N], scores [1, K, N]; no score threshold, no count output
        _, _, indices = m.non_maximum_suppression(
            boxes=m.transpose(x=centered, perm=[0, 2, 1]), scores=scores,
            iou_threshold=np.float32(iou), max_boxes=max_boxes, per_class_suppression=False)
    else:  # boxes [1, N, 4], scores [1, N, K]; every box is a candidate (the cut comes after)
        _, _, indices, _ = m.non_maximum_suppression(
            boxes=centered, scores=m.transpose(x=scores, perm=[0, 2, 1]),
            iou_threshold=np.float32(iou), score_threshold=np.float32(np.finfo(np.float32).min),
            max_boxes=max_boxes, per_class_suppression=False)
    indices = m.squeeze(x=indices, axes=[0])  # [M], best first, -1 padded
    kept = m.greater_equal(x=indices, y=np.int32(0))
    if score_cut is not None:
        flat = m.reshape(x=scores, shape=np.array([-1], dtype=np.int32))
        picked = m.gather(x=flat, indices=m.maximum(x=indices, y=np.int32(0)), axis=0)
        kept = m.logical_and(x=kept, y=m.greater(x=picked, y=np.float32(score_cut)))
    count = m.reduce_sum(x=m.cast(x=kept, dtype="int32"), axes=[0], keep_dims=False)
    if ctx.ios >= 17:
        chosen = m.slice_by_size(x=indices, begin=np.array([0], dtype=np.int32),
                                 size=m.expand_dims(x=count, axes=[0]))
    else:  # coremltools' torch frontend gathers the valid prefix so (exact below 2**24)
        rows = m.range_1d(start=np.int32(0), end=count, step=np.int32(1))
        chosen = m.cast(x=m.gather(x=m.cast(x=indices, dtype="fp32"), indices=rows, axis=0), dtype="int32")
    column = m.expand_dims(x=chosen, axes=[1])  # [count, 1]
    zeros = m.mul(x=column, y=np.int32(0))  # batch 0, class 0
    return m.concat(values=[zeros, zeros, column], axis=1)
