"""fp16 as a property of an ONNX graph (``precision="fp16"`` on the ONNX backend): float32 compute
rewritten where onnx's schemas allow, the keep-list found by range analysis and by the rounding
planner, the result checked against the float32 graph on onnxruntime."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from spine_utils import cancelling_difference

import unframe
from unframe.cli.main import cli


def _cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((8, 3, 3, 3)) * 0.4).astype(np.float32)
    w2 = (rng.standard_normal((4, 8)) * 0.4).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("GlobalAveragePool", ["r"], ["p"]),
         helper.make_node("Flatten", ["p"], ["f"]),
         helper.make_node("Gemm", ["f", "w2"], ["logits"], transB=1),
         helper.make_node("Softmax", ["logits"], ["y"], axis=1)], "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32) * 3}


def _dtypes(model) -> Counter[str]:
    return Counter(v.dtype.name for n in model.graph for v in n.outputs if v.dtype is not None)


def test_fp16_graph_keeps_its_io_types_and_is_checked_against_float32(tmp_path: Path):
    src = tmp_path / "cnn.onnx"
    onnx.save(_cnn(), src)
    result = unframe.convert(str(src), to="onnx", output=str(tmp_path / "half.onnx"), precision="fp16",
                             sample_inputs=_feeds())
    graph = result.model.graph
    assert [v.dtype.name for v in [*graph.inputs, *graph.outputs]] == ["FLOAT", "FLOAT", "FLOAT"]
    kinds = _dtypes(result.model)
    assert kinds["FLOAT16"] >= 4  # Conv, Relu, pool, Gemm... computed in fp16
    softmax = next(n for n in graph if n.op_type == "Softmax")
    assert softmax.outputs[0].dtype.name == "FLOAT"  # sensitive: stays float32
    backend = next(s for s in result.report.stages if s.stage == "backend")
    logits = next(o for o in backend.outputs if o.name == "logits")
    assert logits.of_scale and logits.scale > 0.3 and 0 < logits.max_abs <= logits.atol + logits.rtol * logits.scale
    written = onnx.load(tmp_path / "half.onnx")
    assert any(v.type.tensor_type.elem_type == TensorProto.FLOAT16 for v in written.graph.value_info) or \
        any(i.data_type == TensorProto.FLOAT16 for i in written.graph.initializer)


def test_fp32_onnx_output_is_not_rewritten_nor_checked_again(tmp_path: Path):
    src = tmp_path / "cnn.onnx"
    onnx.save(_cnn(), src)
    result = unframe.convert(str(src), to="onnx", output=str(tmp_path / "same.onnx"), sample_inputs=_feeds())
    assert "FLOAT16" not in _dtypes(result.model)
    assert not any(s.stage == "backend" for s in result.report.stages)


def test_values_past_fp16s_range_stay_in_float32(tmp_path: Path):
    """Activations of ~1e5 (past 65504): range analysis keeps them in float32, and the output is
    finite and matches; blindly lowered it would be inf."""
    big = _cnn()
    for init in big.graph.initializer:
        if init.name == "w1":
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * 3e4, "w1"))
    src = tmp_path / "big.onnx"
    onnx.save(big, src)
    result = unframe.convert(str(src), to="onnx", output=str(tmp_path / "half.onnx"), precision="fp16",
                             sample_inputs=_feeds())
    notes = " ".join([*result.flow.notes, *result.artifact.notes])
    assert "past fp16's range" in notes or "kept in float32" in notes, notes
    backend = next(s for s in result.report.stages if s.stage == "backend")
    assert backend and all(np.isfinite(o.max_abs) for o in backend.outputs)


def test_cli_writes_an_fp16_onnx(tmp_path: Path):
    src = tmp_path / "cnn.onnx"
    onnx.save(_cnn(), src)
    out = tmp_path / "half.onnx"
    result = CliRunner().invoke(cli, ["convert", str(src), "--to", "onnx", "--precision", "fp16", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "parity backend: passed" in result.output and out.exists()


@pytest.mark.parametrize("precision", ["fp16"])
def test_the_planner_keeps_a_cancelling_difference_in_float32(tmp_path: Path, precision: str):
    """y = p - q with p, q ~ 1000 and y ~ 5: in fp16 the difference is mostly noise. The planner
    keeps what it takes to bring rounding within parity's allowance (the Sub and a product) in
    float32, named in the notes, and the fp16 graph matches."""
    proto, feeds = cancelling_difference()
    src = tmp_path / "cancel.onnx"
    onnx.save(proto, src)
    result = unframe.convert(str(src), to="onnx", output=str(tmp_path / "half.onnx"), precision=precision,
                             sample_inputs=feeds)
    note = next(n for n in result.flow.notes if "kept in float32" in n)
    kept = note.split("float32 (", 1)[1].split(")", 1)[0].split(", ")
    assert "sub" in kept and set(kept) <= {"p", "q", "sub"}
    by_name = {n.name: n for n in result.model.graph}
    assert all(by_name[k].outputs[0].dtype != ir.DataType.FLOAT16 for k in kept)  # untyped or FLOAT
    assert by_name["relu"].outputs[0].dtype == ir.DataType.FLOAT16
    backend = next(s for s in result.report.stages if s.stage == "backend")
    assert backend and backend.outputs[0].scale > 1.0
