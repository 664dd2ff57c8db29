"""Golden node cases through the reduce adapters: each path is converted step by step, checked with the
full checker and strict shape inference, run, and compared with the case's expected outputs.

Freeze ``()`` keeps ``axes`` a graph input: the downgrade then applies the axes one at a time under
run-time flags (``dynaxes``)."""

from __future__ import annotations

import onnx_ir as ir
import pytest
from adapter_cases import check_path
from onnx import TensorProto, helper

from unframe.errors import UnsupportedError
from unframe.version_converter import convert_opset

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_reduce_mean_keepdims_example", [17, 11, 21], ("axes",)),
    ("test_reduce_sum_keepdims_example", [12, 13], ("axes",)),
    ("test_reduce_sum_empty_axes_input_noop_example", [12], ("axes",)),
    ("test_reduce_max_keepdims_example", [13, 9, 18], ("axes",)),
    ("test_reduce_log_sum_exp_keepdims_example", [17, 18], ("axes",)),
    ("test_reduce_l1_keep_dims_example", [17, 18], ("axes",)),
    ("test_reduce_l2_keep_dims_example", [17, 18], ("axes",)),
    ("test_reduce_log_sum_asc_axes", [17, 18], ("axes",)),
    ("test_reduce_min_keepdims_example", [17, 18], ("axes",)),
    ("test_reduce_prod_keepdims_example", [17, 18], ("axes",)),
    ("test_reduce_sum_square_keepdims_example", [17, 18], ("axes",)),
    ("test_reduce_mean_default_axes_keepdims_example", [17, 18], ("axes",)),
    # run-time axes: ReduceSum 13->12
    ("test_reduce_sum_keepdims_example", [12], ()),
    ("test_reduce_sum_do_not_keepdims_random", [7], ()),
    ("test_reduce_sum_negative_axes_keepdims_example", [11, 12], ()),
    ("test_reduce_sum_empty_set", [7], ()),
    ("test_reduce_sum_empty_axes_input_noop", [7], ()),  # static length 0 -> Identity
    ("test_reduce_sum_default_axes_keepdims_example", [9], ()),  # static length 0 -> all axes
    # run-time axes: the others 18->17
    ("test_reduce_mean_keepdims_example", [17], ()),
    ("test_reduce_mean_do_not_keepdims_example", [7], ()),
    ("test_reduce_mean_negative_axes_keepdims_random", [11, 17], ()),
    ("test_reduce_max_do_not_keepdims_example", [9], ()),
    ("test_reduce_max_negative_axes_keepdims_example", [17], ()),
    ("test_reduce_min_keepdims_random", [13], ()),
    ("test_reduce_min_do_not_keepdims_example", [7], ()),
    ("test_reduce_prod_do_not_keepdims_example", [11], ()),
    ("test_reduce_prod_negative_axes_keepdims_example", [7], ()),
    ("test_reduce_l1_do_not_keepdims_example", [7], ()),
    ("test_reduce_l1_negative_axes_keep_dims_example", [15], ()),
    ("test_reduce_l2_do_not_keepdims_random", [7], ()),
    ("test_reduce_l2_negative_axes_keep_dims_example", [11], ()),
    ("test_reduce_l2_empty_set", [9], ()),
    ("test_reduce_log_sum_asc_axes", [7], ()),
    ("test_reduce_log_sum_desc_axes", [11], ()),
    ("test_reduce_log_sum_negative_axes", [13], ()),
    ("test_reduce_log_sum_exp_do_not_keepdims_example", [7], ()),
    ("test_reduce_log_sum_exp_negative_axes_keepdims_example", [17], ()),
    ("test_reduce_sum_square_do_not_keepdims_example", [9], ()),
    ("test_reduce_sum_square_negative_axes_keepdims_example", [11], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS,
                         ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}-{'frozen' if p[2] else 'runtime'}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"


def _reduce(op: str, opset: int, data_shape: list[int] | None, axes_shape: list[int | str]) -> ir.Model:
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, data_shape),
                                            helper.make_tensor_value_info("axes", TensorProto.INT64, axes_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


@pytest.mark.parametrize(("op", "opset", "data_shape", "axes_shape", "reason"), [
    ("ReduceSum", 13, None, [1], "data rank is unknown"),
    ("ReduceMean", 18, [2, 3], ["k"], "neither a constant nor of a static length"),
])
def test_runtime_axes_refused(op: str, opset: int, data_shape: list[int] | None, axes_shape: list[int | str],
                              reason: str) -> None:
    with pytest.raises(UnsupportedError, match=reason):
        convert_opset(_reduce(op, opset, data_shape, axes_shape), opset - 1)


def test_integer_mean_refused() -> None:
    """Integer means truncate: the mean of per-axis means is not the mean over the axes."""
    model = _reduce("ReduceMean", 18, [2, 3], [2])
    model.graph.inputs[0].type = ir.TensorType(ir.DataType.INT32)
    with pytest.raises(UnsupportedError, match="ReduceMean over integers"):
        convert_opset(model, 17)
