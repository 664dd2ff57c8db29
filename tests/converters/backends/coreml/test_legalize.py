"""Dtype legalization (legalize.py): ONNX types a MIL op refuses move to one it takes and back,
checked against onnxruntime on the saved package; 64-bit constants need a range proof; float
constants fit fp16 compute; and `check` runs the same translation `convert` does, so a node that
can't be translated is a blocker (exit 4) in both."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from coreml_helpers import convert_and_compare
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import unframe
from unframe.converters.backends.coreml.backend import CoreMLBackend
from unframe.converters.backends.coreml.legalize import MIL_INPUTS, legalize
from unframe.converters.backends.coreml.ops import TRANSLATORS
from unframe.converters.base import Target
from unframe.errors import UnsupportedError

pytestmark = pytest.mark.usefixtures("coreml")
RNG = np.random.default_rng(0)


def _model(nodes: list, inputs: list, outputs: list, inits: list | None = None) -> ir.Model:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits or [])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    proto.ir_version = 10
    return ir.serde.deserialize_model(proto)


def _vi(name: str, dt: int, shape: list | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dt, shape)


def _mask(shape: tuple[int, ...]) -> np.ndarray:
    mask = RNG.random(shape) < 0.5
    mask.flat[0], mask.flat[-1] = True, False  # both values, whatever the draw
    return mask


def _ints(shape: tuple[int, ...], low: int = -40, high: int = 40, dtype: type = np.int64) -> np.ndarray:
    return RNG.integers(low, high, shape).astype(dtype)


# (id, nodes, inputs, outputs, initializers, feeds): each node takes a type its MIL op refuses
CASES = [
    ("gathernd-bool-mask",  # the Hugging Face attention-mask pattern that failed with exit 9
     [helper.make_node("GatherND", ["m", "idx"], ["y"])],
     [_vi("m", T.BOOL, [2, 6])], [_vi("y", T.BOOL, [3])],
     [numpy_helper.from_array(np.array([[0, 1], [1, 5], [0, 0]], np.int64), "idx")],
     {"m": _mask((2, 6))}),
    ("gather-bool",
     [helper.make_node("Gather", ["m", "idx"], ["y"], axis=1)],
     [_vi("m", T.BOOL, [3, 5])], [_vi("y", T.BOOL, [3, 4])],
     [numpy_helper.from_array(np.array([4, 0, -1, 2], np.int64), "idx")],
     {"m": _mask((3, 5))}),
    ("reducemax-bool",
     [helper.make_node("ReduceMax", ["m", "axes"], ["y"], keepdims=0)],
     [_vi("m", T.BOOL, [4, 5])], [_vi("y", T.BOOL, [4])],
     [numpy_helper.from_array(np.array([1], np.int64), "axes")],
     {"m": _mask((4, 5))}),
    ("equal-bool",
     [helper.make_node("Equal", ["a", "b"], ["y"])],
     [_vi("a", T.BOOL, [6]), _vi("b", T.BOOL, [6])], [_vi("y", T.BOOL, [6])], [],
     {"a": _mask((6,)), "b": _mask((6,))}),
    ("expand-bool",
     [helper.make_node("Expand", ["m", "shape"], ["y"])],
     [_vi("m", T.BOOL, [1, 5])], [_vi("y", T.BOOL, [3, 5])],
     [numpy_helper.from_array(np.array([3, 5], np.int64), "shape")],
     {"m": _mask((1, 5))}),
    ("relu-int32",
     [helper.make_node("Relu", ["x"], ["y"])],
     [_vi("x", T.INT32, [3, 4])], [_vi("y", T.INT32, [3, 4])], [],
     {"x": _ints((3, 4), dtype=np.int32)}),
    ("pad-int32",
     [helper.make_node("Pad", ["x", "pads", "v"], ["y"], mode="constant")],
     [_vi("x", T.INT32, [2, 3])], [_vi("y", T.INT32, [2, 6])],
     [numpy_helper.from_array(np.array([0, 1, 0, 2], np.int64), "pads"),
      numpy_helper.from_array(np.array(7, np.int32), "v")],
     {"x": _ints((2, 3), dtype=np.int32)}),
    ("pad-bool-edge",
     [helper.make_node("Pad", ["m", "pads"], ["y"], mode="edge")],
     [_vi("m", T.BOOL, [2, 3])], [_vi("y", T.BOOL, [4, 3])],
     [numpy_helper.from_array(np.array([1, 0, 1, 0], np.int64), "pads")],
     {"m": _mask((2, 3))}),
    ("depth-to-space-uint8",
     [helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2)],
     [_vi("x", T.UINT8, [1, 4, 2, 2])], [_vi("y", T.UINT8, [1, 1, 4, 4])], [],
     {"x": _ints((1, 4, 2, 2), 0, 255, np.uint8)}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_refused_types_move_and_match_onnxruntime(case: tuple, precision: str, tmp_path: Path) -> None:
    _, nodes, inputs, outputs, inits, feeds = case
    model = _model(nodes, inputs, outputs, inits)
    artifact, parity = convert_and_compare(model, [feeds], tmp_path, precision=precision)
    assert parity.status == "passed", parity.reason
    assert any("computed in a type their MIL op takes" in n for n in artifact.notes), artifact.notes


def test_the_pass_wraps_the_node_and_keeps_names_and_types() -> None:
    model = _model([helper.make_node("GatherND", ["m", "idx"], ["y"], name="pick")],
                   [_vi("m", T.BOOL, [2, 6])], [_vi("y", T.BOOL, [3])],
                   [numpy_helper.from_array(np.array([[0, 1], [1, 5], [0, 0]], np.int64), "idx")])
    done = legalize(model, ios=16)
    ops = [n.op_type for n in model.graph]
    assert ops == ["Cast", "GatherND", "Cast"], ops
    pick = next(n for n in model.graph if n.op_type == "GatherND")
    assert pick.inputs[0].dtype == ir.DataType.INT32 and pick.outputs[0].dtype == ir.DataType.INT32
    out = model.graph.outputs[0]
    assert (out.name, out.dtype) == ("y", ir.DataType.BOOL)
    assert out.producer() is not None and out.producer().op_type == "Cast"
    assert done.moved == ["GatherND pick bool -> int32"]


def test_types_the_op_takes_are_left_alone() -> None:
    model = _model([helper.make_node("GatherND", ["x", "idx"], ["y"])],
                   [_vi("x", T.FLOAT, [2, 6])], [_vi("y", T.FLOAT, [3])],
                   [numpy_helper.from_array(np.array([[0, 1], [1, 5], [0, 0]], np.int64), "idx")])
    assert not legalize(model, ios=16).moved
    assert [n.op_type for n in model.graph] == ["GatherND"]


def test_the_table_names_real_translators_and_mil_inputs() -> None:
    """Every entry maps an op CoreML translates to an input coremltools' op spec states a
    domain for, at the oldest and newest targets (a rotten entry would silently do nothing)."""
    from unframe.converters.backends.coreml.legalize import _domain

    for op, (mil_op, params) in MIL_INPUTS.items():
        assert op in TRANSLATORS, op
        for param in params.values():
            for ios in (16, 18):
                assert _domain(mil_op, param, ios), (op, mil_op, param, ios)


# -- 64-bit integers -----------------------------------------------------------------------------

def test_a_64_bit_constant_beyond_int32_is_a_blocker_in_check_and_convert(tmp_path: Path) -> None:
    model = _model([helper.make_node("Add", ["x", "big"], ["y"], name="add_big")],
                   [_vi("x", T.INT64, [3])], [_vi("y", T.INT64, [3])],
                   [numpy_helper.from_array(np.array([1, 2, 2**40], np.int64), "big")])
    backend, target = CoreMLBackend(), Target("coreml")
    blockers = backend.check(model, target)
    assert len(blockers) == 1 and blockers[0].node == "add_big" and "int32" in blockers[0].reason
    with pytest.raises(UnsupportedError) as err:
        backend.convert(model, target, tmp_path)
    assert err.value.exit_code == 4


def test_open_slice_ends_saturate_without_a_blocker(tmp_path: Path) -> None:
    model = _model([helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"])],
                   [_vi("x", T.FLOAT, [4, 6])], [_vi("y", T.FLOAT, [4, 4])],
                   [numpy_helper.from_array(np.array([2], np.int64), "starts"),
                    numpy_helper.from_array(np.array([2**63 - 1], np.int64), "ends"),
                    numpy_helper.from_array(np.array([1], np.int64), "axes")])
    feeds = {"x": RNG.normal(size=(4, 6)).astype(np.float32)}
    _, parity = convert_and_compare(model, [feeds], tmp_path, precision="fp32")
    assert parity.status == "passed", parity.reason


def test_open_slice_ends_built_by_concat_saturate_without_a_blocker() -> None:
    """TorchScript exports build ends as Concat(Unsqueeze(INT64_MAX), ...): still safe."""
    model = _model([helper.make_node("Unsqueeze", ["open", "zero"], ["open1"]),
                    helper.make_node("Concat", ["open1", "open1"], ["ends"], axis=0),
                    helper.make_node("Slice", ["x", "starts", "ends"], ["y"])],
                   [_vi("x", T.FLOAT, [4, 6])], [_vi("y", T.FLOAT, [3, 5])],
                   [numpy_helper.from_array(np.array(2**63 - 1, np.int64), "open"),
                    numpy_helper.from_array(np.array([0], np.int64), "zero"),
                    numpy_helper.from_array(np.array([1, 1], np.int64), "starts")])
    assert legalize(model, ios=16).blockers == []
    unsafe = _model([helper.make_node("Unsqueeze", ["open", "zero"], ["open1"]),
                     helper.make_node("Add", ["x", "open1"], ["y"], name="add_open")],
                    [_vi("x", T.INT64, [1])], [_vi("y", T.INT64, [1])],
                    [numpy_helper.from_array(np.array(2**63 - 1, np.int64), "open"),
                     numpy_helper.from_array(np.array([0], np.int64), "zero")])
    assert [b.node for b in legalize(unsafe, ios=16).blockers] == ["add_open"]


# -- float constants under fp16 compute ----------------------------------------------------------

def test_a_float32_min_mask_keeps_fully_masked_rows_finite_in_fp16(tmp_path: Path) -> None:
    """scores + where(keep, 0, finfo(float32).min), softmax: a row with nothing kept is uniform
    in float32; without saturation fp16 turns the constant into -inf and the row into NaN."""
    lowest = np.finfo(np.float32).min
    model = _model(
        [helper.make_node("Where", ["keep", "zero", "lowest"], ["bias"]),
         helper.make_node("Add", ["scores", "bias"], ["masked"]),
         helper.make_node("Softmax", ["masked"], ["y"], axis=-1)],
        [_vi("scores", T.FLOAT, [3, 5]), _vi("keep", T.BOOL, [3, 5])], [_vi("y", T.FLOAT, [3, 5])],
        [numpy_helper.from_array(np.array(0, np.float32), "zero"),
         numpy_helper.from_array(np.array(lowest, np.float32), "lowest")])
    keep = _mask((3, 5))
    keep[1] = False  # a fully masked row
    feeds = {"scores": RNG.normal(size=(3, 5)).astype(np.float32) * 3, "keep": keep}
    artifact, parity = convert_and_compare(model, [feeds], tmp_path, precision="fp16")
    assert parity.status == "passed", parity.reason
    assert any("saturated" in n for n in artifact.notes), artifact.notes


# -- check == convert ----------------------------------------------------------------------------

def test_a_node_that_fails_to_translate_is_a_blocker_of_check_and_convert(tmp_path: Path) -> None:
    """Pad's pads computed at run time pass every static check; only translating finds out."""
    model = _model([helper.make_node("Shape", ["x"], ["s"]),
                    helper.make_node("Concat", ["s", "s"], ["pads"], axis=0),
                    helper.make_node("Pad", ["x", "pads"], ["y"], name="pad_dynamic")],
                   [_vi("x", T.FLOAT, ["n", 3])], [_vi("y", T.FLOAT, None)])
    path = tmp_path / "pad.onnx"
    onnx.save(ir.to_proto(model), path)
    checked = unframe.check(path, to="coreml")
    assert not checked and [b.node for b in checked.blockers] == ["pad_dynamic"], checked.blockers
    with pytest.raises(UnsupportedError) as err:
        unframe.convert(path, to="coreml", output=tmp_path / "pad.mlpackage")
    assert err.value.exit_code == 4
    assert [b["node"] for b in err.value.details["blockers"]] == ["pad_dynamic"]
    assert not (tmp_path / "pad.mlpackage").exists()


def test_check_does_not_change_the_model() -> None:
    model = _model([helper.make_node("GatherND", ["m", "idx"], ["y"])],
                   [_vi("m", T.BOOL, [2, 6])], [_vi("y", T.BOOL, [3])],
                   [numpy_helper.from_array(np.array([[0, 1]], np.int64), "idx")])
    before = ir.to_proto(model).SerializeToString()
    assert CoreMLBackend().check(model, Target("coreml")) == []
    assert ir.to_proto(model).SerializeToString() == before
