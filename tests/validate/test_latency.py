"""Paired latency (validate/latency.py): alternating runs, medians, the pair budget."""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np

from unframe.validate.latency import MIN_RUNS, paired
from unframe.validate.runner import Runner


class Sleeper(Runner):
    """A runner whose run takes a known time (what is measured here is the timing, not a model)."""

    def __init__(self, seconds: float, name: str) -> None:
        self.seconds, self.name, self.calls = seconds, name, 0

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.calls += 1
        time.sleep(self.seconds)
        return {"y": np.zeros(1)}


def test_the_slower_side_is_told_apart_and_both_run_alike() -> None:
    fast, slow = Sleeper(0.001, "fast"), Sleeper(0.006, "slow")
    lat = paired(fast, slow, {"x": np.zeros((4, 3), np.float32)}, runs=10)
    assert lat.runs == 10 and fast.calls == slow.calls == 12  # two warm-ups each
    assert 0.9 <= lat.before_ms < 4.0 and 5.5 <= lat.after_ms < 12.0, lat
    assert lat.ratio > 1.5 and lat.runtime == "slow" and lat.batch == 4
    assert "median of 10 alternating runs at batch 4" in lat.describe()


def test_the_budget_cuts_the_pairs_but_never_below_the_minimum() -> None:
    a, b = Sleeper(0.02, "a"), Sleeper(0.02, "b")
    lat = paired(a, b, {"x": np.zeros(2)}, runs=30, budget_s=0.01)
    assert lat.runs == MIN_RUNS
