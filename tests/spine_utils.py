"""Helpers shared by the spine tests (not a conftest, so that per-folder conftests can't shadow it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mlp_model(opset: int = 13, *, batch: str | int = "N", seed: int = 0) -> onnx.ModelProto:
    """x[N,4] -> MatMul W[4,3] -> Add b -> Relu -> Softmax(axis=-1) -> y[N,3]."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h0"], name="matmul"),
        helper.make_node("Add", ["h0", "b"], ["h1"], name="add"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
        helper.make_node("Softmax", ["h2"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="tests")
    model.ir_version = 7 if opset <= 14 else 8
    return model


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under a folder with its bytes: to prove nothing was written or changed."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def cancelling_difference(seed: int = 4) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """y = p - q with p = relu(x) @ a, q = relu(x) @ (1.005 a): p, q ~ 1000 and y ~ 5, so fp16
    rounding of p, q, their weights or the Sub moves y by ~0.5 while the Relu is harmless (the
    16-bit rounding planner's test model), with its inputs."""
    rng = np.random.default_rng(seed)
    a = np.abs(rng.standard_normal((16, 4))).astype(np.float32) * 60
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("MatMul", ["r", "a"], ["p"], name="p"),
         helper.make_node("MatMul", ["r", "b"], ["q"], name="q"),
         helper.make_node("Sub", ["p", "q"], ["y"], name="sub")], "cancel",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(a, "a"), numpy_helper.from_array((a * 1.005).astype(np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    return model, {"x": np.abs(rng.standard_normal((2, 16))).astype(np.float32)}


def one_big_external_tensor(folder: Path) -> Path:
    """y = tanh(x @ W) with W [4096, 4096] float32: one 64 MiB tensor in external data (the size
    at which the ONNX stage used to replace it with empty data and refuse the model)."""
    from onnx import numpy_helper

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((4096, 4096), dtype=np.float32) / 64.0)
    assert w.nbytes >= 64 * 1024 * 1024
    tensor = numpy_helper.from_array(w, "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Tanh", ["h"], ["y"])],
                              "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4096])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4096])], [tensor])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = folder / "big.onnx"
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="big.onnx.data")
    return path
