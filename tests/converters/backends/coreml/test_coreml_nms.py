"""ONNX NonMaxSuppression -> MIL non_maximum_suppression (unframe/converters/backends/coreml/ops/
misc.py), checked against onnxruntime: the conversion's own parity (the MIL evaluator on the saved
package) and the selected indices compared exactly. The scenes are boxes in overlapping clusters,
so that suppression removes some and keeps several (asserted from onnxruntime's own answer).
What doesn't map exactly (several classes, batches, thresholds known only at run time) stays an
exit-4 blocker of both `check` and `convert`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from coreml_helpers import convert_and_compare, to_ir
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import unframe
from unframe.converters.backends.coreml.backend import CoreMLBackend
from unframe.converters.base import Target
from unframe.errors import UnsupportedError

pytestmark = pytest.mark.usefixtures("coreml")

INT64_MAX = 2**63 - 1


# -- scenes and graphs ---------------------------------------------------------------------------

def _scene(seed: int, n: int = 48, clusters: int = 6, center_point_box: int = 0,
           classes: int = 1, batches: int = 1) -> dict[str, np.ndarray]:
    """``n`` boxes around ``clusters`` centres (neighbours overlap, clusters mostly don't), in
    the layout ``center_point_box`` says; corner boxes name a random diagonal pair of corners."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(40, 360, (clusters, 2))
    yx = centers[rng.integers(0, clusters, (batches, n))] + rng.normal(0, 5, (batches, n, 2))
    hw = rng.uniform(24, 48, (batches, n, 2))
    if center_point_box:
        boxes = np.concatenate([yx[..., ::-1], hw[..., ::-1]], axis=-1)
    else:
        lo, hi = yx - hw / 2, yx + hw / 2
        flip = rng.random((batches, n, 2)) < 0.5  # (y2, x2) first for some boxes, per axis
        first, second = np.where(flip, hi, lo), np.where(flip, lo, hi)
        boxes = np.stack([first[..., 0], first[..., 1], second[..., 0], second[..., 1]], axis=-1)
    scores = rng.uniform(0.05, 1.0, (batches, classes, n))
    return {"boxes": boxes.astype(np.float32), "scores": scores.astype(np.float32)}


def _nms_graph(n: int | str = 48, *, center_point_box: int = 0, max_output: int | None = INT64_MAX,
               iou: float | None = 0.45, score_threshold: float | None = None, classes: int = 1,
               batches: int = 1, runtime_iou: bool = False) -> onnx.ModelProto:
    """NonMaxSuppression and its typical use: the kept boxes and scores gathered by box index."""
    inits = [numpy_helper.from_array(np.array(2, np.int64), "box_column"),
             numpy_helper.from_array(np.array([-1, 4], np.int64), "rows"),
             numpy_helper.from_array(np.array([-1], np.int64), "flat")]
    names = ["boxes", "scores", "", "", ""]
    if max_output is not None:
        inits.append(numpy_helper.from_array(np.array([max_output], np.int64), "max_output"))
        names[2] = "max_output"
    inputs = [helper.make_tensor_value_info("boxes", T.FLOAT, [batches, n, 4]),
              helper.make_tensor_value_info("scores", T.FLOAT, [batches, classes, n])]
    if runtime_iou:
        inputs.append(helper.make_tensor_value_info("iou", T.FLOAT, [1]))
        names[3] = "iou"
    elif iou is not None:
        inits.append(numpy_helper.from_array(np.array([iou], np.float32), "iou"))
        names[3] = "iou"
    if score_threshold is not None:
        inits.append(numpy_helper.from_array(np.array([score_threshold], np.float32), "score_threshold"))
        names[4] = "score_threshold"
    while names and not names[-1]:
        names.pop()
    nodes = [
        helper.make_node("NonMaxSuppression", names, ["selected"], name="nms",
                         center_point_box=center_point_box),
        helper.make_node("Gather", ["selected", "box_column"], ["keep"], axis=1),
        helper.make_node("Reshape", ["boxes", "rows"], ["all_boxes"]),
        helper.make_node("Gather", ["all_boxes", "keep"], ["kept_boxes"], axis=0),
        helper.make_node("Reshape", ["scores", "flat"], ["all_scores"]),
        helper.make_node("Gather", ["all_scores", "keep"], ["kept_scores"], axis=0),
    ]
    graph = helper.make_graph(nodes, "nms", inputs, [
        helper.make_tensor_value_info("selected", T.INT64, ["k", 3]),
        helper.make_tensor_value_info("kept_boxes", T.FLOAT, ["k", 4]),
        helper.make_tensor_value_info("kept_scores", T.FLOAT, ["k"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _onnxruntime(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))


def _kept(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    return _onnxruntime(proto, feeds)["selected"][:, 2]


def _convert(proto: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp_path: Path,
             **options: Any) -> tuple[dict[str, np.ndarray], Any]:
    """Convert (the backend's check first), the parity of the package against onnxruntime, and
    the package's outputs by the MIL evaluator, the selected indices equal to onnxruntime's."""
    model = to_ir(proto)
    artifact, parity = convert_and_compare(model, [feeds], tmp_path, **options)
    assert parity, parity.reason
    got = CoreMLBackend().runner(artifact, Target("coreml", options=options)).run(feeds)
    want = _onnxruntime(proto, feeds)
    assert got["selected"].dtype == np.int64
    np.testing.assert_array_equal(got["selected"], want["selected"])
    return got, artifact


def _nms_ops(artifact: Any) -> list[Any]:
    from unframe.converters.backends.coreml.mil_eval.evaluator import all_ops
    from unframe.converters.backends.coreml.mil_eval.runner import load_program

    program = load_program(artifact.path, vouched=True)
    return [op for op in all_ops(program.functions["main"]) if op.op_type == "non_maximum_suppression"]


# -- what converts -------------------------------------------------------------------------------

@pytest.mark.parametrize("deployment", ["iOS16", "iOS17"])
def test_corner_boxes_of_any_diagonal(tmp_path: Path, deployment: str) -> None:
    """iOS16 writes the iOS15 op (boxes [1, N, 4], a count output), iOS17 its successor (boxes
    [1, 4, N], no count): both give onnxruntime's selection, fp16 compute (the default)."""
    feeds = _scene(0)
    proto = _nms_graph()
    kept = _kept(proto, feeds)
    assert 1 < len(kept) < 48 and len(set(kept)) == len(kept)
    _, artifact = _convert(proto, feeds, tmp_path, target=deployment)
    (nms,) = _nms_ops(artifact)
    assert len(nms.outputs) == (3 if deployment == "iOS17" else 4)


def test_center_point_boxes(tmp_path: Path) -> None:
    feeds = _scene(1, center_point_box=1)
    proto = _nms_graph(center_point_box=1)
    kept = _kept(proto, feeds)
    assert 1 < len(kept) < 48
    _convert(proto, feeds, tmp_path)


def test_center_point_boxes_of_no_width_overlap_nothing(tmp_path: Path) -> None:
    """onnxruntime lets a box of width or height <= 0 neither suppress nor be suppressed."""
    feeds = _scene(2, center_point_box=1)
    feeds["boxes"][0, ::5, 2] *= -1  # a negative width: every fifth box
    feeds["boxes"][0, 1::7, 3] = 0.0  # no height
    proto = _nms_graph(center_point_box=1)
    kept = set(_kept(proto, feeds).tolist())
    assert set(range(0, 48, 5)) | set(range(1, 48, 7)) <= kept  # onnxruntime keeps all of them
    assert len(kept) < 48
    _convert(proto, feeds, tmp_path)


@pytest.mark.parametrize("deployment", ["iOS16", "iOS17"])
def test_a_score_threshold_that_removes_boxes(tmp_path: Path, deployment: str) -> None:
    feeds = _scene(3)
    threshold = float(np.median(feeds["scores"]))
    proto = _nms_graph(score_threshold=threshold)
    kept, unfiltered = _kept(proto, feeds), _kept(_nms_graph(), feeds)
    assert 1 < len(kept) < len(unfiltered)
    assert np.all(feeds["scores"][0, 0, kept] > threshold)
    _convert(proto, feeds, tmp_path, target=deployment)


def test_a_score_threshold_no_box_passes_selects_none(tmp_path: Path) -> None:
    """Core ML's own score cut keeps the best box when none passes; ONNX keeps none."""
    feeds = _scene(4)
    proto = _nms_graph(score_threshold=float(feeds["scores"].max()))
    assert len(_kept(proto, feeds)) == 0
    got, _ = _convert(proto, feeds, tmp_path, precision="fp32")
    assert got["selected"].shape == (0, 3)


def test_max_output_smaller_than_the_survivors(tmp_path: Path) -> None:
    feeds = _scene(5)
    survivors = len(_kept(_nms_graph(iou=0.3, score_threshold=0.1), feeds))
    limit = survivors // 2
    proto = _nms_graph(max_output=limit, iou=0.3, score_threshold=0.1)
    kept = _kept(proto, feeds)
    assert 1 < limit == len(kept) < survivors
    _convert(proto, feeds, tmp_path)


def test_default_thresholds(tmp_path: Path) -> None:
    """No iou_threshold: 0, any overlap suppresses."""
    feeds = _scene(6)
    proto = _nms_graph(iou=None)
    kept = _kept(proto, feeds)
    assert 1 < len(kept) < len(_kept(_nms_graph(), feeds))
    _convert(proto, feeds, tmp_path)


def test_a_number_of_boxes_known_at_run_time(tmp_path: Path) -> None:
    """max_boxes must be a constant: with INT64_MAX and a dynamic box count, a bound is chosen
    and `check` says so; the selection is onnxruntime's."""
    feeds = _scene(7, n=40)
    proto = _nms_graph("n")
    kept = _kept(proto, feeds)
    assert 1 < len(kept) < 40
    path = tmp_path / "nms.onnx"
    onnx.save(proto, path)
    checked = unframe.check(path, to="coreml")
    assert checked, [str(b) for b in checked.blockers]
    assert any("only known at run time" in n for n in checked.notes), checked.notes
    _convert(proto, feeds, tmp_path / "out")


def test_class_offset_boxes_stay_exact_under_fp16(tmp_path: Path) -> None:
    """torchvision's batched_nms offsets each class's boxes by class * (max coordinate + 1):
    coordinates in the tens of thousands, where fp16 holds multiples of 16. The NMS ops stay in
    float32 in the fp16 program (the selection is onnxruntime's, box for box)."""
    feeds = _scene(8, n=64)
    labels = np.random.default_rng(8).integers(0, 90, 64)
    feeds["boxes"] = feeds["boxes"] + (labels * 401.0)[None, :, None].astype(np.float32)
    proto = _nms_graph(64, iou=0.5)
    kept = _kept(proto, feeds)
    assert 1 < len(kept) < 64
    _, artifact = _convert(proto, feeds, tmp_path)  # precision fp16, the default
    from coremltools.converters.mil.mil import types

    (nms,) = _nms_ops(artifact)
    assert nms.boxes.dtype == types.fp32 and nms.scores.dtype == types.fp32


def test_a_constant_early_return_beside_the_nms(tmp_path: Path) -> None:
    """torchvision's ``if boxes.numel() == 0: return empty`` around the NMS: an If whose then
    branch is an empty constant. MIL's cond takes its output type from the true branch, so the
    computed branch goes there; both answers are onnxruntime's."""
    inner = _nms_graph(32).graph
    then_branch = helper.make_graph(
        [helper.make_node("Constant", [], ["none"], value=numpy_helper.from_array(np.zeros((0,), np.int64)))],
        "then", [], [helper.make_tensor_value_info("none", T.INT64, [0])])
    else_nodes = list(inner.node)[:2] + [helper.make_node("Identity", ["keep"], ["kept"])]
    else_branch = helper.make_graph(else_nodes, "else", [], [helper.make_tensor_value_info("kept", T.INT64, None)],
                                    list(inner.initializer))
    nodes = [helper.make_node("ReduceMax", ["scores"], ["best"], keepdims=0),
             helper.make_node("Less", ["best", "cut"], ["empty"]),
             helper.make_node("If", ["empty"], ["keep_or_none"], then_branch=then_branch, else_branch=else_branch),
             helper.make_node("Identity", ["keep_or_none"], ["out"])]
    graph = helper.make_graph(nodes, "g", list(inner.input), [helper.make_tensor_value_info("out", T.INT64, None)],
                              [numpy_helper.from_array(np.array(0.5, np.float32), "cut")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    model = to_ir(proto)
    computed = _scene(9, n=32)
    kept = _onnxruntime(proto, computed)["out"]
    assert 1 < len(kept) < 32
    low = {"boxes": computed["boxes"], "scores": computed["scores"] * 0.4}  # every score < 0.5
    assert _onnxruntime(proto, low)["out"].shape == (0,)
    for i, feeds in enumerate((computed, low)):
        _, parity = convert_and_compare(model, [feeds], tmp_path / str(i))
        assert parity, parity.reason


# -- what doesn't --------------------------------------------------------------------------------

@pytest.mark.parametrize(("kind", "graph", "reason"), [
    ("classes", lambda: _nms_graph(classes=3), "NonMaxSuppression with 3 classes"),
    ("batches", lambda: _nms_graph(batches=2), "NonMaxSuppression over 2 batches"),
    ("runtime iou", lambda: _nms_graph(runtime_iou=True), "iou_threshold is computed at run time"),
    ("no max_output", lambda: _nms_graph(max_output=None), "max_output_boxes_per_class 0 (its default) or less"),
    ("negative max_output", lambda: _nms_graph(max_output=-3), "max_output_boxes_per_class 0 (its default) or less"),
])
def test_what_does_not_map_is_a_blocker_of_check_and_convert(tmp_path: Path, kind: str, graph: Any,
                                                             reason: str) -> None:
    from click.testing import CliRunner

    from unframe.cli.main import cli

    proto = graph()
    path = tmp_path / "nms.onnx"
    onnx.save(proto, path)
    scene = {**_scene(10, classes=3 if kind == "classes" else 1, batches=2 if kind == "batches" else 1),
             "iou": np.array([0.5], np.float32)}
    feeds = {k: v for k, v in scene.items() if k in {i.name for i in proto.graph.input}}
    _onnxruntime(proto, feeds)  # a valid graph
    checked = unframe.check(path, to="coreml")
    assert not checked
    assert [(b.op, b.node) for b in checked.blockers] == [("NonMaxSuppression", "nms")], checked.blockers
    assert reason in checked.blockers[0].reason
    with pytest.raises(UnsupportedError) as err:
        unframe.convert(path, to="coreml", output=tmp_path / "nms.mlpackage", sample_inputs=feeds)
    assert err.value.exit_code == 4
    assert [b["op"] for b in err.value.details["blockers"]] == ["NonMaxSuppression"]
    assert reason in err.value.details["blockers"][0]["reason"]
    assert not (tmp_path / "nms.mlpackage").exists()
    res = CliRunner().invoke(cli, ["check", str(path), "--to", "coreml", "--json"])
    assert res.exit_code == 4, res.output
    assert reason in json.dumps(json.loads(res.stdout))


# -- the MIL kernel ------------------------------------------------------------------------------

def _program(opset: int, n: int, classes: int, **op: Any) -> Any:
    """One non_maximum_suppression over placeholders boxes [1, n, 4] / scores [1, n, classes]
    (transposed to the iOS17 layout there)."""
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import Function, Program

    from unframe.converters.backends.coreml.translate import ct_target

    specs = {"boxes": mb.TensorSpec(shape=(1, n, 4)), "scores": mb.TensorSpec(shape=(1, n, classes))}
    with Function(specs, opset_version=ct_target(opset)) as func:
        boxes, scores = func.inputs["boxes"], func.inputs["scores"]
        if opset >= 17:
            op.pop("score_threshold", None)
            boxes, scores = mb.transpose(x=boxes, perm=[0, 2, 1]), mb.transpose(x=scores, perm=[0, 2, 1])
        func.set_outputs(list(mb.non_maximum_suppression(boxes=boxes, scores=scores, **op)))
    program = Program()
    program.add_function("main", func)
    return program


def _evaluate(program: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    from unframe.converters.backends.coreml.mil_eval import evaluate

    seen: set[str] = set()
    out = list(evaluate(program, feeds, record=seen).values())
    assert "non_maximum_suppression" in seen
    return out


@pytest.mark.parametrize("opset", [16, 17])
def test_the_kernel_selects_as_onnxruntime_and_pads(opset: int) -> None:
    scene = _scene(11, n=40, center_point_box=1)
    kept = _kept(_nms_graph(40, center_point_box=1, iou=0.4, score_threshold=0.3), scene)
    assert 1 < len(kept) < 40
    feeds = {"boxes": scene["boxes"], "scores": scene["scores"].transpose(0, 2, 1)}
    out = _evaluate(_program(opset, 40, 1, iou_threshold=np.float32(0.4), score_threshold=np.float32(0.3),
                             max_boxes=40), feeds)
    indices = out[2][0]
    if opset >= 17:  # no score threshold there: the boxes at or below it come last
        order = indices[indices >= 0]
        assert np.all(feeds["scores"][0, order[:len(kept)], 0] > 0.3)
        assert np.all(feeds["scores"][0, order[len(kept):], 0] <= 0.3)
        np.testing.assert_array_equal(order[:len(kept)], kept)
        boxes, scores = out[0][0].T, out[1][0].T
    else:
        np.testing.assert_array_equal(indices[:len(kept)], kept)
        assert out[3].tolist() == [len(kept)] and np.all(indices[len(kept):] == -1)
        boxes, scores = out[0][0], out[1][0]
    taken = indices >= 0
    np.testing.assert_array_equal(boxes[taken], scene["boxes"][0, indices[taken]])
    np.testing.assert_array_equal(scores[taken, 0], scene["scores"][0, 0, indices[taken]])
    assert not boxes[~taken].any() and not scores[~taken].any()


def test_the_kernel_keeps_the_best_box_when_none_passes_the_score_threshold() -> None:
    scene = _scene(12, n=20, center_point_box=1)
    feeds = {"boxes": scene["boxes"], "scores": scene["scores"].transpose(0, 2, 1)}
    out = _evaluate(_program(16, 20, 1, iou_threshold=np.float32(0.5), score_threshold=np.float32(2.0),
                             max_boxes=5), feeds)
    assert out[2][0].tolist() == [int(np.argmax(feeds["scores"][0, :, 0]))] + [-1] * 4
    assert out[3].tolist() == [1]


def test_the_kernel_suppresses_per_class_as_onnxruntime_per_class() -> None:
    """per_class_suppression: a box belongs to its best class and only boxes of one class
    suppress each other; onnxruntime with each box scored in its own class only (the others
    under the score threshold) selects the same boxes, class by class."""
    scene = _scene(13, n=40, center_point_box=1, classes=3)
    scores = scene["scores"]  # [1, 3, 40]
    label = scores[0].argmax(axis=0)
    own = np.where(np.arange(3)[:, None] == label[None, :], scores[0], -1.0)[None].astype(np.float32)
    selected = _onnxruntime(_nms_graph(40, center_point_box=1, iou=0.3, score_threshold=-0.5, classes=3),
                            {"boxes": scene["boxes"], "scores": own})["selected"]
    best = scores[0].max(axis=0)
    expected = sorted(selected[:, 2].tolist(), key=lambda i: -best[i])[:12]
    assert 12 < len(selected) < 40
    feeds = {"boxes": scene["boxes"], "scores": scores.transpose(0, 2, 1)}
    for opset in (16, 17):
        out = _evaluate(_program(opset, 40, 3, iou_threshold=np.float32(0.3), score_threshold=np.float32(-1.0),
                                 max_boxes=12, per_class_suppression=True), feeds)
        assert out[2][0].tolist() == expected
    # the same boxes without per-class suppression: fewer survive
    out = _evaluate(_program(16, 40, 3, iou_threshold=np.float32(0.3), score_threshold=np.float32(-1.0),
                             max_boxes=40), feeds)
    assert (out[2][0] >= 0).sum() < len(selected)


# -- what torchvision's detectors need beside it ---------------------------------------------------

@pytest.mark.parametrize(("largest", "axis"), [(1, 0), (0, 0)])
def test_top_k_with_k_known_at_run_time(tmp_path: Path, largest: int, axis: int) -> None:
    """torchvision keeps ``min(topk_candidates, number of boxes)`` per class: TopK's k from the
    data's shape. Ties keep the lower index first, as onnxruntime does."""
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["n"], start=0, end=1),
         helper.make_node("Min", ["n", "cap"], ["k"]),
         helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=axis, largest=largest)],
        "topk", [helper.make_tensor_value_info("x", T.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("values", T.FLOAT, None),
         helper.make_tensor_value_info("indices", T.INT64, None)],
        [numpy_helper.from_array(np.array([6], np.int64), "cap")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    model = to_ir(proto)
    rng = np.random.default_rng(14)
    for rows in (4, 15):  # k = 4 (all of them), then 6 of 15
        x = np.round(rng.uniform(0, 1, (rows, 3)), 1).astype(np.float32)  # ties
        assert len(np.unique(x[:, 0])) < rows
        _, parity = convert_and_compare(model, [{"x": x}], tmp_path / str(rows), precision="fp32")
        assert parity, parity.reason
        assert _onnxruntime(proto, {"x": x})["indices"].shape == (min(rows, 6), 3)


def test_a_cast_of_a_folded_reduction(tmp_path: Path) -> None:
    """torchvision's transform casts a ReduceMax of a constant to int64: the folded value is a
    python float, which coremltools' value inference of the truncation (sign, abs) fails on."""
    graph = helper.make_graph(
        [helper.make_node("ReduceMax", ["c"], ["high"], keepdims=0),
         helper.make_node("ReduceMin", ["c"], ["low"], keepdims=0),
         helper.make_node("Cast", ["high"], ["high_int"], to=T.INT64),
         helper.make_node("Cast", ["low"], ["low_int"], to=T.INT64),
         helper.make_node("Add", ["x", "high_int"], ["a"]),
         helper.make_node("Add", ["a", "low_int"], ["y"])],
        "cast", [helper.make_tensor_value_info("x", T.INT64, [3])],
        [helper.make_tensor_value_info("y", T.INT64, [3])],
        [numpy_helper.from_array(np.array([-2.7, 3.5], np.float32), "c")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    feeds = {"x": np.array([1, 20, -300], np.int64)}
    _, parity = convert_and_compare(to_ir(proto), [feeds], tmp_path)
    assert parity, parity.reason


# -- onnx's own node cases -----------------------------------------------------------------------

ONNX_CASES = ["center_point_box_format", "flipped_coordinates", "identical_boxes", "iou_threshold_boundary",
              "limit_output_size", "single_box", "suppress_by_IOU", "suppress_by_IOU_and_scores"]


@pytest.mark.parametrize("name", [*ONNX_CASES, "two_batches", "two_classes"])
def test_onnx_node_cases(tmp_path: Path, name: str) -> None:
    """onnx's NonMaxSuppression cases, thresholds frozen to constants (bench/coreml_nodes.py),
    against their expected outputs; the two that don't map are blockers."""
    from node_cases import all_node_cases, bench_module

    case = all_node_cases().get(f"test_nonmaxsuppression_{name}")
    if case is None:
        pytest.skip(f"needs onnx node case test_nonmaxsuppression_{name} (not in this onnx version)")
    result = bench_module().run_case(case, tmp_path)
    if name in ONNX_CASES:
        assert result.status == "pass", f"{result.status}: {result.detail}"
    else:
        assert result.status == "blocked" and "NonMaxSuppression" in result.detail, result.detail
