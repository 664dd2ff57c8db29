"""Tiny seeded models for the OpenVINO backend's tests (outputs of order 1), and how to read an IR."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def openvino_or_skip() -> Any:
    """The openvino module, imported as the backend imports it (telemetry off)."""
    pytest.importorskip("openvino", reason="needs the openvino extra (pip install 'unframe[openvino]')")
    from unframe.converters.backends.openvino.runtime import import_openvino

    return import_openvino()


def cnn_onnx(path: Path, seed: int = 0, batch: str | int = "batch") -> Path:
    """Conv(3->8) -> Relu -> GlobalAveragePool -> Flatten -> Gemm(8->4), opset 21, weights drawn so
    the logits are of order 1. ``batch``: the input's first dim (a name makes it dynamic)."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((8, 3, 3, 3)) * 0.4).astype(np.float32)
    b = (rng.standard_normal(8) * 0.1).astype(np.float32)
    fc = (rng.standard_normal((4, 8)) * 0.8).astype(np.float32)
    fb = rng.standard_normal(4).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc", "fb"], ["y"], transB=1, name="fc")]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])],
        [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (b, "b"), (fc, "fc"), (fb, "fb"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, path)
    return path


def refused_onnx(path: Path) -> Path:
    """A model with two ops OpenVINO's ONNX frontend has no conversion for (Bernoulli), named."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
             helper.make_node("Bernoulli", ["s"], ["b1"], name="draw_1", seed=1.0),
             helper.make_node("Bernoulli", ["s"], ["b2"], name="draw_2", seed=2.0),
             helper.make_node("Add", ["b1", "b2"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "refused", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, path)
    return path


def lrn_onnx(path: Path, rank: int) -> Path:
    """LRN (size 3) over a float input of ``rank`` (batch 1, 4 channels, spatial dims of 2): OpenVINO's
    ONNX frontend converts it at any rank; its CPU plugin takes it up to rank 5 only."""
    shape = [1, 4] + [2] * (rank - 2)
    graph = helper.make_graph([helper.make_node("LRN", ["x"], ["y"], size=3, name="lrn")], "lrn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, path)
    return path


def constant_types(xml: Path) -> dict[str, str]:
    """Name -> element type of every Constant of the IR at ``xml``."""
    from unframe.converters.backends.openvino.runner import read_ir

    return {op.get_friendly_name(): op.get_element_type().get_type_name()
            for op in read_ir(xml).get_ordered_ops() if op.get_type_name() == "Constant"}


def input_shapes(xml: Path) -> dict[str, str]:
    from unframe.converters.backends.openvino.runner import read_ir

    return {p.get_any_name(): str(p.get_partial_shape()) for p in read_ir(xml).inputs}


def ort(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as rt

    session = rt.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))


def passthrough_loop_onnx(path: Path) -> Path:
    """A Loop whose body hands one state back unchanged (``w``), as tf2onnx writes a Keras RNN's
    weights: h <- h * w + 0.5 three times, with every step's h as a scan output; the final ``w``
    is read after the loop (a Mul) and is a graph output too."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Mul", ["h_in", "w_in"], ["hw"]),
         helper.make_node("Add", ["hw", "half"], ["h_next"]),
         helper.make_node("Identity", ["h_next"], ["y"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("w_in", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_next", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("w_in", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.array(0.5, np.float32), "half")])
    w = np.array([0.9, -1.1, 0.7], np.float32)
    nodes = [helper.make_node("Loop", ["m", "cond", "x", "w"], ["h", "w_out", "ys"], body=body, name="loop"),
             helper.make_node("Mul", ["h", "w_out"], ["z"], name="after")]
    graph = helper.make_graph(
        nodes, "loop", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("ys", TensorProto.FLOAT, [3, 2, 3]),
         helper.make_tensor_value_info("w_out", TensorProto.FLOAT, [3])],
        [numpy_helper.from_array(np.array(3, np.int64), "m"), numpy_helper.from_array(np.array(True), "cond"),
         numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path
