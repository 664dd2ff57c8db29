"""Golden node cases through the squeeze adapters: each path is converted step by step, checked with the
full checker and strict shape inference, run, and compared with the case's expected outputs.

Freeze ``()`` keeps ``axes`` a graph input: the downgrade then applies the axes one at a time under
run-time flags (``dynaxes``)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from adapter_cases import check_path
from onnx import TensorProto, helper

from unframe.errors import UnsupportedError
from unframe.version_converter import convert_opset

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_squeeze", [12, 9, 13], ("axes",)),
    ("test_unsqueeze_axis_0", [12, 13], ("axes",)),
    # run-time axes
    ("test_squeeze", [12], ()),
    ("test_squeeze_negative_axes", [7], ()),
    ("test_unsqueeze_three_axes", [7], ()),
    ("test_unsqueeze_unsorted_axes", [12], ()),
    ("test_unsqueeze_negative_axes", [9], ()),
    ("test_unsqueeze_two_axes", [11, 12], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS,
                         ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}-{'frozen' if p[2] else 'runtime'}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"


def _model(op: str, data_shape: list[int | str] | None, axes_shape: list[int | str]) -> ir.Model:
    node = helper.make_node(op, ["x", "axes"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, data_shape),
                                            helper.make_tensor_value_info("axes", TensorProto.INT64, axes_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))


@pytest.mark.parametrize(("op", "data_shape", "axes_shape", "reason"), [
    ("Squeeze", None, [1], "data rank is unknown"),
    ("Unsqueeze", [2, 3], ["k"], "length of axes is not static"),
])
def test_runtime_axes_refused(op: str, data_shape: list[int | str] | None, axes_shape: list[int | str],
                              reason: str) -> None:
    with pytest.raises(UnsupportedError, match=reason):
        convert_opset(_model(op, data_shape, axes_shape), 12)


@pytest.mark.parametrize("axes", [[1, 1], [0, 3], [-4, 0]])
def test_bad_runtime_axes_fail_at_run_time(axes: list[int]) -> None:
    """Duplicate or out-of-range axes make Squeeze_13 fail; the rewrite must fail too, not drop one."""
    import onnxruntime as ort

    model = _model("Squeeze", [1, 1, "d"], [2])
    convert_opset(model, 7)
    session = ort.InferenceSession(ir.to_proto(model).SerializeToString(), providers=["CPUExecutionProvider"])
    session.run(None, {"x": np.ones((1, 1, 1), np.float32), "axes": np.array([0, 1])})
    with pytest.raises(Exception, match="out of|indices"):
        session.run(None, {"x": np.ones((1, 1, 1), np.float32), "axes": np.array(axes)})
