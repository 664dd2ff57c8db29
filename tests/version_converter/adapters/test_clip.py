"""Golden node cases through the clip adapters: each path is converted step by step, checked with the
full checker and strict shape inference, run, and compared with the case's expected outputs."""

from __future__ import annotations

import onnx
import onnx_ir as ir
import pytest
from adapter_cases import check_path
from onnx import TensorProto, helper

from unframe.errors import UnsupportedError
from unframe.version_converter import convert_opset

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_clip", [10, 7, 11], ("min", "max")),
    ("test_clip_default_min", [10, 13], ("min",)),
    # run-time min/max: Min(Max(x, lo), hi), bounds tiled to x's shape below opset 8
    ("test_clip", [9], ()),
    ("test_clip", [7], ()),
    ("test_clip_default_max", [7], ()),
    ("test_clip_min_greater_than_max", [7], ()),
    ("test_clip_splitbounds", [7], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}-{len(p[2])}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"


def _clip_of_unknown_rank() -> onnx.ModelProto:
    node = helper.make_node("Clip", ["x", "lo", "hi"], ["y"])
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("lo", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("hi", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_runtime_bounds_of_unknown_rank_refused_below_8() -> None:
    irm = ir.from_proto(_clip_of_unknown_rank())
    with pytest.raises(UnsupportedError, match="known input rank below opset 8"):
        convert_opset(irm, 7)


def test_runtime_bounds_of_unknown_rank_broadcast_at_9() -> None:
    irm = ir.from_proto(_clip_of_unknown_rank())
    convert_opset(irm, 9)
    assert [n.op_type for n in irm.graph] == ["Max", "Min"]
