"""random_uniform, random_normal (iOS15 random.py).

Draws from numpy's generator (seeded when the op's seed is set, >= 0): the distribution and
shape Core ML's are, never its numbers, so what a test can compare is shape, dtype and range.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.mil_eval.registry import kernel


def _generator(seed: Any) -> np.random.Generator:
    value = -1 if seed is None else int(seed)
    return np.random.default_rng(value if value >= 0 else None)


def _shape(shape: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in np.atleast_1d(shape))


@kernel("random_uniform")
def random_uniform(ctx: Any, shape: Any, low: Any = 0.0, high: Any = 1.0, seed: Any = -1) -> np.ndarray:
    lo, hi = float(low), float(high)
    values = _generator(seed).uniform(lo, hi, _shape(shape)) if hi > lo else np.full(_shape(shape), lo)
    # [low, high): float32 rounding can land a draw on high itself
    out = values.astype(ctx.output_dtype())
    return np.where(out >= hi, np.nextafter(np.asarray(hi, out.dtype), np.asarray(lo, out.dtype)), out) if hi > lo else out


@kernel("random_normal")
def random_normal(ctx: Any, shape: Any, mean: Any = 0.0, stddev: Any = 1.0, seed: Any = -1) -> np.ndarray:
    return _generator(seed).normal(float(mean), float(stddev), _shape(shape)).astype(ctx.output_dtype())
