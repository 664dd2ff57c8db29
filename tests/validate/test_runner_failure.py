"""A stage's artifact that its runner can't run on an input the reference ran fails that stage's
parity (exit 5), naming the input set, its shapes, the runner and the op or kernel that failed;
never an input error, nor a bare tool failure (it was exit 9: "the CoreML package can't be run
by MIL evaluator for parity"). Real onnxruntime and the real MIL evaluator on a written package."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import unframe
from unframe.errors import ParityError
from unframe.validate.compare import compare
from unframe.validate.onnxruntime import onnx_runner

F = TensorProto.FLOAT


def _model(nodes, inits, batch: int | str = "N") -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [batch, 4])],
                          [helper.make_tensor_value_info("y", F, [batch, 3])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _matmul(batch: int | str = "N") -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32), "w")
    return _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [w], batch)


def _feeds() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    return [{"x": rng.standard_normal((n, 4)).astype(np.float32)} for n in (2, 3)]


def test_a_candidate_failing_on_the_second_input_set_fails_the_stage_naming_it() -> None:
    """The candidate reshapes to a fixed batch of 2: onnxruntime refuses the batch of 3."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32), "w")
    fixed = numpy_helper.from_array(np.array([2, 4], np.int64), "fixed")
    candidate = _model([helper.make_node("Reshape", ["x", "fixed"], ["r"]),
                        helper.make_node("MatMul", ["r", "w"], ["y"])], [w, fixed])
    ref = onnx_runner(ir.serde.deserialize_model(_matmul()))
    result = compare(ref, onnx_runner(ir.serde.deserialize_model(candidate)), _feeds(), stage="opset")
    assert not result and result.run_failure
    assert "input set 2 of 2 (x [3, 4])" in result.reason and "Reshape" in result.reason


def test_a_mil_evaluator_kernel_error_on_the_second_batch_is_a_parity_failure(tmp_path: Path) -> None:
    """``static`` freezes the CoreML program to the first sample's batch of 2; the user's second
    sample has a batch of 3, which the MIL evaluator can't run: the kernel's shape check fails."""
    pytest.importorskip("coremltools")
    src = tmp_path / "dyn.onnx"
    onnx.save(_matmul(), src)
    out = tmp_path / "m.mlpackage"
    with pytest.raises(ParityError) as info:
        unframe.convert(src, to="coreml", static=True, sample_inputs=_feeds(), output=out)
    err = info.value
    assert err.exit_code == 5 and not out.exists()
    stage = err.report.first_failure
    assert stage.stage == "backend" and "MIL evaluator" in stage.reason
    assert "input set 2 of 2 (x [3, 4])" in stage.reason
    assert "KernelError" in stage.reason and "MIL op" in stage.reason  # the op and its kernel
    assert "--no-validate" in err.hint and "sample-inputs" not in err.hint  # not the user's input
    assert err.divergence is None  # the locator is not run on an artifact that can't run


def test_static_onnx_to_coreml_draws_one_input_set(tmp_path: Path) -> None:
    """``static`` with inputs unframe draws: the program keeps the first input set's shapes, so no
    second set of other sizes is drawn (one was, and the evaluator failed on it: exit 9)."""
    pytest.importorskip("coremltools")
    src = tmp_path / "dyn.onnx"
    onnx.save(_matmul(), src)
    result = unframe.convert(src, to="coreml", static=True, output=tmp_path / "s.mlpackage")
    stage = result.report.stages[-1]
    assert stage and stage.stage == "backend" and stage.cases == 1 and stage.scale > 0.5
