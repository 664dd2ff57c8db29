"""Default parity tolerances per dtype, and their overrides.

An element passes when ``|out - ref| <= atol + rtol * |ref|`` (numpy.isclose semantics). Integer,
boolean and string outputs must match exactly.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

# (atol, rtol) by the *lower* precision of the two sides.
DEFAULTS: dict[str, tuple[float, float]] = {
    "float64": (1e-6, 1e-6),
    "float32": (1e-4, 1e-3),
    "float16": (1e-2, 1e-2),
    "bfloat16": (5e-2, 5e-2),
}

Override = float | Mapping[str, float] | None


def default_for(ref: np.dtype, out: np.dtype) -> tuple[float, float]:
    names = [_float_name(ref), _float_name(out)]
    worst = max((n for n in names if n), key=lambda n: DEFAULTS[n][0], default=None)
    return DEFAULTS[worst] if worst else (0.0, 0.0)


def _float_name(dt: np.dtype) -> str | None:
    name = np.dtype(dt).name if not str(dt) == "bfloat16" else "bfloat16"
    return name if name in DEFAULTS else None


def pick(override: Override, output: str, default: float) -> float:
    if override is None:
        return default
    if isinstance(override, Mapping):
        return float(override.get(output, default))
    return float(override)


def is_exact(dt: np.dtype) -> bool:
    return _float_name(dt) is None and np.dtype(dt).kind not in "fc"
