"""The 16-bit check can't hide an error: its default tolerance is of the output's scale (an
absolute 0.02 passed an error of a fifth of an output of scale 0.1) and never reaches a tenth of
it; a reference spread over no more than the stage's tolerance is weak (a constant would pass);
and a classifier-like output whose top-1 agrees on fewer than half its rows fails, whatever its
absolute error (Keras Xception's softmax of 1/1000 + <1e-7 passed CoreML with 0 % top-1).
Real onnxruntime on both sides, or onnxruntime against the MIL evaluator on a written package."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import unframe
from unframe.converters.base import Target
from unframe.converters.registry import BACKENDS
from unframe.errors import ParityError
from unframe.validate import tolerances
from unframe.validate.compare import compare, degenerate
from unframe.validate.onnxruntime import onnx_runner

F = TensorProto.FLOAT
RNG = np.random.default_rng(7)
W = (RNG.standard_normal((16, 10)) * 0.009).astype(np.float32)  # outputs of scale ~0.1
FEEDS = [{"x": RNG.standard_normal((4, 16)).astype(np.float32)} for _ in range(2)]

# the 16-bit targets: CoreML's fp16 default, ONNX and TensorRT with --precision fp16
SIXTEEN_BIT = [("coreml", {"precision": "fp16"}), ("onnx", {"precision": "fp16"}),
               ("tensorrt", {"precision": "fp16"})]


def _proto(nodes, inits, out: str = "y", classes: int = 10, features: int = 16) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["N", features])],
                          [helper.make_tensor_value_info(out, F, ["N", classes])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _linear(gain: float = 1.0) -> ir.Model:
    """y = (x @ W) * gain: gain 1.1 is the reference with an error of a tenth of every value."""
    w = numpy_helper.from_array(W, "w")
    g = numpy_helper.from_array(np.array(gain, np.float32), "gain")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["z"]), helper.make_node("Mul", ["z", "gain"], ["y"])]
    return ir.serde.deserialize_model(_proto(nodes, [w, g]))


def _tolerance_of(backend: str, options: dict) -> object:
    be, target = BACKENDS.get(backend), Target(backend, None, dict(options))
    return lambda dt: be.tolerance(dt, target)


@pytest.mark.parametrize(("backend", "options"), SIXTEEN_BIT, ids=[b for b, _ in SIXTEEN_BIT])
def test_a_tenth_error_on_an_output_of_scale_0_1_fails_at_16_bits(backend: str, options: dict) -> None:
    ref = onnx_runner(_linear())
    fn = _tolerance_of(backend, options)
    wrong = compare(ref, onnx_runner(_linear(1.1)), FEEDS, stage="backend", default_fn=fn)
    assert 0.07 < wrong.scale < 0.13  # the output this is about
    assert not wrong and "of the output scale" in wrong.reason
    close = compare(ref, onnx_runner(_linear(1.01)), FEEDS, stage="backend", default_fn=fn)
    assert close, close.reason  # a 1 % error: what 16-bit compute leaves, still passes


def test_no_rounding_floor_lets_a_tenth_error_pass() -> None:
    """The measured rounding floor may stand in for the default (up to a tenth of the scale,
    validate.rounding); the allowance is still capped below a tenth."""
    ref, fn = onnx_runner(_linear()), _tolerance_of("coreml", {"precision": "fp16"})
    scale = float(np.max(np.abs(ref.run(FEEDS[0])["y"])))
    floored = compare(ref, onnx_runner(_linear(1.1)), FEEDS[:1], stage="backend", default_fn=fn,
                      floors={"y": 0.1 * scale})
    assert not floored and "capped at 8% of the scale" in floored.reason
    assert compare(ref, onnx_runner(_linear(1.05)), FEEDS[:1], stage="backend", default_fn=fn,
                   floors={"y": 0.1 * scale})  # the floor does raise the allowance below the cap
    user = compare(ref, onnx_runner(_linear(1.1)), FEEDS[:1], 0.05, stage="backend", default_fn=fn)
    assert user  # a user's --atol stays absolute and is not capped


def test_a_small_scale_output_converts_to_coreml_fp16(tmp_path: Path) -> None:
    """The stricter default still passes a real fp16 program on an output of scale ~0.1."""
    pytest.importorskip("coremltools")
    w = numpy_helper.from_array(W, "w")
    onnx.save(_proto([helper.make_node("MatMul", ["x", "w"], ["z"]), helper.make_node("Tanh", ["z"], ["y"])],
                     [w]), tmp_path / "small.onnx")
    result = unframe.convert(tmp_path / "small.onnx", to="coreml", output=tmp_path / "s.mlpackage")
    stage = result.report.stages[-1]
    assert stage and stage.stage == "backend" and 0.05 < stage.scale < 0.5 and not stage.weak
    assert stage.rel_to_scale < tolerances.MAX_16BIT_SHARE


def _uniform_softmax(tmp: Path) -> Path:
    """Softmax over 1000 classes of logits of order 1e-4: every value 1/1000 within 1e-5, the
    output of an image classifier built with random weights (Keras applications, weights=None)."""
    w = numpy_helper.from_array((np.random.default_rng(0).standard_normal((64, 1000)) * 1e-4).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["z"]), helper.make_node("Softmax", ["z"], ["probs"], axis=-1)]
    path = tmp / "uniform.onnx"
    onnx.save(_proto(nodes, [w], "probs", 1000, 64), path)
    return path


def test_a_reference_spread_within_the_tolerance_is_weak(tmp_path: Path) -> None:
    src = _uniform_softmax(tmp_path)
    stage = unframe.convert_opset(src, 21).report.stages[0]
    assert stage and stage.weak and "a constant would pass" in stage.weak[0]
    with pytest.raises(ParityError):
        unframe.convert_opset(src, 21, strict_parity=True, output=tmp_path / "strict.onnx")
    values = [np.full((2, 5), 0.001) + np.random.default_rng(1).random((2, 5)) * 1e-7]
    assert degenerate(values, allowed=1e-4) and not degenerate(values, allowed=1e-8)


def test_a_classifier_whose_top1_disagrees_fails_at_coreml_fp16(tmp_path: Path) -> None:
    """fp16 can't tell 1/1000 from 1/1000 + 1e-7: every value is within the tolerance, but the
    winning class is another on most rows."""
    pytest.importorskip("coremltools")
    out = tmp_path / "u.mlpackage"
    with pytest.raises(ParityError) as info:
        unframe.convert(_uniform_softmax(tmp_path), to="coreml", output=out)
    stage = info.value.report.first_failure
    assert stage.stage == "backend" and "top-1 agrees on" in stage.reason and "floor of 50%" in stage.reason
    probs = stage.outputs[0]
    assert probs.top1 < tolerances.TOP1_FLOOR and probs.max_abs < probs.allowed  # within the tolerance
    assert "--precision fp32" in info.value.hint and not out.exists()


def test_a_classifier_with_real_margins_passes_top1_at_coreml_fp16(tmp_path: Path) -> None:
    pytest.importorskip("coremltools")
    w = numpy_helper.from_array((np.random.default_rng(2).standard_normal((16, 10)) * 0.8).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["z"]), helper.make_node("Softmax", ["z"], ["probs"], axis=-1)]
    onnx.save(_proto(nodes, [w], "probs"), tmp_path / "clf.onnx")
    stage = unframe.convert(tmp_path / "clf.onnx", to="coreml", output=tmp_path / "c.mlpackage").report.stages[-1]
    assert stage and stage.top1 == 1.0 and not stage.weak
