"""``classify`` (iOS15 classify.py): the op ct.convert appends for a classifier model.

It takes one example's class probabilities and gives the best class label and a
``{label: probability}`` dict in the order of ``classes`` (Core ML's classifier outputs).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.mil_eval.registry import KernelError, kernel


@kernel("classify")
def classify(ctx: Any, probabilities: np.ndarray, classes: Any) -> tuple[Any, dict[Any, float]]:
    labels = [c.item() if isinstance(c, np.generic) else c for c in list(classes)]
    probs = np.asarray(probabilities, dtype=np.float32).reshape(-1)
    if probs.size != len(labels):
        raise KernelError(f"classify: {probs.size} probabilities for {len(labels)} classes "
                          "(a Core ML classifier takes one example at a time)")
    best = labels[int(np.argmax(probs))]
    return best, {label: float(p) for label, p in zip(labels, probs, strict=True)}
