"""``validate.quantized``: an output a DequantizeLinear produced (through ops that only move values)
is compared within one step of its grid; any other output keeps its float tolerance. The steps
are read from the graph's own constant scales."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from unframe.validate import quantized


def _model(tail: str) -> ir.Model:
    """x -> Q(s=0.05, zp=3) -> DQ -> (Reshape | Exp) -> y"""
    scale, zero = numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(np.array(3, np.uint8), "z")
    shape = numpy_helper.from_array(np.array([2, 3], np.int64), "shape")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"])]
    nodes.append(helper.make_node("Reshape", ["d", "shape"], ["y"]) if tail == "reshape"
                 else helper.make_node("Exp", ["d"], ["y"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [scale, zero, shape])
    return ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]))


def test_a_dequantized_output_behind_a_reshape_gets_one_step() -> None:
    model = _model("reshape")
    assert quantized.output_steps(model) == {"y": np.float32(0.05).item()}
    tol, raised = quantized.tolerances(model, {}, 1e-4, 1e-3)
    assert raised == ["y"] and tol["y"][0] == np.float32(0.05).item() * quantized.SLACK and tol["y"][1] == 1e-3


def test_an_output_computed_after_the_dequantization_keeps_its_float_tolerance() -> None:
    model = _model("exp")
    assert quantized.output_steps(model) == {}
    assert quantized.tolerances(model, {"y": (1e-2, 1e-2)}, 1e-4, 1e-3) == ({"y": (1e-2, 1e-2)}, [])


def test_a_larger_given_tolerance_is_not_lowered() -> None:
    tol, raised = quantized.tolerances(_model("reshape"), {"y": (0.5, 0.1)}, 1e-4, 1e-3)
    assert tol == {"y": (0.5, 0.1)} and raised == []
