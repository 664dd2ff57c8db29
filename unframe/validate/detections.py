"""A detector's outputs judged as detections: the accuracy guard's measure for boxes.

A detector answers with a set of detections (``boxes`` [N, 4], ``scores`` [N], ``labels`` [N])
whose count and order move with its scores: a quantized detector that finds the same objects may
list them in another order, add a low-score one or drop one. Compared element by element (or row
by row as score rows, as a classifier's output is) it looks broken when it is not.

Here each float detection is matched to the quantized one with the same label and the largest
overlap (IoU of ``xyxy`` boxes, at least ``IOU``), the float model's detections taken in
descending score order, each quantized one used once. The measure, ``agreement``, is the share of
detections found on both sides, each weighted by its score (a box at 0.9 counts thirty times one
at 0.03, as a detection metric would rank them): (matched float scores + matched quantized
scores) / (all float scores + all quantized scores), pooled over the input sets. Scores outside
[0, 1] (logits) weigh every detection alike.

A detector whose kept scores all tie within one int8 step of their scale (a random-weight
detector saturated at 0.999...) keeps whichever detections the tie picks, on either side: which
boxes are kept proves nothing there. Such a group is ``tied``: it is judged only by its score
levels (the sorted scores within two steps of each other), and the report says it is weak.

Outputs are recognised by shape, in each set: a float ``[N, 4]`` output of boxes in ``xyxy``
order (x2 >= x1, y2 >= y1 on every row), a 1-D float output of N scores, and, where there is
one, a 1-D integer output of N labels; when several fit, the outputs nearest after the boxes
(torchvision's order: boxes, scores, labels) are taken.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

IOU = 0.5  # the overlap at which two boxes are the same detection (PASCAL VOC's, COCO's AP50)
STEPS = 127  # an int8 tensor's steps over its range (one sign): a score difference finer than
# scale / STEPS is below what an int8 artifact can tell apart


@dataclass(frozen=True)
class DetectionOutputs:
    boxes: str
    scores: str
    labels: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n in (self.boxes, self.scores, self.labels) if n)


@dataclass
class DetectionAgreement:
    outputs: DetectionOutputs
    agreement: float = 0.0  # score-weighted share found on both sides (see the module's doc)
    matched: int = 0
    reference: int = 0  # detections of the float model, over every set
    candidate: int = 0
    mean_iou: float = 0.0  # over the matched pairs
    tied: bool = False  # every set's kept scores tie within one int8 step: judged by score levels
    score_error: float = 0.0  # the largest difference of the sorted scores, as a share of their scale

    def describe(self) -> str:
        head = (f"detections ({self.outputs.scores!r}): {self.agreement:.1%} found on both sides "
                f"(score-weighted; {self.matched} of {self.reference} float / {self.candidate} "
                f"quantized matched at IoU >= {IOU:g}")
        return head + (f", mean IoU {self.mean_iou:.3f})" if self.matched else ")")

    def weak(self) -> str:
        if not self.tied:
            return ""
        return (f"the float model's kept scores ({self.outputs.scores!r}) all tie within one int8 "
                f"step of their scale in every set: which detections are kept is the tie's choice, "
                f"so only the score levels were judged (within {self.score_error:.2%} of the scale)")


def find_groups(outputs: Mapping[str, np.ndarray], every: Sequence[Mapping[str, np.ndarray]] = ()
                ) -> list[DetectionOutputs]:
    """The detection groups among ``outputs`` (one reference run, in output order), kept only
    where the shapes hold in every set of ``every`` too."""
    names = list(outputs)
    groups: list[DetectionOutputs] = []
    taken: set[str] = set()
    for i, name in enumerate(names):
        if not _is_boxes(outputs[name]):
            continue
        n = outputs[name].shape[0]
        after = names[i + 1:] + names[:i]  # nearest after the boxes first
        scores = next((s for s in after if s not in taken and _is_vector(outputs[s], n, "f")), None)
        if scores is None:
            continue
        labels = next((s for s in after if s not in taken and _is_vector(outputs[s], n, "iu")), None)
        group = DetectionOutputs(name, scores, labels)
        if all(_holds(group, run) for run in every):
            groups.append(group)
            taken.update(group.names)
    return groups


def _is_boxes(x: np.ndarray) -> bool:
    x = np.asarray(x)
    if x.dtype.kind != "f" or x.ndim != 2 or x.shape[1] != 4 or not np.all(np.isfinite(x)):
        return False
    return bool(np.all(x[:, 2] >= x[:, 0]) and np.all(x[:, 3] >= x[:, 1]))


def _is_vector(x: np.ndarray, n: int, kinds: str) -> bool:
    x = np.asarray(x)
    return x.dtype.kind in kinds and x.ndim == 1 and x.shape[0] == n


def _holds(group: DetectionOutputs, run: Mapping[str, np.ndarray]) -> bool:
    if not all(n in run for n in group.names) or not _is_boxes(run[group.boxes]):
        return False
    n = np.asarray(run[group.boxes]).shape[0]
    return _is_vector(run[group.scores], n, "f") and (
        group.labels is None or _is_vector(run[group.labels], n, "iu"))


def agreement(group: DetectionOutputs, ref: Sequence[Mapping[str, np.ndarray]],
              got: Sequence[Mapping[str, np.ndarray]]) -> DetectionAgreement:
    """``group`` judged over the sets (``ref[i]`` the float model's outputs, ``got[i]`` the
    quantized artifact's, for one input set)."""
    result = DetectionAgreement(group)
    found = total = 0.0
    ious: list[float] = []
    scale = max((float(np.max(np.abs(r[group.scores]), initial=0.0)) for r in ref), default=0.0)
    step = scale / STEPS
    tied, level = True, 0.0
    for r, g in zip(ref, got, strict=True):
        rs, gs = (np.asarray(x[group.scores], dtype=np.float64).reshape(-1) for x in (r, g))
        rb, gb = (np.asarray(x[group.boxes], dtype=np.float64).reshape(-1, 4) for x in (r, g))
        rl = np.asarray(r[group.labels]).reshape(-1) if group.labels else None
        gl = np.asarray(g[group.labels]).reshape(-1) if group.labels and group.labels in g else None
        if rb.shape[0] != rs.shape[0] or gb.shape[0] != gs.shape[0]:
            tied = False
            total += _weights(rs, rs).sum() + _weights(gs, gs).sum()
            continue  # the quantized side's outputs don't line up: nothing found
        pairs = _match(rs, rb, rl, gs, gb, gl)
        weights_r, weights_g = _weights(rs, np.concatenate([rs, gs])), _weights(gs, np.concatenate([rs, gs]))
        found += sum(weights_r[i] + weights_g[j] for i, j, _ in pairs)
        total += weights_r.sum() + weights_g.sum()
        ious.extend(iou for _, _, iou in pairs)
        result.matched += len(pairs)
        result.reference += rs.size
        result.candidate += gs.size
        tied = tied and rs.size > 1 and float(np.ptp(rs)) <= step
        k = min(rs.size, gs.size)
        if k:
            level = max(level, float(np.max(np.abs(np.sort(rs)[::-1][:k] - np.sort(gs)[::-1][:k]))))
        elif rs.size != gs.size:
            level = max(level, scale)
    result.agreement = found / total if total > 0 else 1.0
    result.mean_iou = float(np.mean(ious)) if ious else 0.0
    result.tied = tied and scale > 0
    result.score_error = level / scale if scale > 0 else 0.0
    return result


def passes(result: DetectionAgreement, threshold: float) -> bool:
    """A tied group by its score levels (within two int8 steps), any other by ``agreement``."""
    if result.tied:
        return result.score_error <= 2.0 / STEPS
    return result.agreement >= threshold


def _weights(scores: np.ndarray, both: np.ndarray) -> np.ndarray:
    """Each detection's weight: its score where every score of the set lies in [0, 1], else 1."""
    if both.size and np.all((both >= 0) & (both <= 1)):
        return scores
    return np.ones_like(scores)


def _match(rs: np.ndarray, rb: np.ndarray, rl: np.ndarray | None, gs: np.ndarray, gb: np.ndarray,
           gl: np.ndarray | None) -> list[tuple[int, int, float]]:
    """(float row, quantized row, IoU) for each matched pair: the float rows by descending score,
    each to the free quantized row of its label with the largest IoU >= ``IOU``."""
    free = np.ones(gs.size, dtype=bool)
    pairs = []
    for i in np.argsort(-rs, kind="stable"):
        ok = free.copy()
        if rl is not None and gl is not None:
            ok &= gl == rl[i]
        if not ok.any():
            continue
        iou = np.where(ok, box_iou(rb[i], gb), -1.0)
        j = int(np.argmax(iou))
        if iou[j] >= IOU:
            free[j] = False
            pairs.append((int(i), j, float(iou[j])))
    return pairs


def box_iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """The IoU of one ``xyxy`` box with each row of ``boxes``."""
    w = np.clip(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0, None)
    h = np.clip(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0, None)
    inter = w * h
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    union = area + areas - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


__all__ = ["IOU", "DetectionAgreement", "DetectionOutputs", "agreement", "box_iou", "find_groups", "passes"]
