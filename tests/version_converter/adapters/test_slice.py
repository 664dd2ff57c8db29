"""Golden node cases through the slice adapters: each path is converted step by step, checked with the
full checker and strict shape inference, run, and compared with the case's expected outputs."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
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
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}-{len(p[2])}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"


def test_runtime_starts_refused_below_9() -> None:
    irm = ir.from_proto(case("test_slice").model)
    with pytest.raises(UnsupportedError, match="Slice starts/ends at run time need opset 9"):
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


@pytest.mark.parametrize("dims", [[5, 4], [None, None]], ids=["static", "dynamic"])
def test_runtime_slice_matches_the_reference_on_edge_values(dims: list[int | None]) -> None:
    model = _slice_model(dims)
    irm = ir.from_proto(model)
    convert_opset(irm, 9)
    converted = ir.to_proto(irm)
    onnx.checker.check_model(converted, full_check=True)
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    for starts, ends, axes, steps in EDGES:
        feeds = {"x": x, **{n: np.asarray(v, dtype=np.int64) for n, v in zip("seat", (starts, ends, axes, steps), strict=True)}}
        want = ReferenceEvaluator(model).run(None, feeds)[0]
        got = ReferenceEvaluator(converted).run(None, feeds)[0]
        assert want.shape == got.shape and np.array_equal(want, got), (starts, ends, axes, steps)
