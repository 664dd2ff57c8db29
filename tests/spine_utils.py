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
