from __future__ import annotations

import json

import numpy as np
import pytest

from unframe.validate.compare import ParityReport, StageParity, compare, compare_arrays
from unframe.validate.runner import Runner
from unframe.validate.tolerances import Tolerance


class FnRunner(Runner):
    """A runner computing a numpy function: the reference side of these tests."""

    def __init__(self, name, fn):
        self.name = name
        self.fn = fn

    def run(self, feeds):
        return self.fn(feeds)


def test_float_within_default_tolerance_passes_and_reports_errors():
    x = np.linspace(-1, 1, 10, dtype=np.float32)
    res = compare_arrays("y", x, x + np.float32(5e-5), 1e-4, 1e-3)
    assert res.passed
    assert res.max_abs == pytest.approx(5e-5, rel=0.05)
    assert res.mismatched == 0


def test_float_outside_tolerance_fails_with_counts():
    ref = np.ones((2, 3), np.float32)
    out = ref.copy()
    out[1, 2] += 0.5
    res = compare_arrays("y", ref, out, 1e-4, 1e-3)
    assert not res.passed
    assert res.mismatched == 1 and res.total == 6
    assert "1 of 6 elements differ" in res.reason
    assert res.max_rel == pytest.approx(0.5)


def test_shape_and_dtype_mismatch_fail():
    assert "shape" in compare_arrays("y", np.zeros((2, 3)), np.zeros((3, 2)), 1, 1).reason
    assert "dtype" in compare_arrays("y", np.zeros(3, np.int64), np.zeros(3, np.float32), 1, 1).reason


def test_labels_exact_and_nan_positions():
    assert not compare_arrays("label", np.array([1, 2, 3]), np.array([1, 2, 4]), 0, 0).passed
    assert compare_arrays("s", np.array(["a", "b"], object), np.array(["a", "b"], object), 0, 0).passed
    nan = np.array([1.0, np.nan], np.float32)
    assert compare_arrays("y", nan, nan.copy(), 1e-4, 1e-3).passed
    assert not compare_arrays("y", nan, np.array([np.nan, 1.0], np.float32), 1e-4, 1e-3).passed


def test_compare_runners_over_several_feeds_and_overrides():
    ref = FnRunner("ref", lambda f: {"y": f["x"] * 2, "label": (f["x"] > 0).astype(np.int64)})
    out = FnRunner("out", lambda f: {"y": f["x"] * 2 + 1e-3, "label": (f["x"] > 0).astype(np.int64)})
    feeds = [{"x": np.random.default_rng(i).standard_normal((i + 2, 3)).astype(np.float32)} for i in range(2)]
    strict = compare(ref, out, feeds, stage="export")
    assert not strict and strict.status == "failed" and "output 'y'" in strict.reason
    loose = compare(ref, out, feeds, atol={"y": 2e-3}, stage="export", exact=["label"])
    assert loose and loose.cases == 2
    assert {o.name for o in loose.outputs} == {"y", "label"}
    assert loose.max_abs == pytest.approx(1e-3, rel=1e-2)


def test_output_count_mismatch():
    ref = FnRunner("ref", lambda f: {"a": f["x"], "b": f["x"]})
    out = FnRunner("out", lambda f: {"a": f["x"]})
    st = compare(ref, out, {"x": np.zeros(2, np.float32)})
    assert not st and "output count differs" in st.reason


def test_report_truthiness_first_failure_and_json():
    ok = StageParity("export", "torch", "ort")
    bad = StageParity("backend", "ort", "mil", status="failed", reason="boom")
    skipped = StageParity.skipped("backend", "ort", "trt", "no CUDA device")
    assert ParityReport([ok, skipped])
    rep = ParityReport([ok, bad])
    assert not rep and rep.first_failure is bad
    data = json.loads(rep.to_json())
    assert data["passed"] is False and [s["stage"] for s in data["stages"]] == ["export", "backend"]


def test_fp16_uses_looser_default_tolerance():
    ref = np.array([1.0, 2.0], np.float32)
    out = (ref + 5e-3).astype(np.float16)
    r1 = FnRunner("ref", lambda f: {"y": ref})
    r2 = FnRunner("out", lambda f: {"y": out})
    assert compare(r1, r2, {"x": ref})  # float16 defaults: atol 1e-2
    assert not compare(r1, FnRunner("o", lambda f: {"y": ref + 5e-3}), {"x": ref})


def test_a_tolerance_of_the_scale_admits_fp16_rounding_of_small_logits_and_nothing_more():
    """16-bit compute leaves every logit an error of the order of the values summed into it: a
    small logit beside a large one is held to rtol of the output's scale, not of itself."""
    ref = np.array([[50.0, 0.5, -3.0, 10.0]], np.float32)
    rounded = ref + np.array([[0.4, 0.6, -0.5, 0.3]], np.float32)  # within 0.02 + 0.02 * 50
    wrong = ref.copy()
    wrong[0, 1] = 2.0  # a small logit off by 1.5: past 0.02 + 0.02 * 50 = 1.02
    assert not compare_arrays("logits", ref, rounded, 2e-2, 2e-2).passed  # element-wise: fails
    scaled = compare_arrays("logits", ref, rounded, 2e-2, 2e-2, of_scale=True)
    assert scaled.passed and scaled.scale == pytest.approx(50.0)
    bad = compare_arrays("logits", ref, wrong, 2e-2, 2e-2, of_scale=True)
    assert not bad.passed and bad.mismatched == 1 and "of the output scale 50" in bad.reason


def test_a_backend_tolerance_of_the_scale_reaches_the_comparison_and_the_summary():
    from unframe.validate.tolerances import Tolerance

    ref = np.array([40.0, 0.1], np.float32)
    r1 = FnRunner("ref", lambda f: {"y": ref})
    r2 = FnRunner("out", lambda f: {"y": ref + np.float32(0.5)})
    # an atol the user gives stays absolute: element-wise, 0.1 + 0.5 is past 0.02 + 0.02 * 0.1
    assert not compare(r1, r2, {"x": ref}, atol=2e-2, default_fn=lambda dt: (2e-2, 2e-2))
    passed = compare(r1, r2, {"x": ref}, atol=2e-2, default_fn=lambda dt: Tolerance(2e-2, 2e-2, of_scale=True))
    assert passed and passed.outputs[0].of_scale and "rtol of the output scale" in passed.summary()
    # a user's --rtol sets the value and keeps the backend's reading of it
    assert not compare(r1, r2, {"x": ref}, rtol=1e-3, default_fn=lambda dt: Tolerance(2e-2, 2e-2, True))


def test_the_scale_is_the_references_even_where_the_candidate_overflows():
    ref = np.array([3.0, -1.0], np.float32)
    res = compare_arrays("y", ref, np.array([np.inf, np.inf], np.float32), 2e-2, 2e-2, of_scale=True)
    assert not res.passed and res.scale == pytest.approx(3.0) and res.max_abs == np.inf


def test_a_default_atol_grows_with_the_output_scale_and_a_users_does_not():
    """float32's error on an element follows the values it was computed from: a near-zero pixel
    of an output of scale 30 may be off by more than 1e-4, not by more than 1e-4 * 30."""
    ref = np.array([30.0, 1e-5, -12.0], np.float32)
    near = ref + np.array([0, 2e-3, 0], np.float32)  # 2e-3 <= 1e-4 * 30 + 1e-3 * 1e-5
    far = ref + np.array([0, 5e-3, 0], np.float32)
    a = FnRunner("ref", lambda f: {"y": ref})
    ok = compare(a, FnRunner("out", lambda f: {"y": near}), {})
    assert ok and ok.outputs[0].atol == pytest.approx(3e-3)
    assert not compare(a, FnRunner("out", lambda f: {"y": far}), {})
    assert not compare(a, FnRunner("out", lambda f: {"y": near}), {}, atol=1e-4)  # the user's: absolute
    small = np.array([0.5, 1e-5], np.float32)  # scale below 1: atol as it is
    assert not compare(FnRunner("ref", lambda f: {"y": small}),
                       FnRunner("out", lambda f: {"y": small + np.float32(2e-3)}), {})


def _detections(order: list[int], scores: list[float]) -> FnRunner:
    boxes = np.array([[0, 0, 10, 10], [5, 5, 40, 40], [50, 60, 90, 99], [1, 2, 3, 4]], np.float32)
    labels = np.array([1, 2, 3, 1], np.int64)
    s = np.array(scores, np.float32)
    return FnRunner("side", lambda _f: {"boxes": boxes[order], "scores": s[order], "labels": labels[order]})


def test_detections_whose_scores_tie_within_the_tolerance_may_come_in_either_order():
    """fp16 compute can't order 0.985 and 0.980: the candidate lists those two detections the
    other way round. Matched by score within the fp16 tolerance, every box and label agrees."""
    scores = [0.99, 0.985, 0.980, 0.2]
    ref, swapped = _detections([0, 1, 2, 3], scores), _detections([0, 2, 1, 3], scores)
    fp16 = lambda _dt: (1e-2, 1e-2)  # noqa: E731
    result = compare(ref, swapped, [{}], stage="backend", default_fn=fp16)
    assert result, result.reason
    assert result.reordered and "2 of 4 rows" in result.reordered[0] and "matched across scores" in result.summary()
    # at float32's tolerance the two scores don't tie: the same swap is a failure
    assert not compare(ref, swapped, [{}], stage="export")
    # a 16-bit backend's tolerance relative to the output's scale (one slack for every row)
    of_scale = lambda _dt: Tolerance(1e-2, 1e-2, of_scale=True)  # noqa: E731
    assert compare(ref, swapped, [{}], stage="backend", default_fn=of_scale).reordered


def test_a_swap_of_detections_whose_scores_differ_still_fails():
    """The candidate's scores out of order (0.5 before 0.7): a difference, not a tie."""
    scores = [0.99, 0.7, 0.5, 0.2]
    ref, swapped = _detections([0, 1, 2, 3], scores), _detections([0, 2, 1, 3], scores)
    result = compare(ref, swapped, [{}], stage="backend", default_fn=lambda _dt: (1e-2, 1e-2))
    assert not result and not result.reordered
    assert "boxes" in result.reason and "labels" in result.reason


def _kept(boxes: list[list[float]], scores: list[float], labels: list[int]) -> FnRunner:
    out = {"boxes": np.array(boxes, np.float32), "scores": np.array(scores, np.float32),
           "labels": np.array(labels, np.int64)}
    return FnRunner("side", lambda _f: out)


REF_BOXES = [[0, 0, 10, 10], [5, 5, 40, 40], [50, 60, 90, 99], [1, 2, 3, 4]]


def test_another_detection_kept_at_a_tied_cut_is_weak_not_a_failure():
    """detections_per_img keeps 4 of scores crowded at 0.96-0.95; the 4th and 5th candidates
    score 0.9545 and 0.9530, closer than fp16 resolves, and fp16 keeps the 5th (another box). Which one is kept is a tie, not a
    difference: the rows are not compared and the stage is weak, saying why."""
    ref = _kept(REF_BOXES, [0.99, 0.97, 0.96, 0.9545], [1, 2, 3, 1])
    other = _kept(REF_BOXES[:3] + [[70, 70, 80, 95]], [0.99, 0.97, 0.96, 0.9530], [1, 2, 3, 2])
    result = compare(ref, other, [{}], stage="backend", default_fn=lambda _dt: (1e-2, 1e-2))
    assert result, result.reason
    assert result.cut_ties and "1 of 4 rows" in result.cut_ties[0] and "at the cut" in result.cut_ties[0]
    assert any("at the cut" in w for w in result.weak) and "WEAK" in result.summary()
    # at float32's tolerance the two scores don't tie: the same difference fails
    assert not compare(ref, other, [{}], stage="export")
    # every box wrong among the same crowded scores: more than a tie at the cut swaps
    shifted = _kept([[b + 30 for b in box] for box in REF_BOXES], [0.99, 0.97, 0.96, 0.9545], [1, 2, 3, 1])
    result = compare(ref, shifted, [{}], stage="backend", default_fn=lambda _dt: (1e-2, 1e-2))
    assert not result and not result.cut_ties


def test_a_saturated_detector_whose_every_score_ties_keeps_any_of_its_detections_weakly():
    """Every kept score is 1.0 on both sides (a detector whose random weights saturate on noise
    inputs: torchvision SSD300 on parity's redrawn feeds): which boxes are kept is the tie's choice
    throughout, so rows that hold other boxes (here half of them, past the share a tie at a cut
    may swap) are not compared and the stage is weak. Control: with one score that doesn't tie,
    the same boxes fail."""
    fp16 = lambda _dt: (1e-2, 1e-2)  # noqa: E731
    ref = _kept(REF_BOXES, [1.0, 1.0, 1.0, 1.0], [1, 1, 1, 1])
    other = _kept([REF_BOXES[0], [70, 70, 80, 95], REF_BOXES[2], [9, 9, 30, 30]], [1.0, 1.0, 1.0, 1.0], [1, 1, 1, 1])
    result = compare(ref, other, [{}], stage="backend", default_fn=fp16)
    assert result, result.reason
    assert result.cut_ties and "2 of 4 rows" in result.cut_ties[0] and "every kept score ties" in result.cut_ties[0]
    assert "WEAK" in result.summary()
    not_all = _kept(REF_BOXES, [1.0, 1.0, 1.0, 0.9], [1, 1, 1, 1])
    other_not_all = _kept([REF_BOXES[0], [70, 70, 80, 95], REF_BOXES[2], [9, 9, 30, 30]], [1.0, 1.0, 1.0, 0.9],
                          [1, 1, 1, 1])
    assert not compare(not_all, other_not_all, [{}], stage="backend", default_fn=fp16)


def test_a_different_detection_away_from_the_cut_still_fails():
    """The same other box, but kept in the middle (its score ties with nothing kept there), at the
    end with a score far from the cut, or at the end with the reference's own score where the
    cut is not in a band of tied scores (a wrong box, not another detection): differences."""
    fp16 = lambda _dt: (1e-2, 1e-2)  # noqa: E731
    ref = _kept(REF_BOXES, [0.99, 0.97, 0.90, 0.60], [1, 2, 3, 1])
    middle = _kept([REF_BOXES[0], [70, 70, 80, 95], REF_BOXES[2], REF_BOXES[3]], [0.99, 0.93, 0.90, 0.60],
                   [1, 2, 3, 1])
    assert not compare(ref, middle, [{}], stage="backend", default_fn=fp16)
    low = _kept(REF_BOXES[:3] + [[70, 70, 80, 95]], [0.99, 0.97, 0.90, 0.30], [1, 2, 3, 2])
    result = compare(ref, low, [{}], stage="backend", default_fn=fp16)
    assert not result and not result.cut_ties
    # a right score with a wrong box at the cut: matched by its score, compared, failed
    wrong_box = _kept(REF_BOXES[:3] + [[70, 70, 80, 95]], [0.99, 0.97, 0.90, 0.60], [1, 2, 3, 1])
    result = compare(ref, wrong_box, [{}], stage="backend", default_fn=fp16)
    assert not result and "boxes" in result.reason and not result.cut_ties
