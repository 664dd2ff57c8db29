"""Outputs of unknown rank (issue 34): onnx.checker requires every graph output's shape, so a
graph onnxruntime runs fine was refused by the ONNX backend (exit 4). The backend now gives such
outputs the rank they have: from onnx's shape inference where it can tell, else from a run at
the samples' shapes. The written file passes the checker and runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

import unframe


def save(tmp_path: Path, nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
         initializers: list[onnx.TensorProto] = ()) -> Path:
    y = onnx.ValueInfoProto(name="y")  # no type shape: rank unknown
    y.type.tensor_type.elem_type = TensorProto.FLOAT
    graph = helper.make_graph(nodes, "g", inputs, [y], initializer=list(initializers))
    path = tmp_path / "unranked.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10), path)
    return path


def test_rank_from_shape_inference(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    flat = helper.make_tensor("flat", TensorProto.INT64, [1], [-1])
    src = save(tmp_path, [helper.make_node("Reshape", ["x", "flat"], ["t"]),
                          helper.make_node("Relu", ["t"], ["y"])], [x], [flat])
    out = tmp_path / "out.onnx"
    result = unframe.convert(src, to="onnx", output=out)
    written = onnx.load(out)
    onnx.checker.check_model(written, full_check=True)
    assert [d.dim_value for d in written.graph.output[0].type.tensor_type.shape.dim] == [12]
    assert any("of unknown rank" in n for n in result.notes), result.notes


def test_rank_from_a_run_at_the_samples_shapes(tmp_path: Path) -> None:
    """Squeeze without axes on an input with free dims: no inference can tell which go."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a", "b", "c"])
    src = save(tmp_path, [helper.make_node("Squeeze", ["x"], ["s"]),
                          helper.make_node("Neg", ["s"], ["y"])], [x])
    sample = np.random.default_rng(0).standard_normal((2, 1, 3)).astype(np.float32)
    out = tmp_path / "out.onnx"
    unframe.convert(src, to="onnx", output=out, sample_inputs={"x": sample})
    written = onnx.load(out)
    onnx.checker.check_model(written, full_check=True)
    assert len(written.graph.output[0].type.tensor_type.shape.dim) == 2
    got = ort.InferenceSession(str(out)).run(None, {"x": sample})[0]
    np.testing.assert_array_equal(got, -sample.reshape(2, 3))
