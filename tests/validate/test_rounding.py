"""The graph's own 16-bit rounding error (unframe/validate/rounding.py), measured by onnxruntime
on a rounded copy, against the same rounding done by hand in numpy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper
from spine_utils import cancelling_difference

from unframe.validate.compare import compare
from unframe.validate.rounding import MAX_SHARE, WIDEN, RoundingError, _round, plan_keep_fp32, rounding_error
from unframe.validate.runner import Runner

RNG = np.random.default_rng(0)
W1 = (RNG.standard_normal((16, 64)) * 3).astype(np.float32)  # wide activations: rounding shows
W2 = (RNG.standard_normal((64, 4)) * 0.2).astype(np.float32)


def _mlp() -> ir.Model:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"])], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])],
        [numpy_helper.from_array(W1, "w1"), numpy_helper.from_array(W2, "w2")])
    return ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                                        ir_version=9))


def _by_hand(x: np.ndarray, low: type) -> np.ndarray:
    r16 = lambda a: a.astype(low).astype(np.float32)  # noqa: E731
    h = r16(r16(x) @ r16(W1))  # a 16-bit node reads its inputs in 16 bits, the graph's input too
    r = r16(np.maximum(h, 0))
    return r @ r16(W2)


@pytest.mark.parametrize(("precision", "low"), [("fp16", np.float16), ("bf16", ml_dtypes.bfloat16)])
def test_the_measured_error_is_the_rounding_done_by_hand(precision: str, low: type):
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    exact = x @ W1
    exact = np.maximum(exact, 0) @ W2
    want = float(np.abs(_by_hand(x, low) - exact).max())
    measured = rounding_error(_mlp(), [{"x": x}], precision)
    assert measured is not None and not measured.nonfinite
    assert measured.errors["y"] == pytest.approx(want, rel=0.05)
    assert want > 1e-4 * measured.scales["y"]  # rounding shows at this scale: the test can fail
    assert measured.allowance("y") == pytest.approx(min(WIDEN * want, MAX_SHARE * measured.scales["y"]), rel=0.05)


def test_bf16_rounding_is_round_to_nearest_even():
    values = RNG.standard_normal(10_000).astype(np.float32) * 1e3
    np.testing.assert_array_equal(_round(values, ir.DataType.BFLOAT16),
                                  values.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_allowance_is_capped_and_none_where_rounding_overflows():
    big = RoundingError("fp16", errors={"y": 5.0, "z": 1.0}, scales={"y": 10.0, "z": 10.0}, nonfinite=["z"])
    assert big.allowance("y") == pytest.approx(MAX_SHARE * 10.0)
    assert big.allowance("z") == 0.0 and big.allowance("missing") == 0.0


def test_an_overflowing_intermediate_is_reported():
    x = np.full((1, 16), 1e4, np.float32)  # |h| ~ 1e5 > 65504: inf in fp16
    measured = rounding_error(_mlp(), [{"x": x}], "fp16")
    assert measured is not None and measured.nonfinite == ["y"]


class _Fixed(Runner):
    def __init__(self, name: str, y: np.ndarray) -> None:
        self.name, self.y = name, y

    def run(self, feeds):
        return {"y": self.y}


def test_a_floor_raises_atol_to_the_rounding_error_and_a_users_atol_still_wins():
    ref = np.array([1.0, -2.0, 0.5], np.float32)
    off = ref + np.float32(0.06)  # past 0.02 + 0.02 * 2, within a rounding floor of 0.07
    a, b = _Fixed("ref", ref), _Fixed("out", off)
    assert not compare(a, b, {}, default_fn=lambda dt: (2e-2, 2e-2))
    raised = compare(a, b, {}, default_fn=lambda dt: (2e-2, 2e-2), floors={"y": 0.07})
    assert raised and raised.outputs[0].rounding == pytest.approx(0.07)
    assert "16-bit rounding error" in raised.summary()
    assert not compare(a, b, {}, atol=1e-3, default_fn=lambda dt: (2e-2, 2e-2), floors={"y": 0.07})


def test_the_planner_keeps_the_nodes_whose_rounding_cancellation_magnifies():
    """y = p - q with p, q ~ 1000 and y ~ 5: rounding p or q (or their weights) to fp16 moves y
    by ~0.5, and so does a Sub that reads them in 16 bits; the Relu before them is harmless. The
    plan keeps exactly those three."""
    proto, feed = cancelling_difference()
    model = ir.serde.deserialize_model(proto)
    feeds = [feed]
    plan = plan_keep_fp32(model, feeds, "fp16", lambda _n, scale: 0.01 * scale)
    assert plan is not None and plan.before > 1.0 >= plan.after
    assert plan.kept == ["p", "q", "sub"] and plan.positions == [1, 2, 3]


def test_a_value_read_in_both_branches_of_an_if_is_rounded_for_each():
    """torchvision's detectors read one value in both branches of an If: the rounded copy must
    give each read its own name (two reads were one duplicate name, which onnxruntime refuses)."""
    def branch(op: str, name: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node(op, ["r", "k"], [f"{name}_out"])], name, [],
                                 [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [2, 64])])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("If", ["c"], ["y"], then_branch=branch("Mul", "then"), else_branch=branch("Sub", "else"))],
        "if_reads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16]),
                     helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])],
        [numpy_helper.from_array(W1, "w1"), numpy_helper.from_array(np.float32(3.0), "k")])
    model = ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                                         ir_version=9))
    x = RNG.standard_normal((2, 16)).astype(np.float32)
    for c in (True, False):
        measured = rounding_error(model, [{"x": x, "c": np.array(c)}], "fp16")
        assert measured is not None and measured.errors["y"] > 0
