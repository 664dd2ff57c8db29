"""Golden node cases through the split adapters: each path is converted step by step, checked with the
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

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_split_variable_parts_1d_opset13", [12, 9, 13], ("split",)),
    ("test_split_1d_uneven_split_opset18", [17, 18], ()),
    ("test_split_equal_parts_1d_opset18", [17, 12, 18], ()),
    # run-time split sizes: one Slice per output (Compress at opset 9)
    ("test_split_variable_parts_1d_opset13", [11], ()),
    ("test_split_variable_parts_2d_opset18", [10], ()),
    ("test_split_variable_parts_2d_opset13", [9], ()),
    ("test_split_variable_parts_default_axis_opset18", [9], ()),
    ("test_split_zero_size_splits_opset13", [9], ()),  # the split axis has no static length
    # below opset 9: each output a Gather of offset + arange(size), the arange made by a Loop
    ("test_split_variable_parts_1d_opset13", [7], ()),
    ("test_split_variable_parts_2d_opset13", [7], ()),
    ("test_split_variable_parts_default_axis_opset13", [7], ()),
    ("test_split_zero_size_splits_opset13", [7], ()),
    ("test_split_variable_parts_1d_opset18", [7], ()),
    ("test_split_variable_parts_2d_opset18", [7], ()),
    ("test_split_variable_parts_default_axis_opset18", [8], ()),
    ("test_split_zero_size_splits_opset18", [7], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}-{len(p[2])}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"


def test_runtime_split_with_a_negative_axis_of_unknown_rank_refused() -> None:
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
              helper.make_tensor_value_info("split", TensorProto.INT64, [2])]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "z")]
    graph = helper.make_graph([helper.make_node("Split", ["x", "split"], ["y", "z"], axis=-1)], "g", inputs, outputs)
    irm = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    with pytest.raises(UnsupportedError, match="a negative axis needs a known input rank"):
        convert_opset(irm, 7)


def test_runtime_split_sizes_at_7_in_both_runtimes() -> None:
    """Zero, whole and uneven sizes on a dynamic axis: onnxruntime and onnx.reference both agree
    with numpy (the arange's zero-trip branch included)."""
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3]),
              helper.make_tensor_value_info("split", TensorProto.INT64, [3])]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [None, 3]) for n in "abc"]
    graph = helper.make_graph([helper.make_node("Split", ["x", "split"], list("abc"), axis=0)], "g", inputs, outputs)
    irm = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    convert_opset(irm, 7)
    converted = ir.to_proto(irm)
    onnx.checker.check_model(converted, full_check=True)
    onnx.shape_inference.infer_shapes(converted, check_type=True, strict_mode=True)
    session = ort.InferenceSession(converted.SerializeToString(), providers=["CPUExecutionProvider"])
    for sizes in ([0, 5, 0], [2, 0, 3], [1, 1, 3], [5, 0, 0], [0, 0, 0]):
        x = np.arange(3 * sum(sizes), dtype=np.float32).reshape(-1, 3)
        want = np.split(x, np.cumsum(sizes)[:-1])
        feeds = {"x": x, "split": np.asarray(sizes, dtype=np.int64)}
        for got in (session.run(None, feeds), ReferenceEvaluator(converted).run(None, feeds)):
            assert all(g.shape == w.shape and np.array_equal(g, w) for g, w in zip(got, want, strict=True)), sizes


def test_folded_split_gives_its_outputs_a_shape() -> None:
    """Inference can't shape the outputs of a Split whose sizes come from Shape; the downgrade sets
    them so a second Split with a negative axis on an output knows its rank."""
    irm = ir.from_proto(case("test_rotary_embedding_expanded").model)
    try:
        convert_opset(irm, 9)
    except UnsupportedError as exc:  # other ops of the expansion may still block (Concat's rank)
        assert "[Split]" not in str(exc)
