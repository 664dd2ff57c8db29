"""``validate.accuracy.shortfall``: how far a failed guard falls below its thresholds, by which
the accuracy stage keeps the better of two quantizers' artifacts when neither passes."""

from __future__ import annotations

import math

from unframe.passes.quantize import parse_accuracy
from unframe.validate.accuracy import AccuracyCheck, shortfall
from unframe.validate.compare import FAILED, PASSED, OutputParity


def _check(status: str = FAILED, top1: float | None = None, cos: float | None = None, **extra) -> AccuracyCheck:
    check = AccuracyCheck("accuracy", "float", "int8", status=status, **extra)
    if top1 is not None:
        out = OutputParity("out")
        out.top1 = top1
        check.outputs.append(out)
    if cos is not None:
        check.cosine = {"out": cos}
    return check


def test_a_pass_falls_nothing_short_and_a_larger_gap_ranks_worse() -> None:
    thresholds = parse_accuracy(None)  # top-1 0.98, cosine 0.99
    assert shortfall(_check(PASSED, 1.0, 0.999), thresholds) == 0.0
    near = shortfall(_check(top1=0.97, cos=0.992), thresholds)
    far = shortfall(_check(top1=0.60, cos=0.90), thresholds)
    assert 0 < near < far
    assert math.isclose(far, (0.98 - 0.60) + (0.99 - 0.90))


def test_tighter_thresholds_count_against_the_same_figures() -> None:
    figures = dict(top1=0.99, cos=0.995)
    assert shortfall(_check(**figures), parse_accuracy("top1=0.995,cos=0.999")) > 0
    assert shortfall(_check(**figures), parse_accuracy("top1=0.999,cos=0.9999")) > \
        shortfall(_check(**figures), parse_accuracy("top1=0.995,cos=0.999"))


def test_an_artifact_that_could_not_run_ranks_last() -> None:
    thresholds = parse_accuracy(None)
    crashed = _check()
    crashed.run_failure = "the quantized graph can't run set 1"
    assert shortfall(crashed, thresholds) == math.inf
    assert shortfall(_check(top1=0.0, cos=0.0), thresholds) < shortfall(crashed, thresholds)
    assert shortfall(_check(), thresholds) == math.inf  # failed on nothing a measure counts (a missing output)
