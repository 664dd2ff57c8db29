"""The float comparison runs a chunk at a time (validate/compare.py CHUNK): its figures over an
output of several chunks are the ones computed over the whole arrays at once."""

from __future__ import annotations

import numpy as np

from unframe.validate import compare, tolerances


def test_chunked_figures_match_the_whole_array() -> None:
    rng = np.random.default_rng(0)
    n = 3 * compare.CHUNK + 123
    a = rng.normal(size=n).astype(np.float32) * 3
    b = a + rng.normal(scale=2e-4, size=n).astype(np.float32)
    a[5], b[5] = np.nan, np.nan  # NaN on both sides: not a mismatch
    b[compare.CHUNK + 7] = np.inf  # a candidate's inf: a mismatch, and the scale stays the reference's
    tol = tolerances.Tolerance(1e-4, 1e-3)
    res = compare.OutputParity("y")
    compare._compare_float(res, a, b, tol)
    wa, wb = a.astype(np.float64), b.astype(np.float64)
    finite = np.isfinite(wa) & np.isfinite(wb)
    scale = float(np.abs(wa[np.isfinite(wa)]).max())
    diff = np.abs(wa - wb)[finite]
    allowed = tolerances.allowance(tol, np.abs(wa[finite]), scale)
    assert res.scale == scale
    assert res.mismatched == int(np.count_nonzero(diff > allowed)) + 1  # + the inf
    assert res.max_abs == float("inf")
    significant = np.abs(wa[finite]) > 1e-6
    assert res.max_rel == float((diff[significant] / np.abs(wa[finite])[significant]).max())
    assert res.allowed == float(np.max(tolerances.allowance(tol, np.where(finite, np.abs(wa), 0.0), scale)))
