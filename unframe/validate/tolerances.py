"""Default parity tolerances per dtype, and their overrides.

An element passes when ``|out - ref| <= atol + rtol * |ref|`` (numpy.isclose semantics). Integer,
boolean and string outputs must match exactly.

A backend that computes in 16 bits states its tolerance relative to the output's scale instead
(``Tolerance.of_scale``): ``|out - ref| <= atol + rtol * scale``, the scale being the reference
output's largest finite magnitude. Rounding in fp16 compute leaves each element an error of the
order of the values accumulated into it (a logit is a sum over a layer's activations), not of its
own magnitude: an element-wise rtol fails the small logits of an output whose large ones agree to
three digits, as fp16 can't do better. A user's --rtol keeps the backend's reading.

A 16-bit default atol is of the scale too below a scale of 1 (``atol * min(1, scale)``): an
absolute atol of 0.02 on an output of scale 0.1 would pass an error of a fifth of it. And whatever
raises it (the measured rounding floor), a 16-bit default allowance never exceeds
``MAX_16BIT_SHARE`` of the output's scale, so an error of a tenth of an output always fails.

The default atol is absolute for outputs of scale up to 1 and relative to the scale beyond
(``atol * max(1, scale)``): float32's error on an element computed from values of magnitude S is
of the order of S times float32's epsilon, whatever the element's own size (a near-zero pixel of a
segmentation map of scale 3). An atol the user gives stays absolute.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

# (atol, rtol) by the *lower* precision of the two sides.
DEFAULTS: dict[str, tuple[float, float]] = {
    "float64": (1e-6, 1e-6),
    "float32": (1e-4, 1e-3),
    "float16": (1e-2, 1e-2),
    "bfloat16": (5e-2, 5e-2),
}

Override = float | Mapping[str, float] | None

# A classifier-like output (``compare.top1_agreement``: [N, classes] scores, [N, T, vocab] logits)
# whose argmax agrees on fewer than this share of its rows (pooled over the feeds) fails its stage,
# whatever its absolute error: a softmax of 1/1000 + 1e-7 everywhere passes any tolerance.
TOP1_FLOOR = 0.5


# A 16-bit default allowance (atol, rtol and any rounding floor together) stays within this share
# of the output's scale: well below a tenth, so a 10 % error never passes.
MAX_16BIT_SHARE = 0.08


class Tolerance(NamedTuple):
    atol: float
    rtol: float
    of_scale: bool = False  # rtol multiplies the output's scale, not each element's own magnitude
    # a default atol, not a user's: it follows the output's scale (times max(1, scale); for a
    # 16-bit ``of_scale`` tolerance times min(1, scale))
    atol_scales: bool = False
    floor: float = 0.0  # what rounding alone moves the output by (validate.rounding): absolute
    capped: bool = False  # a 16-bit default (no --atol/--rtol given): within MAX_16BIT_SHARE of the scale


def effective_atol(tol: Tolerance, scale: float) -> float:
    """The atol ``tol`` works with on an output whose largest |value| is ``scale``, the rounding
    floor included (before the 16-bit cap: see ``allowance``)."""
    atol = tol.atol
    if tol.atol_scales:
        atol *= min(1.0, scale) if tol.of_scale else max(1.0, scale)
    # of the scale, the measured floor stands in for the backend's whole guess (atol + rtol *
    # scale) rather than adding to it
    return max(atol, tol.floor - tol.rtol * scale) if tol.of_scale else max(atol, tol.floor)


def allowance(tol: Tolerance, magnitude: np.ndarray | float, scale: float) -> np.ndarray | float:
    """The absolute difference ``tol`` allows an element of reference magnitude ``magnitude``
    (element-wise) on an output whose largest finite |value| is ``scale``.

    Element-wise: ``max(atol, floor) + rtol * |ref|``. Of the scale (16-bit):
    ``max(atol + rtol * scale, floor)``, within ``MAX_16BIT_SHARE * scale`` unless the user set
    a tolerance."""
    allowed = effective_atol(tol, scale) + tol.rtol * (scale if tol.of_scale else magnitude)
    return min(allowed, MAX_16BIT_SHARE * scale) if tol.of_scale and tol.capped else allowed


def default_for(ref: np.dtype, out: np.dtype) -> tuple[float, float]:
    names = [_float_name(ref), _float_name(out)]
    worst = max((n for n in names if n), key=lambda n: DEFAULTS[n][0], default=None)
    return DEFAULTS[worst] if worst else (0.0, 0.0)


def _float_name(dt: np.dtype) -> str | None:
    name = np.dtype(dt).name if not str(dt) == "bfloat16" else "bfloat16"
    return name if name in DEFAULTS else None


def given(override: Override, output: str) -> bool:
    """Whether the user set this output's value (a float for all, or a mapping naming it)."""
    return override is not None and (not isinstance(override, Mapping) or output in override)


def pick(override: Override, output: str, default: float) -> float:
    if override is None:
        return default
    if isinstance(override, Mapping):
        return float(override.get(output, default))
    return float(override)


def is_exact(dt: np.dtype) -> bool:
    return _float_name(dt) is None and np.dtype(dt).kind not in "fc"
