"""Golden node cases through the pad adapters: each path is converted step by step, checked with the
full checker and strict shape inference, run, and compared with the case's expected outputs."""

from __future__ import annotations

import onnx
import onnx_ir as ir
import pytest
from adapter_cases import check_path
from nodecases import case
from onnx import TensorProto, helper

from unframe.errors import UnsupportedError
from unframe.version_converter import convert_opset

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_constant_pad", [10, 7, 11], ("pads", "value")),
    ("test_edge_pad", [17, 18], ("pads",)),
    ("test_constant_pad_axes", [17, 11], ("pads", "value", "axes")),
    ("test_reflect_pad", [18, 19], ("pads",)),
    # run-time pads (constant mode): Concat of Expand(value) blocks around a Slice, per axis
    ("test_constant_pad", [10], ()),
    ("test_constant_pad", [9], ()),
    ("test_constant_pad_axes", [10], ("pads", "axes")),  # run-time value only
    # run-time axes: full-rank pads from a one-hot MatMul
    ("test_constant_pad_axes", [17], ()),
    ("test_constant_pad_axes", [9], ()),
    ("test_constant_pad_negative_axes", [11], ()),
    # wrap: a Gather of the wrapped positions (constant), Range/Mod (run-time, from opset 11)
    ("test_wrap_pad", [18, 7], ("pads",)),
    ("test_wrap_pad", [17], ()),
    ("test_wrap_pad", [11], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}-{len(p[2])}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"


def _refused(name: str, target: int, reason: str) -> None:
    irm = ir.from_proto(case(name).model)
    with pytest.raises(UnsupportedError, match=reason):
        convert_opset(irm, target)


def test_runtime_pads_refused_below_9() -> None:
    _refused("test_constant_pad", 7, "Pad pads/value at run time need opset 9")


def test_runtime_wrap_pads_refused_below_11() -> None:
    _refused("test_wrap_pad", 10, "mode='wrap' with run-time pads or lengths needs Range")


def test_runtime_reflect_pads_refused_below_11() -> None:
    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("pads", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])])
    irm = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    with pytest.raises(UnsupportedError, match="mode='reflect' with run-time pads"):
        convert_opset(irm, 10)
    assert isinstance(ir.to_proto(irm), onnx.ModelProto)
