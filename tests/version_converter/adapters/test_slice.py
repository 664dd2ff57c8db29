"""Golden node cases through the slice adapters: each path is converted step by step, checked with the
full checker and strict shape inference, run, and compared with the case's expected outputs."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from adapter_cases import check_path
from nodecases import case
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from unframe.errors import UnsupportedError
from unframe.version_converter import convert_opset

ALL = ("starts", "ends", "axes", "steps")
PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_slice", [9, 7, 10], ALL),
    # constant steps other than 1: a Gather of the exact index list
    ("test_slice_neg_steps", [7], ALL),
    ("test_slice_start_out_of_bounds", [7], ALL),
    # run-time starts/ends/axes/steps: Compress masks at opset 9
    ("test_slice", [9], ()),
    ("test_slice_default_axes", [9], ()),
    ("test_slice_default_steps", [9], ()),
    ("test_slice_end_out_of_bounds", [9], ()),
    ("test_slice_neg", [9], ()),
    ("test_slice_neg_steps", [9], ()),
    ("test_slice_negative_axes", [9], ()),
    ("test_slice_start_out_of_bounds", [9], ()),
    ("test_loop11", [9], ()),
    # run-time values below opset 9: Gathers of Loop-made aranges
    ("test_slice", [7], ()),
    ("test_slice_default_axes", [7], ()),
    ("test_slice_default_steps", [7], ()),
    ("test_slice_end_out_of_bounds", [7], ()),
    ("test_slice_neg", [7], ()),
    ("test_slice_neg_steps", [7], ()),
    ("test_slice_negative_axes", [7], ()),
    ("test_slice_start_out_of_bounds", [7], ()),
    ("test_loop11", [7], ()),
    ("test_slice_neg_steps", [8], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}-{len(p[2])}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"


def test_runtime_axes_of_unknown_rank_refused() -> None:
    model = case("test_slice").model
    del model.graph.input[0].type.tensor_type.shape.dim[:]
    model.graph.input[0].type.tensor_type.ClearField("shape")
    irm = ir.from_proto(model)
    with pytest.raises(UnsupportedError, match="run-time Slice axes need a known input rank"):
        convert_opset(irm, 7)


def _slice_model(dims: list[int | None]) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)]
    inputs += [helper.make_tensor_value_info(n, TensorProto.INT64, [2]) for n in "seat"]
    graph = helper.make_graph([helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])], "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * len(dims))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


BIG = np.iinfo(np.int64).max
EDGES = [  # starts, ends, axes, steps: clamping at both ends, both step signs, negative axes
    ([0, -1], [BIG, -BIG - 1], [0, 1], [2, -1]),
    ([-100, 3], [100, 0], [-1, -2], [-3, -2]),
    ([4, -2], [1, -7], [1, 0], [-2, 3]),
    ([-BIG - 1, 2], [-1, 2], [0, 1], [1, 1]),
    ([5, 5], [-BIG - 1, -BIG - 1], [0, 1], [-7, -1]),
]


@pytest.mark.parametrize("target", [9, 7])
@pytest.mark.parametrize("dims", [[5, 4], [None, None]], ids=["static", "dynamic"])
def test_runtime_slice_matches_the_reference_on_edge_values(dims: list[int | None], target: int) -> None:
    model = _slice_model(dims)
    irm = ir.from_proto(model)
    convert_opset(irm, target)
    converted = ir.to_proto(irm)
    onnx.checker.check_model(converted, full_check=True)
    onnx.shape_inference.infer_shapes(converted, check_type=True, strict_mode=True)
    session = ort.InferenceSession(converted.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    for starts, ends, axes, steps in EDGES:
        feeds = {"x": x, **{n: np.asarray(v, dtype=np.int64) for n, v in zip("seat", (starts, ends, axes, steps), strict=True)}}
        want = ReferenceEvaluator(model).run(None, feeds)[0]
        for got in (ReferenceEvaluator(converted).run(None, feeds)[0], session.run(None, feeds)[0]):
            assert want.shape == got.shape and np.array_equal(want, got), (starts, ends, axes, steps)


def _spec_take(x: np.ndarray, axis: int, start: int, end: int, step: int) -> np.ndarray:
    """Slice-13's clamping written out (backwards, a start before the axis clamps to its first
    element; numpy and onnx.reference take nothing there)."""
    length = x.shape[axis]
    start, end = (v + length if v < 0 else v for v in (start, end))
    back = int(step < 0)
    start, end = min(max(start, 0), length - back), min(max(end, -back), length - back)
    return np.take(x, np.arange(start, end, step, dtype=np.int64), axis=axis)


@pytest.mark.parametrize("target", [9, 7])
@pytest.mark.parametrize("shape", [[5, 4], [0, 3], [1, 2]])
def test_runtime_slice_follows_the_spec_clamping(shape: list[int], target: int) -> None:
    """Random starts/ends/steps (out of range, INT64 extremes, backwards past the start, empty axes)
    on dynamic dims: both runtimes give Slice-13's result."""
    rng = np.random.default_rng(sum(shape) + target)
    irm = ir.from_proto(_slice_model([None, None]))
    convert_opset(irm, target)
    converted = ir.to_proto(irm)
    session = ort.InferenceSession(converted.SerializeToString(), providers=["CPUExecutionProvider"])
    reference = ReferenceEvaluator(converted)
    x = rng.standard_normal(shape).astype(np.float32)
    pool = [0, 1, 2, -1, -3, 5, -7, BIG, -BIG - 1]
    for _ in range(25):
        starts, ends = rng.choice(pool, 2).tolist(), rng.choice(pool, 2).tolist()
        steps = rng.choice([1, 2, -1, -2, 3, -5, BIG, -BIG - 1], 2).tolist()
        axes = rng.permutation([0, -1]).tolist()
        want = x
        for j in range(2):
            want = _spec_take(want, axes[j] % 2, starts[j], ends[j], steps[j])
        feeds = {"x": x, **{n: np.asarray(v, dtype=np.int64) for n, v in zip("seat", (starts, ends, axes, steps), strict=True)}}
        for got in (reference.run(None, feeds)[0], session.run(None, feeds)[0]):
            assert got.shape == want.shape and np.array_equal(got, want), (starts, ends, axes, steps)


def test_constant_backward_steps_clamp_as_the_spec() -> None:
    """A start before the axis, stepping backwards, clamps to index 0 (Slice-13), not Python's empty."""
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])]
    inits = [helper.make_tensor(n, TensorProto.INT64, [1], [v]) for n, v in zip("seat", (-6, -8, 0, -3), strict=True)]
    graph = helper.make_graph([helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])], "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])], inits)
    irm = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    convert_opset(irm, 7)
    converted = ir.to_proto(irm)
    onnx.shape_inference.infer_shapes(converted, check_type=True, strict_mode=True)
    x = np.arange(4, dtype=np.float32)
    got = ort.InferenceSession(converted.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.array_equal(got, [0.0])
