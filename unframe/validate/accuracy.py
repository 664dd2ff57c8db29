"""The accuracy guard of a quantized artifact: does it still answer like the float model?

Run on input sets the quantizer never saw (held out from calibration), the quantized artifact
(by its own runtime) and the float model (the source framework, or the float ONNX graph) are
compared output by output, pooled over the sets:

- ``top1``: for classifier-like outputs (a batch of score rows: ``[N, classes]``, or
  ``[N, T, vocab]`` logits), the share of rows whose argmax agrees; integer outputs (labels) are
  compared exactly, their agreement counted the same way;
- ``cos``: the cosine similarity of every float output, flattened over the sets;
- ``rel``: the largest error relative to the output's scale (reported, not judged: int8 moves
  single values more than it moves what the model decides).

The guard passes when every classifier-like output's agreement reaches ``Thresholds.top1`` and
every float output's cosine reaches ``Thresholds.cos``. A reference without spread (all zero,
constant) can't be judged by cosine: the output is named weak.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from unframe.validate.compare import FAILED, PASSED, OutputParity, StageParity, top1_agreement
from unframe.validate.runner import Runner


@dataclass
class AccuracyCheck(StageParity):
    """A parity record whose judgement is the accuracy guard's (``stage`` "accuracy")."""

    scheme: str = ""
    thresholds: str = ""
    cosine: dict[str, float] = field(default_factory=dict)  # per float output
    calibration: str = ""  # what calibrated it
    kept_float: list[str] = field(default_factory=list)
    size: tuple[int, int] | None = None  # bytes: the float artifact, the quantized one
    rounds: int = 1  # conversions the sensitivity pass made

    def summary(self) -> str:
        parts = [f"{self.stage} ({self.scheme}): " + ("FAILED" if self.status == FAILED else "passed")
                 + f" on {self.cases} held-out input set(s)"]
        if self.top1 is not None:
            parts.append(f"top-1 agrees on {self.top1:.1%}")
        if self.cosine:
            parts.append(f"cosine {min(self.cosine.values()):.5f}")
        parts.append(f"max err {self.rel_to_scale:.2g} of the output scale")
        parts.append(f"needs {self.thresholds}")
        if self.calibration:
            parts.append(f"calibrated on {self.calibration}")
        if self.kept_float:
            shown = ", ".join(self.kept_float[:5]) + (f" +{len(self.kept_float) - 5} more" if len(self.kept_float) > 5 else "")
            parts.append(f"{len(self.kept_float)} layer(s) kept in float ({shown})")
        if self.size:
            parts.append(f"size {self.size[1] / max(self.size[0], 1):.2f}x the float artifact")
        if self.status == FAILED and self.reason:
            parts.append(self.reason)
        if self.weak:
            parts.append("WEAK: " + "; ".join(self.weak))
        return ", ".join(parts)


def guard(reference: Runner, candidate: Runner, feeds: Sequence[Mapping[str, np.ndarray]],
          thresholds: Any, *, scheme: str = "") -> AccuracyCheck:
    """The guard's verdict on ``feeds`` (see the module's doc)."""
    runs = [(reference.run(dict(f)), candidate.run(dict(f))) for f in feeds]
    names = [n for n in runs[0][0] if all(n in got for _, got in runs)] if runs else []
    check = AccuracyCheck("accuracy", reference.name, candidate.name, cases=len(feeds), scheme=scheme,
                          thresholds=thresholds.describe())
    missing = [n for n in (runs[0][0] if runs else {}) if n not in names]
    failures = [f"output(s) {', '.join(missing)} missing from the quantized artifact"] if missing else []
    for name in names:
        ref = [np.asarray(r[name]) for r, _ in runs]
        got = [np.asarray(g[name]) for _, g in runs]
        out = _measure(name, ref, got, check)
        check.outputs.append(out)
        if out.top1 is not None and out.top1 < thresholds.top1:
            failures.append(f"{name}: top-1 agrees on {out.top1:.1%} (< {thresholds.top1:.0%})")
        cos = check.cosine.get(name)
        if cos is not None and cos < thresholds.cos:
            failures.append(f"{name}: cosine {cos:.4f} (< {thresholds.cos:g})")
    if failures:
        check.status, check.reason = FAILED, "; ".join(failures)
    else:
        check.status = PASSED
    return check


def _measure(name: str, ref: list[np.ndarray], got: list[np.ndarray], check: AccuracyCheck) -> OutputParity:
    out = OutputParity(name, list(ref[0].shape), list(got[0].shape), str(ref[0].dtype), str(got[0].dtype))
    if any(r.shape != g.shape for r, g in zip(ref, got, strict=True)):
        out.passed, out.reason = False, "shapes differ"
        check.cosine[name] = 0.0
        return out
    a = np.concatenate([r.reshape(-1) for r in ref]).astype(np.float64) if ref[0].dtype.kind in "fiub" else None
    b = np.concatenate([g.reshape(-1) for g in got]).astype(np.float64) if a is not None else None
    if a is None or b is None or a.size == 0:
        return out  # strings and empty outputs: not a number to judge
    out.total = int(a.size)
    out.scale = float(np.abs(a[np.isfinite(a)]).max()) if np.isfinite(a).any() else 0.0
    out.max_abs = float(np.nanmax(np.abs(a - b))) if a.size else 0.0
    if ref[0].dtype.kind in "iub":  # labels: exact agreement, counted like top-1
        out.top1, out.top1_rows = float(np.mean(a == b)), int(a.size)
        return out
    rows = [top1_agreement(r, g, name) for r, g in zip(ref, got, strict=True)]
    if all(v is not None for v in rows):
        counts = [r.shape[0] * (r.shape[1] if r.ndim == 3 else 1) for r in ref]
        out.top1 = float(np.average(rows, weights=counts))
        out.top1_rows = int(sum(counts))
    centred = a - a.mean()
    if not np.isfinite(a).all() or float(np.abs(centred).max(initial=0.0)) == 0.0:
        out.weak = "the float model's output has no spread (constant): cosine proves nothing"
        return out
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    check.cosine[name] = float(np.dot(a, b) / norm) if norm > 0 else 0.0
    return out
