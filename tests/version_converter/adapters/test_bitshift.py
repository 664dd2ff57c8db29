"""BitShift 28->27 (signed T computed on uint64 bits): golden node cases through the targets, and an
exhaustive int8 / edge-case int64 comparison with BitShift-28's definition in onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from adapter_cases import check_path
from onnx import helper

from unframe.errors import UnsupportedError
from unframe.version_converter import convert_opset

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_bitshift_left_int8", [27, 11], ()),
    ("test_bitshift_left_int8_overflow", [25], ()),
    ("test_bitshift_left_int8_shift_ge_width", [21, 13], ()),
    ("test_bitshift_left_int8_negative_shift", [11], ()),
    ("test_bitshift_left_int16", [19], ()),
    ("test_bitshift_left_int32_overflow", [11], ()),
    ("test_bitshift_left_int32_shift_ge_width", [15], ()),
    ("test_bitshift_left_int64", [11], ()),
    ("test_bitshift_right_int8_negative_input", [27, 11], ()),
    ("test_bitshift_right_int8_shift_ge_width", [17], ()),
    ("test_bitshift_right_int8_negative_shift", [11], ()),
    ("test_bitshift_right_int16", [23], ()),
    ("test_bitshift_right_int32_negative_input", [13], ()),
    ("test_bitshift_right_int32_negative_shift", [11], ()),
    ("test_bitshift_right_int64", [11], ()),
    ("test_bitshift_right_uint32", [11], ()),  # unsigned: the generic step
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert "BitShift_28_27" in fired


def _expected(x: np.ndarray, y: np.ndarray, bits: int, direction: str) -> list[int]:
    """BitShift-28 on signed ints, from its definition."""
    out = []
    for a, b in zip(x.tolist(), y.tolist(), strict=True):
        if b < 0 or b >= bits:
            out.append(-1 if direction == "RIGHT" and a < 0 else 0)
        elif direction == "RIGHT":
            out.append(a >> b)
        else:
            v = (a << b) & ((1 << bits) - 1)
            out.append(v - (1 << bits) if v >> (bits - 1) else v)
    return out


def _converted(dtype: np.dtype, direction: str, shapes: tuple[list, list, list], target: int) -> onnx.ModelProto:
    elem = helper.np_dtype_to_tensor_dtype(dtype)
    graph = helper.make_graph(
        [helper.make_node("BitShift", ["x", "y"], ["z"], direction=direction)], "g",
        [helper.make_tensor_value_info("x", elem, shapes[0]), helper.make_tensor_value_info("y", elem, shapes[1])],
        [helper.make_tensor_value_info("z", elem, shapes[2])])
    model = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 28)]))
    convert_opset(model, target)
    proto = ir.to_proto(model)
    onnx.checker.check_model(proto, full_check=True)
    return proto


def _run(proto: onnx.ModelProto, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x, "y": y})[0]


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize(("dtype", "ys"), [
    (np.int8, np.arange(-128, 128)),
    (np.int64, np.array([-(2**63), -65, -1, 0, 1, 31, 62, 63, 64, 65, 2**63 - 1])),
])
def test_signed_shifts_match_the_definition(direction: str, dtype: type, ys: np.ndarray) -> None:
    info = np.iinfo(dtype)
    xs = np.unique(np.concatenate([np.arange(-128, 128), [info.min, info.min + 1, info.max - 1, info.max]]))
    x, y = (a.ravel().astype(dtype) for a in np.meshgrid(xs, ys))
    proto = _converted(np.dtype(dtype), direction, (["n"], ["n"], ["n"]), 11)
    got = _run(proto, x, y)
    assert got.dtype == dtype
    assert got.tolist() == _expected(x, y, 8 * np.dtype(dtype).itemsize, direction)


def test_broadcasting_is_kept() -> None:
    proto = _converted(np.dtype(np.int16), "RIGHT", ([3, 1], [4], [3, 4]), 13)
    x = np.array([[-300], [7], [-1]], dtype=np.int16)
    y = np.array([0, 2, 15, -4], dtype=np.int16)
    got = _run(proto, x, y)
    want = [_expected(np.repeat(row, 4), y, 16, "RIGHT") for row in x[:, 0]]
    assert got.tolist() == want


def test_signed_bitshift_below_11_is_refused() -> None:
    graph = helper.make_graph(
        [helper.make_node("BitShift", ["x", "y"], ["z"], direction="LEFT")], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.INT32, [2]),
         helper.make_tensor_value_info("y", onnx.TensorProto.INT32, [2])],
        [helper.make_tensor_value_info("z", onnx.TensorProto.INT32, [2])])
    model = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 28)]))
    with pytest.raises(UnsupportedError, match="BitShift does not exist before opset 11"):
        convert_opset(model, 10)
