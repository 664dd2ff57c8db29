"""ONNX files: parity fills a graph's dynamic dims with 2, then draws a second input set with 3.
That second size is unframe's guess; a source graph that can't run it (dims that must agree, a
fixed-size reshape) has it dropped with a note, never an exit 3 that blames the user. Exit 3
stays for a source that can't run the user's own samples or the first input set of its declared
shapes. Real onnxruntime on both sides."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import unframe
from unframe.cli.main import cli
from unframe.errors import InputError

F = TensorProto.FLOAT


def _save(tmp: Path, name: str, nodes, inits, out_shape) -> Path:
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", F, ["a", 4])],
                          [helper.make_tensor_value_info("y", F, out_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp / f"{name}.onnx"
    onnx.save(m, path)
    return path


def _broadcast_partner(tmp: Path, rows: int = 2) -> Path:
    """y = x + c with c of shape [rows, 4]: the dim 'a' must be ``rows`` (or 1)."""
    c = numpy_helper.from_array(np.random.default_rng(0).standard_normal((rows, 4)).astype(np.float32), "c")
    return _save(tmp, f"partner{rows}", [helper.make_node("Add", ["x", "c"], ["y"])], [c], ["a", 4])


def _fixed_reshape(tmp: Path) -> Path:
    """Reshape to a fixed [2, 4], then MatMul: only a batch of 2 runs."""
    shape = numpy_helper.from_array(np.array([2, 4], np.int64), "shape")
    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("MatMul", ["r", "w"], ["y"])]
    return _save(tmp, "reshape", nodes, [shape, w], [2, 3])


@pytest.mark.parametrize("build", [_broadcast_partner, _fixed_reshape])
def test_a_second_input_set_the_source_cant_run_is_dropped_with_a_note(tmp_path: Path, build) -> None:
    result = unframe.convert_opset(build(tmp_path), 21, output=tmp_path / "out.onnx")
    stage = result.report.stages[0]
    assert stage and stage.cases == 1 and stage.scale > 0.5 and not stage.weak
    assert "drew with other sizes (x [3, 4])" in stage.feeds_note
    assert any("drew with other sizes" in n for n in result.notes)
    assert (tmp_path / "out.onnx").exists()


def test_the_backend_stage_gets_the_kept_input_set(tmp_path: Path) -> None:
    """The opset stage drops the set; the CoreML stage after it compares on the one kept."""
    pytest.importorskip("coremltools")
    result = unframe.convert(_broadcast_partner(tmp_path), to="coreml", output=tmp_path / "m.mlpackage")
    assert [s.cases for s in result.report.stages] == [1, 1] and result.report


def test_a_source_that_cant_run_its_declared_shapes_is_still_bad_input(tmp_path: Path) -> None:
    """c is [5, 4]: the first input set (a = 2) fails in the source itself: exit 3."""
    src = _broadcast_partner(tmp_path, rows=5)
    with pytest.raises(InputError):
        unframe.convert_opset(src, 21, output=tmp_path / "bad.onnx")
    res = CliRunner().invoke(cli, ["opset", str(src), "--to", "21", "-o", str(tmp_path / "bad.onnx")])
    assert res.exit_code == 3 and "the source model" in res.stderr
    assert not (tmp_path / "bad.onnx").exists()


def test_the_users_own_samples_the_source_cant_run_are_still_bad_input(tmp_path: Path) -> None:
    src = _broadcast_partner(tmp_path)
    samples = [{"x": np.ones((2, 4), np.float32)}, {"x": np.ones((3, 4), np.float32)}]
    with pytest.raises(InputError):
        unframe.convert_opset(src, 21, sample_inputs=samples, output=tmp_path / "user.onnx")
