"""Golden node cases through the pad adapters: each path is converted step by step, checked with the
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
    # below opset 9: Tile blocks, 0/1-product selects, the Slice a Gather; axes by Mul + ReduceSum
    ("test_constant_pad", [7], ()),
    ("test_constant_pad", [8], ()),
    ("test_constant_pad_axes", [7], ()),
    ("test_constant_pad_negative_axes", [7], ()),
    # wrap: a Gather of the wrapped positions (constant), Range/Mod (run-time, from opset 11)
    ("test_wrap_pad", [18, 7], ("pads",)),
    ("test_wrap_pad", [17], ()),
    ("test_wrap_pad", [11], ()),
    # below opset 11: Range as a Loop-made arange, Mod on positions shifted to >= 0
    ("test_wrap_pad", [10], ()),
    ("test_wrap_pad", [9], ()),
    ("test_wrap_pad", [7], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}-{len(p[2])}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"


def _refused(name: str, target: int, reason: str) -> None:
    irm = ir.from_proto(case(name).model)
    with pytest.raises(UnsupportedError, match=reason):
        convert_opset(irm, target)


def test_runtime_pads_of_unknown_rank_refused() -> None:
    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("pads", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    irm = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    with pytest.raises(UnsupportedError, match="run-time pads need a known input rank"):
        convert_opset(irm, 7)


def _pad_model(dtype: int, pads: list[int] | None) -> onnx.ModelProto:
    """Pad-18 of x [None, None] by pads (an input when None) with a run-time value."""
    inputs = [helper.make_tensor_value_info("x", dtype, [None, None]), helper.make_tensor_value_info("v", dtype, [])]
    inits = []
    if pads is None:
        inputs.append(helper.make_tensor_value_info("pads", TensorProto.INT64, [4]))
    else:
        inits.append(helper.make_tensor("pads", TensorProto.INT64, [4], pads))
    graph = helper.make_graph([helper.make_node("Pad", ["x", "pads", "v"], ["y"])], "g", inputs,
                              [helper.make_tensor_value_info("y", dtype, [None, None])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _numpy_pad(x: np.ndarray, pads: list[int], value: np.ndarray) -> np.ndarray:
    for d in range(2):
        b, e = pads[d], pads[d + 2]
        x = np.take(x, np.arange(max(-b, 0), x.shape[d] - max(-e, 0)), axis=d)
        x = np.pad(x, [(max(b, 0), max(e, 0)) if a == d else (0, 0) for a in range(2)], constant_values=value)
    return x


@pytest.mark.parametrize("frozen", [False, True], ids=["runtime", "constant"])
def test_pads_at_7_in_both_runtimes(frozen: bool) -> None:
    """Crops, pads and empty axes on dynamic dims, int32 data (Pad-2 takes floats only, the
    Concat form any dtype): onnxruntime and onnx.reference both give numpy's result."""
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    value = np.asarray(-7, dtype=np.int32)
    for pads in ([1, 0, 2, 3], [-1, -2, 0, 1], [0, -4, 2, 0], [-3, 1, 0, -1], [0, 0, 0, 0]):
        irm = ir.from_proto(_pad_model(TensorProto.INT32, pads if frozen else None))
        convert_opset(irm, 7)
        converted = ir.to_proto(irm)
        onnx.checker.check_model(converted, full_check=True)
        onnx.shape_inference.infer_shapes(converted, check_type=True, strict_mode=True)
        feeds = {"x": x, "v": value} | ({} if frozen else {"pads": np.asarray(pads, dtype=np.int64)})
        want = _numpy_pad(x, pads, value)
        session = ort.InferenceSession(converted.SerializeToString(), providers=["CPUExecutionProvider"])
        for got in (session.run(None, feeds)[0], ReferenceEvaluator(converted).run(None, feeds)[0]):
            assert got.shape == want.shape and np.array_equal(got, want), pads


def test_wrap_of_unknown_rank_refused() -> None:
    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads"], ["y"], mode="wrap")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("pads", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    irm = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]))
    with pytest.raises(UnsupportedError, match="mode='wrap' needs a known input rank"):
        convert_opset(irm, 7)


def test_runtime_wrap_at_7_in_both_runtimes() -> None:
    """Pads longer than the axis (several laps), crops, and no padding: both runtimes give the
    original's result."""
    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads"], ["y"], mode="wrap")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None]),
         helper.make_tensor_value_info("pads", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    irm = ir.from_proto(model)
    convert_opset(irm, 7)
    converted = ir.to_proto(irm)
    onnx.checker.check_model(converted, full_check=True)
    onnx.shape_inference.infer_shapes(converted, check_type=True, strict_mode=True)
    original = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    session = ort.InferenceSession(converted.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for pads in ([7, 0, 2, 9], [-1, 5, 0, -2], [0, 0, 0, 0], [3, -3, -1, 4]):
        feeds = {"x": x, "pads": np.asarray(pads, dtype=np.int64)}
        want = original.run(None, feeds)[0]
        for got in (session.run(None, feeds)[0], ReferenceEvaluator(converted).run(None, feeds)[0]):
            assert got.shape == want.shape and np.array_equal(got, want), pads


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
