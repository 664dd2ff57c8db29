"""Golden node cases through the dropout adapters: each path is converted step by step, checked with the
full checker and strict shape inference, run, and compared with the case's expected outputs."""

from __future__ import annotations

import pytest
from adapter_cases import check_path

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_dropout_default", [11, 7, 12], ()),
    ("test_dropout_default_mask", [11, 7], ()),        # the mask as Tile(True, Shape(x))
    ("test_dropout_default_mask_ratio", [9], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"


def test_mask_in_training_mode_is_refused() -> None:
    """A run-time training_mode may draw a random mask: no older Dropout can say so."""
    import onnx_ir as ir
    from onnx import TensorProto, helper

    from unframe.errors import UnsupportedError
    from unframe.version_converter import convert_opset

    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "m"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
                                            helper.make_tensor_value_info("r", TensorProto.FLOAT, []),
                                            helper.make_tensor_value_info("t", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
                               helper.make_tensor_value_info("m", TensorProto.BOOL, [2])])
    model = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    with pytest.raises(UnsupportedError, match="training_mode is not a constant False"):
        convert_opset(model, 11)
