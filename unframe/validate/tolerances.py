"""Default parity tolerances per dtype, and their overrides.

An element passes when ``|out - ref| <= atol + rtol * |ref|`` (numpy.isclose semantics). Integer,
boolean and string outputs must match exactly.

A backend that computes in 16 bits states its tolerance relative to the output's scale instead
(``Tolerance.of_scale``): ``|out - ref| <= atol + rtol * scale``, the scale being the reference
output's largest finite magnitude. Rounding in fp16 compute leaves each element an error of the
order of the values accumulated into it (a logit is a sum over a layer's activations), not of its
own magnitude: an element-wise rtol fails the small logits of an output whose large ones agree to
three digits, as fp16 can't do better. A user's --rtol keeps the backend's reading.

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


class Tolerance(NamedTuple):
    atol: float
    rtol: float
    of_scale: bool = False  # rtol multiplies the output's scale, not each element's own magnitude
    atol_scales: bool = False  # atol multiplies max(1, the output's scale): a default, not a user's


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
