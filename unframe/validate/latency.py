"""Paired latency of two runners of one runtime (the float artifact and the quantized one): the
same feed, two warm-up runs each, then runs alternating between them (so a machine getting
busier slows both alike), the median of each side. At most ``RUNS`` pairs and, past ``MIN_RUNS``,
no longer than ``BUDGET_S`` seconds: a large model gets fewer pairs, and the figure says how many.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from unframe.validate.runner import Runner

RUNS = 30
MIN_RUNS = 5
WARMUP = 2
BUDGET_S = 4.0


@dataclass
class Latency:
    before_ms: float  # the float artifact, median
    after_ms: float  # the quantized one
    runs: int  # pairs timed
    runtime: str  # the runner timed (the quantized artifact's)
    batch: int | None = None  # the feed's leading dim, when every input has the same

    @property
    def ratio(self) -> float:
        return self.after_ms / self.before_ms if self.before_ms > 0 else float("nan")

    def describe(self) -> str:
        at = f" at batch {self.batch}" if self.batch is not None else ""
        return (f"latency {self.before_ms:.3g} -> {self.after_ms:.3g} ms ({self.ratio:.2f}x; "
                f"{self.runtime}, median of {self.runs} alternating runs{at})")

    def as_dict(self) -> dict[str, Any]:
        return {"before_ms": self.before_ms, "after_ms": self.after_ms, "ratio": self.ratio,
                "runs": self.runs, "runtime": self.runtime, "batch": self.batch}


def paired(before: Runner, after: Runner, feed: Mapping[str, np.ndarray], *, runs: int = RUNS,
           budget_s: float = BUDGET_S) -> Latency:
    """Median milliseconds of ``before`` and ``after`` on ``feed`` (see the module's doc)."""
    for _ in range(WARMUP):
        before.run(dict(feed))
        after.run(dict(feed))
    a: list[float] = []
    b: list[float] = []
    started = time.perf_counter()
    for i in range(runs):
        first, second = ((before, a), (after, b)) if i % 2 == 0 else ((after, b), (before, a))
        for runner, times in (first, second):
            t0 = time.perf_counter()
            runner.run(dict(feed))
            times.append((time.perf_counter() - t0) * 1000.0)
        if i + 1 >= MIN_RUNS and time.perf_counter() - started > budget_s:
            break
    lead = {int(np.shape(v)[0]) for v in feed.values() if np.ndim(v) > 0}
    return Latency(statistics.median(a), statistics.median(b), len(a), after.name,
                   lead.pop() if len(lead) == 1 else None)
