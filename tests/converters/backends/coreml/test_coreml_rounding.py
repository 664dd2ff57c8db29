"""fp16 parity is held to what fp16 rounding alone costs the graph (unframe/validate/rounding.py):
a model whose output is a small difference of large sums converts, with the reason in its report;
the error it is allowed is the graph's own, measured by onnxruntime, not a looser default."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import unframe
from unframe.validate.rounding import MAX_SHARE, WIDEN, rounding_error

pytestmark = pytest.mark.usefixtures("coreml")


def _cancelling(k: float) -> onnx.ModelProto:
    """y = h @ a - h @ (a * (1 + k)) = -k * (h @ a), h = x @ W: the output is k times smaller than
    the sums it is the difference of, so fp16's rounding of those sums is a large share of it."""
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((8, 64)) * 4).astype(np.float32)
    a = np.abs(rng.standard_normal((64, 3))).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "a"], ["p"]), helper.make_node("MatMul", ["r", "b"], ["q"]),
         helper.make_node("Sub", ["p", "q"], ["y"])], "cancel",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(a, "a"),
         numpy_helper.from_array((a * (1 + k)).astype(np.float32), "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_a_graph_sensitive_to_fp16_rounding_converts_within_its_own_rounding_error(tmp_path: Path):
    path = tmp_path / "cancel.onnx"
    onnx.save(_cancelling(0.02), path)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)}
    result = unframe.convert(str(path), to="coreml", output=str(tmp_path / "m.mlpackage"), sample_inputs=feeds)
    stage = next(s for s in result.report.stages if s.stage == "backend")
    out = stage.outputs[0]
    assert out.scale > 1.0  # an order-one output, not a degenerate one
    # the default fp16 tolerance (0.02 + 0.02 * scale) would have failed it: the floor was needed
    assert out.max_abs > 0.02 + 0.02 * out.scale
    assert 0 < out.rounding <= 0.1 * out.scale and out.max_abs <= out.atol + out.rtol * out.scale
    assert "16-bit rounding error" in stage.summary()


def test_a_graph_that_fp16_rounding_ruins_keeps_the_nodes_it_needs_in_float32(tmp_path: Path):
    """Cancellation 200 times finer: rounding everything moves the output past a tenth of its
    scale, more than parity may allow. The planner keeps the nodes that do it in float32, CoreML
    computes them so, and the package matches; the report names them."""
    proto = _cancelling(1e-4)
    path = tmp_path / "cancel.onnx"
    onnx.save(proto, path)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)}
    everything = rounding_error(ir.serde.deserialize_model(proto), [feeds])
    assert everything is not None and everything.errors["y"] > MAX_SHARE / WIDEN * everything.scales["y"]
    result = unframe.convert(str(path), to="coreml", output=str(tmp_path / "m.mlpackage"), sample_inputs=feeds)
    note = next(n for n in result.flow.notes if "kept in float32" in n)
    assert "rounding alone moved an output" in note
    stage = next(s for s in result.report.stages if s.stage == "backend")
    out = stage.outputs[0]
    assert out.scale > 1e-3 and out.max_abs <= MAX_SHARE * out.scale


def test_compare_holds_a_package_to_the_same_rounding_floor_as_its_conversion(tmp_path: Path):
    """`unframe compare model.onnx model.mlpackage` agrees with the conversion's own parity: the
    package passes, with the floor measured on the ONNX side."""
    path = tmp_path / "cancel.onnx"
    onnx.save(_cancelling(0.02), path)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)}
    unframe.convert(str(path), to="coreml", output=str(tmp_path / "m.mlpackage"), sample_inputs=feeds)
    result = unframe.compare(str(path), str(tmp_path / "m.mlpackage"), sample_inputs=feeds)
    out = result.parity.outputs[0]
    assert result and out.rounding > 0 and out.max_abs > 0.02 + 0.02 * out.scale
