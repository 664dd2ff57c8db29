"""Parity that can't be vacuous: a degenerate reference (near zero, constant, non-finite) makes
unframe draw other inputs; if it stays degenerate the stage is weak, and --strict-parity fails it.
Real onnxruntime on both sides (an opset conversion), models built here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import unframe
from unframe.cli.main import cli
from unframe.errors import ParityError
from unframe.validate.compare import compare_arrays, degenerate, top1_agreement
from unframe.validate.inputs import alternative_feeds

F = TensorProto.FLOAT


def _save(tmp: Path, name: str, nodes, inits=(), shape=(4, 6), opset=13) -> Path:
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", F, list(shape))],
                          [helper.make_tensor_value_info("y", F, list(shape))], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    path = tmp / f"{name}.onnx"
    onnx.save(m, path)
    return path


def _tiny_output(tmp: Path) -> Path:
    """y = x * 1e-13: what random-init networks hand parity."""
    c = numpy_helper.from_array(np.array(1e-13, np.float32), "c")
    return _save(tmp, "tiny", [helper.make_node("Mul", ["x", "c"], ["y"])], [c])


def _clipped(tmp: Path) -> Path:
    """y = Clip(x, 50, 51): one value everywhere for every input unframe draws (normal, [0, 1],
    normal with std 10), informative only for inputs in [50, 51]."""
    lo = numpy_helper.from_array(np.array(50.0, np.float32), "lo")
    hi = numpy_helper.from_array(np.array(51.0, np.float32), "hi")
    return _save(tmp, "clipped", [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], [lo, hi])


def test_near_zero_reference_is_weak_and_strict_fails(tmp_path: Path) -> None:
    src = _tiny_output(tmp_path)
    result = unframe.convert_opset(src, 17)
    stage = result.report.stages[0]
    assert stage and stage.weak and "near zero" in stage.weak[0]
    assert "WEAK" in stage.summary()
    assert json.loads(result.report.to_json())["stages"][0]["weak"]
    with pytest.raises(ParityError) as info:
        unframe.convert_opset(src, 17, strict_parity=True, output=tmp_path / "strict.onnx")
    assert "weak" in str(info.value) and not (tmp_path / "strict.onnx").exists()
    res = CliRunner().invoke(cli, ["opset", str(src), "--to", "17", "-o", str(tmp_path / "o.onnx"),
                                   "--strict-parity"])
    assert res.exit_code == 5 and "near zero" in res.stderr


def test_constant_reference_is_weak_until_the_right_inputs_are_given(tmp_path: Path) -> None:
    src = _clipped(tmp_path)
    weak = unframe.convert_opset(src, 17).report.stages[0]
    assert weak.weak and "one value everywhere" in weak.weak[0]
    right = {"x": np.random.default_rng(0).uniform(50, 51, (4, 6)).astype(np.float32)}
    np.savez(tmp_path / "right.npz", **right)
    good = unframe.convert_opset(src, 17, sample_inputs=str(tmp_path / "right.npz"),
                                 strict_parity=True).report.stages[0]
    assert good and not good.weak and good.scale > 50


def test_other_inputs_can_make_a_constant_reference_informative(tmp_path: Path) -> None:
    """Clip(x, 5, 6) is one value for standard-normal inputs; drawn inputs on a wider scale reach it."""
    lo = numpy_helper.from_array(np.array(5.0, np.float32), "lo")
    hi = numpy_helper.from_array(np.array(6.0, np.float32), "hi")
    src = _save(tmp_path, "clip56", [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], [lo, hi])
    stage = unframe.convert_opset(src, 17, strict_parity=True).report.stages[0]
    assert stage and not stage.weak and "std 10" in stage.feeds_note


def test_non_finite_reference_draws_other_inputs_and_passes(tmp_path: Path) -> None:
    """Sqrt of standard-normal inputs is NaN for half of them; inputs in [0, 1] exercise it."""
    src = _save(tmp_path, "sqrt", [helper.make_node("Sqrt", ["x"], ["y"])])
    result = unframe.convert_opset(src, 17, strict_parity=True)
    stage = result.report.stages[0]
    assert stage and not stage.weak
    assert "uniform in [0, 1]" in stage.feeds_note
    assert any("drew floats uniform" in n for n in result.notes)


def test_a_wrong_candidate_hidden_by_a_degenerate_reference_is_found_with_other_inputs() -> None:
    """A reference of zeros can't tell Relu from Identity; inputs that exercise it can."""
    zeros = np.zeros((2, 3), np.float32)
    assert degenerate([zeros]) and compare_arrays("y", zeros, zeros, 1e-4, 1e-3).passed
    x = np.array([[-1.0, 2.0, -3.0]], np.float32)
    assert not compare_arrays("y", np.maximum(x, 0), x, 1e-4, 1e-3).passed
    assert degenerate([np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)])
    assert degenerate([np.array([1.0, np.nan], np.float32)]).startswith("the reference is not finite")
    assert degenerate([np.array([1, 1], np.int64)]) == ""  # labels are compared exactly


def test_top1_agreement_for_classifier_outputs() -> None:
    ref = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]], np.float32)
    out = ref.copy()
    out[3] = [0.4, 0.6]
    assert top1_agreement(ref, out) == pytest.approx(0.75)
    assert top1_agreement(np.ones((2, 3, 4, 5), np.float32), np.ones((2, 3, 4, 5), np.float32)) is None


def test_token_ids_are_drawn_within_the_vocabulary() -> None:
    import onnx_ir as ir

    table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((37, 4)).astype(np.float32), "emb")
    g = helper.make_graph([helper.make_node("Gather", ["emb", "ids"], ["y"])], "g",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 5]),
                           helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [2, 5])],
                          [helper.make_tensor_value_info("y", F, [2, 5, 4])], [table])
    model = ir.serde.deserialize_model(helper.make_model(g))
    like = [{"ids": np.zeros((2, 5), np.int64), "attention_mask": np.zeros((2, 5), np.int64)}]
    for label, feeds in alternative_feeds(model, like):
        assert "vocabulary" in label
        ids = feeds[0]["ids"]
        assert ids.dtype == np.int64 and ids.max() < 37 and len(np.unique(ids)) > 3
        assert set(np.unique(feeds[0]["attention_mask"])) <= {0, 1}


def test_first_feeds_index_a_two_row_table_within_its_rows(tmp_path: Path) -> None:
    """A segment embedding of 2 rows (keras-hub BERT) fed the generated integers 0..2 made
    onnxruntime refuse the source (exit 3); ids that index a table stay within its rows."""
    table = numpy_helper.from_array(np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32), "seg")
    g = helper.make_graph([helper.make_node("Gather", ["seg", "segment_ids"], ["y"])], "g",
                          [helper.make_tensor_value_info("segment_ids", TensorProto.INT64, ["N", 6])],
                          [helper.make_tensor_value_info("y", F, ["N", 6, 4])], [table])
    _assert_opset_parity_runs(g, tmp_path)


def test_ids_through_tf2onnx_negative_index_wrap_stay_within_the_table(tmp_path: Path) -> None:
    """tf2onnx writes GatherV2's indices as ``Add(Cast(x), Mul(Cast(Less(x, 0)), rows))`` (a
    negative index counts from the end): the bound is found through it (keras-hub BERT's opset
    routes were refused with exit 3 until it was)."""
    table = numpy_helper.from_array(np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32), "seg")
    nodes = [helper.make_node("Cast", ["segment_ids"], ["ids64"], to=TensorProto.INT64),
             helper.make_node("Less", ["ids64", "zero"], ["neg"]),
             helper.make_node("Cast", ["neg"], ["neg64"], to=TensorProto.INT64),
             helper.make_node("Mul", ["neg64", "rows"], ["shift"]),
             helper.make_node("Add", ["shift", "ids64"], ["idx"]),
             helper.make_node("Gather", ["seg", "idx"], ["y"])]
    inits = [table, numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(2, np.int64), "rows")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("segment_ids", TensorProto.INT32, ["N", 6])],
                          [helper.make_tensor_value_info("y", F, ["N", 6, 4])], inits)
    _assert_opset_parity_runs(g, tmp_path)


def _assert_opset_parity_runs(g: onnx.GraphProto, tmp_path: Path) -> None:
    """Opset 13 -> 17 with parity: onnxruntime ran both sides, on outputs that vary."""
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    src = tmp_path / "seg.onnx"
    onnx.save(m, src)
    result = unframe.convert_opset(src, 17, output=tmp_path / "seg17.onnx")
    [stage] = [s for s in result.report.stages if s.stage == "opset"]
    assert stage and not stage.weak
