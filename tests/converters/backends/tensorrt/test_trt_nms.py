"""NonMaxSuppression for tensorrt-rtx: the greedy rewrite (nms.py) and the empty-boxes guard taken
out of If (guards.py). onnxruntime's own NonMaxSuppression kernel is the reference: the rewritten
graph, run by onnxruntime, must select the same rows in the same order."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper
from trt_models import const, make_model, ort_run, vi

from unframe.converters.backends.tensorrt import preflight
from unframe.converters.backends.tensorrt.guards import EmptyGuardPass
from unframe.converters.backends.tensorrt.nms import GreedyNmsPass

I64 = TensorProto.INT64
OPTIONAL = ("max_out", "iou", "score")


def nms_model(center: int = 0, present: int = 3, opset: int = 21, n: int | str = "N") -> ir.Model:
    """sel = NonMaxSuppression(boxes[B, N, 4], scores[B, C, N], *the first ``present`` optional
    inputs, as graph inputs)."""
    names = list(OPTIONAL[:present])
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", *names], ["sel"], center_point_box=center)
    inputs = [vi("boxes", ["B", n, 4]), vi("scores", ["B", "C", n])]
    inputs += [vi(name, [1], I64 if name == "max_out" else TensorProto.FLOAT) for name in names]
    return make_model([node], inputs, [vi("sel", ["K", 3], I64)], opset=opset)


def random_case(rng: np.random.Generator, case: int) -> tuple[int, dict[str, np.ndarray]]:
    batches, classes, n = int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(0, 50))
    center = case % 2
    corner, size = rng.uniform(0, 10, (batches, n, 2)), rng.uniform(-1, 5, (batches, n, 2))  # some inverted
    if center:
        boxes = np.concatenate([corner, size], -1)
    else:
        boxes = np.concatenate([corner, corner + size], -1)
        if case % 4 == 0:
            boxes = boxes[..., [2, 3, 0, 1]]  # the other diagonal
    if case % 5 == 0 and n:
        boxes[:, : n // 2] = boxes[:, :1]  # duplicates: IoU 1
    scores = rng.uniform(0, 1, (batches, classes, n))
    if case % 3 == 0:
        scores = np.round(scores * 4) / 4  # ties, and scores equal to the threshold
    feeds = {"boxes": boxes.astype(np.float32), "scores": scores.astype(np.float32),
             "max_out": np.array([rng.choice([0, 1, 3, 1000, 2**62])], np.int64),
             "iou": np.array([rng.choice([0.0, 0.3, 0.5, 0.9])], np.float32),
             "score": np.array([rng.choice([0.0, 0.25, 0.5])], np.float32)}
    return center, feeds


def rewritten(model: ir.Model) -> ir.Model:
    copy = model.clone()
    assert GreedyNmsPass()(copy).modified
    assert "NonMaxSuppression" not in [n.op_type for n in copy.graph]
    return copy


def test_the_rewrite_selects_what_onnxruntime_selects():
    """Random batches, classes and boxes (inverted corners, the other diagonal, centre format,
    duplicates, tied scores, scores on the threshold, every optional input present or not): the
    same rows in the same order as onnxruntime's kernel, and the cases are not trivial."""
    rng = np.random.default_rng(0)
    models = {(c, p): nms_model(c, p) for c in (0, 1) for p in range(4)}
    greedy = {key: rewritten(m) for key, m in models.items()}
    suppressed = cut = empty = 0
    for case in range(120):
        center, feeds = random_case(rng, case)
        present = case % 4
        names = ["boxes", "scores", *OPTIONAL[:present]]
        feeds = {k: feeds[k] for k in names}
        expected = ort_run(models[center, present], feeds)["sel"]
        got = ort_run(greedy[center, present], feeds)["sel"]
        assert got.dtype == np.int64 and got.shape[1:] == (3,)
        np.testing.assert_array_equal(got, expected, err_msg=f"case {case}")
        if present >= 2:  # what the iou threshold removed, and the per-class cut
            valid = (feeds["scores"] > feeds["score"][0]).sum() if present == 3 else feeds["scores"].size
            suppressed += 0 < len(expected) < valid and feeds["max_out"][0] > feeds["scores"].shape[-1]
            pairs = feeds["scores"].shape[0] * feeds["scores"].shape[1]
            cut += len(expected) == int(feeds["max_out"][0]) * pairs > 0
        empty += len(expected) == 0
    assert suppressed > 10 and cut > 3 and empty > 3, (suppressed, cut, empty)


def test_ties_thresholds_and_degenerate_boxes_as_onnxruntime_decides_them():
    """Hand-made: two boxes whose IoU is exactly the threshold (both kept: the test is ``>``),
    equal scores (the lower index first), a score equal to the score threshold (left out), a box
    of zero area (never suppresses nor is suppressed) and a box that covers another."""
    boxes = np.array([[[0, 0, 1, 1], [0, 0, 2, 1], [0, 0, 1, 1.5], [5, 5, 5, 9], [5, 5, 6, 9],
                       [-1, -1, 3, 3], [8, 8, 9, 9]]], np.float32)  # [y1, x1, y2, x2]
    scores = np.array([[[0.9, 0.8, 0.9, 0.7, 0.6, 0.5, 0.3]]], np.float32)
    feeds = {"boxes": boxes, "scores": scores, "max_out": np.array([10], np.int64),
             "iou": np.array([0.5], np.float32), "score": np.array([0.3], np.float32)}
    model = nms_model(0, 3)
    expected = ort_run(model, feeds)["sel"]
    got = ort_run(rewritten(model), feeds)["sel"]
    np.testing.assert_array_equal(got, expected)
    # box 0 (tie with 2, lower index) first; box 1 overlaps 0 by IoU exactly 0.5: kept; box 2
    # by 2/3: gone; the zero-area box 3 and box 4 both kept; 5 covers 0: IoU 1/16, kept; 6 is on
    # the score threshold: out
    assert expected[:, 2].tolist() == [0, 1, 3, 4, 5]


def test_what_the_rewrite_leaves_to_the_preflight():
    """Before opset 13, or with more scores than float32 counts exactly, the op stays (and the
    pre-flight names it for tensorrt-rtx); center_point_box outside 0/1 is not defined."""
    for model in (nms_model(opset=12), nms_model(n=(1 << 24) + 1), nms_model(center=2)):
        assert not GreedyNmsPass()(model).modified
        assert [b.op for b in preflight.check(model, "tensorrt_rtx")] == ["NonMaxSuppression"]


def guarded_nms_model(then_value: np.ndarray | None = None, compare_with: int = 0,
                      gather_axis: int = 1, noop_with_empty_axes: int = 0) -> ir.Model:
    """torchvision's batched NMS as exported: ``keep = If(numel(boxes) == 0, then: int64[0],
    else: NMS(boxes + offsets, scores)[:, 2])``; the arguments build the variants the guard pass
    must leave alone."""
    then_value = np.zeros(0, np.int64) if then_value is None else then_value
    empty = helper.make_graph([helper.make_node("Constant", [], ["nothing"], value=const("c", then_value))],
                              "then", [], [vi("nothing", list(then_value.shape), I64)])
    branch = helper.make_graph([
        helper.make_node("Cast", ["labels"], ["labels_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["labels_f", "spread"], ["offset"]),
        helper.make_node("Unsqueeze", ["offset", "axis1"], ["offset_col"]),
        helper.make_node("Add", ["boxes", "offset_col"], ["shifted"]),
        helper.make_node("Unsqueeze", ["shifted", "axis0"], ["boxes3"]),
        helper.make_node("Unsqueeze", ["scores", "axes01"], ["scores3"]),
        helper.make_node("NonMaxSuppression", ["boxes3", "scores3", "max_out", "iou"], ["sel"]),
        helper.make_node("Gather", ["sel", "two"], ["column"], axis=gather_axis),
        helper.make_node("Reshape", ["column", "flat"], ["keep_else"]),
    ], "else", [], [vi("keep_else", ["K"], I64)])
    nodes = [helper.make_node("Shape", ["boxes"], ["shape"]),
             helper.make_node("ReduceProd", ["shape"], ["numel"], keepdims=0,
                              noop_with_empty_axes=noop_with_empty_axes),
             helper.make_node("Equal", ["numel", "zero"], ["is_empty"]),
             helper.make_node("If", ["is_empty"], ["keep"], then_branch=empty, else_branch=branch)]
    inits = [const("spread", np.array(100.0, np.float32)), const("axis1", np.array([1], np.int64)),
             const("axis0", np.array([0], np.int64)), const("axes01", np.array([0, 1], np.int64)),
             const("max_out", np.array([100], np.int64)), const("iou", np.array([0.5], np.float32)),
             const("two", np.array([2], np.int64)), const("flat", np.array([-1], np.int64)),
             const("zero", np.array(compare_with, np.int64))]
    return make_model(nodes, [vi("boxes", ["N", 4]), vi("scores", ["N"]), vi("labels", ["N"], I64)],
                      [vi("keep", ["K"], I64)], inits)


def detections(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    corner = rng.uniform(0, 20, (n, 2))
    return {"boxes": np.concatenate([corner, corner + rng.uniform(2, 8, (n, 2))], 1).astype(np.float32),
            "scores": rng.uniform(0, 1, n).astype(np.float32), "labels": rng.integers(0, 3, n).astype(np.int64)}


def test_the_empty_boxes_guard_is_taken_out_of_its_if():
    """The else branch gives no rows for no boxes, so the If is the else branch: after the pass
    there is no If, and onnxruntime gives the same keep for 0, 1 and 30 boxes."""
    model = guarded_nms_model()
    inlined = model.clone()
    assert EmptyGuardPass()(inlined).modified
    assert [n.op_type for n in inlined.graph].count("If") == 0
    assert "NonMaxSuppression" in [n.op_type for n in inlined.graph]
    for n in (0, 1, 30):
        expected, got = ort_run(model, detections(n))["keep"], ort_run(inlined, detections(n))["keep"]
        np.testing.assert_array_equal(got, expected)
        assert (len(expected) == 0) == (n == 0)
    assert 1 < len(ort_run(model, detections(30))["keep"]) < 30  # some boxes suppressed


@pytest.mark.parametrize("variant", [
    {"gather_axis": 0},  # the else branch gathers along the empty axis: not shown to be empty
    {"then_value": np.array([0], np.int64)},  # the then branch is not empty
    {"compare_with": 1},  # the condition is not "no elements"
    {"noop_with_empty_axes": 1},  # ReduceProd without axes is then the identity, not a count
])
def test_an_if_the_proof_does_not_cover_stays(variant):
    model = guarded_nms_model(**variant)
    assert not EmptyGuardPass()(model).modified
    assert [n.op_type for n in model.graph].count("If") == 1


def test_the_guarded_nms_is_rewritten_with_the_same_selection():
    """Both passes, as prepare() runs them for tensorrt-rtx: no If, no NonMaxSuppression, and the
    same keep as the source graph for 0 to 40 boxes."""
    from unframe.converters.backends.tensorrt.prepare import prepare

    model = guarded_nms_model()
    prepared = prepare(model.clone(), native_nonzero=False, native_nms=False)
    assert not {"If", "NonMaxSuppression"} & {n.op_type for n in prepared.graph}
    for n in (0, 1, 2, 40):
        for seed in range(3):
            np.testing.assert_array_equal(ort_run(prepared, detections(n, seed))["keep"],
                                          ort_run(model, detections(n, seed))["keep"])
    native = prepare(model.clone(), native_nonzero=True, native_nms=True)
    assert "NonMaxSuppression" in {n.op_type for n in native.graph}  # full TensorRT builds it
