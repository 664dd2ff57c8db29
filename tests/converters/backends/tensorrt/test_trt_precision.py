"""In-graph precision lowering: the cast graph keeps the model's I/O types, keeps sensitive ops in
fp32, and computes the same numbers (to fp16 accuracy) under onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper
from trt_models import cnn_model, const, make_model, ort_run, torch_model, trt_or_skip, vi

from unframe.converters.backends.tensorrt.prepare import prepare
from unframe.converters.backends.tensorrt.table import supports_low
from unframe.passes.precision import LowerPrecisionPass, lower_precision


def dtype_of(model: ir.Model, name: str) -> ir.DataType:
    values = {v.name: v for n in model.graph for v in [*n.inputs, *n.outputs] if v is not None}
    values.update({v.name: v for v in model.graph.inputs})
    return values[name].dtype


def input_dtypes(model: ir.Model, op: str) -> set[ir.DataType]:
    return {v.dtype for n in model.graph if n.op_type == op for v in n.inputs if v is not None}


def test_fp16_cnn_keeps_io_types_and_sensitive_ops_in_fp32():
    model = prepare(cnn_model())
    lowered = lower_precision(model.clone(), "fp16", supports=supports_low)
    onnx.checker.check_model(ir.to_proto(lowered), full_check=True)
    assert [v.dtype for v in lowered.graph.inputs] == [ir.DataType.FLOAT]
    assert [(v.name, v.dtype) for v in lowered.graph.outputs] == [("y", ir.DataType.FLOAT)]
    assert input_dtypes(lowered, "Conv") == {ir.DataType.FLOAT16}
    assert input_dtypes(lowered, "Gemm") == {ir.DataType.FLOAT16}
    assert input_dtypes(lowered, "Softmax") == {ir.DataType.FLOAT}
    assert input_dtypes(lowered, "BatchNormalization") == {ir.DataType.FLOAT}
    x = np.random.default_rng(1).standard_normal((3, 3, 16, 16)).astype(np.float32)
    ref, low = ort_run(model, {"x": x})["y"], ort_run(lowered, {"x": x})["y"]
    assert low.dtype == np.float32
    np.testing.assert_allclose(low, ref, atol=5e-3, rtol=1e-2)
    # It is really computing in fp16: not bit-identical to fp32.
    assert np.abs(low - ref).max() > 0


def test_fp16_transformer_encoder_matches_fp32_closely():
    torch = pytest.importorskip("torch", reason="needs torch to export the encoder")
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
    model = prepare(torch_model(encoder, (torch.randn(2, 5, 16),), ["x"], ["y"]))
    lowered = lower_precision(model.clone(), "fp16", supports=supports_low)
    assert input_dtypes(lowered, "LayerNormalization") == {ir.DataType.FLOAT}
    assert input_dtypes(lowered, "Softmax") == {ir.DataType.FLOAT}
    assert ir.DataType.FLOAT16 in input_dtypes(lowered, "MatMul")
    x = np.random.default_rng(2).standard_normal((2, 5, 16)).astype(np.float32)
    np.testing.assert_allclose(ort_run(lowered, {"x": x})["y"], ort_run(model, {"x": x})["y"],
                               atol=2e-2, rtol=2e-2)


def test_resize_scales_stay_float32_and_cast_to_float_is_retargeted():
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Resize", ["r", "", "scales"], ["z"], mode="nearest"),
             helper.make_node("Cast", ["n"], ["nf"], to=onnx.TensorProto.FLOAT),
             helper.make_node("Mul", ["z", "nf"], ["y"])]
    model = make_model(nodes, [vi("x", [1, 1, 2, 2]), vi("n", [1], onnx.TensorProto.INT32)],
                       [vi("y", [1, 1, 4, 4])],
                       [const("scales", np.array([1, 1, 2, 2], np.float32))])
    lowered = lower_precision(model.clone(), "fp16", supports=supports_low)
    resize = next(n for n in lowered.graph if n.op_type == "Resize")
    assert resize.inputs[0].dtype == ir.DataType.FLOAT16
    assert resize.inputs[2].dtype == ir.DataType.FLOAT  # tensor(float) in the ONNX spec
    cast = next(n for n in lowered.graph if n.op_type == "Cast" and n.inputs[0].name == "n")
    assert cast.attributes["to"].value == int(ir.DataType.FLOAT16)
    feeds = {"x": np.array([[[[1, -2], [3, 4]]]], np.float32), "n": np.array([3], np.int32)}
    np.testing.assert_array_equal(ort_run(lowered, feeds)["y"], ort_run(model, feeds)["y"])


def test_bf16_graph_is_well_formed_and_typed():
    lowered = lower_precision(prepare(cnn_model()), "bf16", supports=supports_low)
    # Not full_check: ONNX's Conv/Gemm schemas omit bfloat16, TensorRT's parser takes it.
    onnx.checker.check_model(ir.to_proto(lowered))
    assert input_dtypes(lowered, "Conv") == {ir.DataType.BFLOAT16}
    assert [v.dtype for v in lowered.graph.outputs] == [ir.DataType.FLOAT]


def test_fp32_is_a_no_op_and_bad_precision_raises():
    model = cnn_model()
    assert lower_precision(model, "fp32", supports=supports_low) is model
    with pytest.raises(ValueError, match="precision"):
        LowerPrecisionPass("int4", supports=supports_low)


def test_values_captured_by_subgraphs_are_cast_back_to_fp32():
    then_branch = helper.make_graph([helper.make_node("Neg", ["r"], ["t"])], "then", [],
                                    [vi("t", [4])])
    else_branch = helper.make_graph([helper.make_node("Identity", ["r"], ["e"])], "else", [],
                                    [vi("e", [4])])
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)]
    model = make_model(nodes, [vi("x", [4]), vi("c", [], onnx.TensorProto.BOOL)], [vi("y", [4])])
    lowered = lower_precision(model.clone(), "fp16", supports=supports_low)
    relu = next(n for n in lowered.graph if n.op_type == "Relu")
    assert relu.outputs[0].dtype == ir.DataType.FLOAT16
    x = np.array([-1, 2, -3, 4], np.float32)
    for cond in (True, False):
        feeds = {"x": x, "c": np.array(cond)}
        np.testing.assert_array_equal(ort_run(lowered, feeds)["y"], ort_run(model, feeds)["y"])


def test_fp16_leaves_nodes_marked_keep_fp32_in_fp32():
    """A lowered tree stump (marked by ml_to_tensor) followed by an unmarked Mul: the Mul goes to
    fp16, the comparison and the leaf gather stay fp32, and the stump's decision is exact."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "passes" / "ml_to_tensor"))
    from mlt_models import stump_model

    from unframe.passes.ml_to_tensor import lower

    model = ir.serde.deserialize_model(stump_model())
    lower(model)
    lowered = lower_precision(model.clone(), "fp16", supports=supports_low)
    assert input_dtypes(lowered, "Mul") == {ir.DataType.FLOAT16}
    assert input_dtypes(lowered, "LessOrEqual") == {ir.DataType.FLOAT}
    x = np.array([[1.0008], [0.5], [2.0], [1.0006]], np.float32)
    out = ort_run(lowered, {"X": x})["Y"].reshape(-1)
    np.testing.assert_array_equal(out, [2.0, -2.0, 2.0, -2.0])


def _overflowing_model() -> ir.Model:
    """x[N,8] -> Mul(big: 2e5, past fp16's 65504) -> h (|h| ~ 4e5) -> Mul(1e-4) -> Add(b) -> y:
    finite and of order 1 in fp32, inf in fp16 unless both Muls stay fp32. (An intermediate
    alone can't show it under onnxruntime's CPU kernels, which compute fp16 ops in fp32; a
    constant past the range is cast into the graph as inf.)"""
    rng = np.random.default_rng(3)
    return make_model(
        [helper.make_node("Mul", ["x", "big"], ["h"]),
         helper.make_node("Mul", ["h", "scale"], ["s"]),
         helper.make_node("Add", ["s", "b"], ["y"])],
        [vi("x", ["N", 8])], [vi("y", ["N", 8])],
        [const("big", np.full(8, 2e5, np.float32)), const("scale", np.array(1e-4, np.float32)),
         const("b", rng.standard_normal(8).astype(np.float32))])


def test_range_analysis_keeps_what_overflows_fp16_in_fp32_and_names_it():
    from unframe.passes.precision import overflowing_values

    model = _overflowing_model()
    x = np.abs(np.random.default_rng(4).standard_normal((4, 8))).astype(np.float32) + 1
    ref = ort_run(model, {"x": x})["y"]
    assert 1 < np.abs(ref).max() < 100  # order 1 output: the comparison means something
    blind = ort_run(lower_precision(model.clone(), "fp16", supports=supports_low), {"x": x})["y"]
    assert not np.isfinite(blind).all()  # the static keep-list alone hands over inf

    found = overflowing_values(model, "fp16", [{"x": x}])
    assert set(found) == {"big", "h"} and min(found.values()) > 65504, found
    lowered = lower_precision(model.clone(), "fp16", keep_values=found, supports=supports_low)
    assert ir.DataType.FLOAT16 not in input_dtypes(lowered, "Mul")  # both Muls stay fp32
    assert ir.DataType.FLOAT16 in input_dtypes(lowered, "Add")  # the rest still goes low
    np.testing.assert_allclose(ort_run(lowered, {"x": x})["y"], ref, atol=1e-2, rtol=1e-2)
    assert overflowing_values(model, "bf16", [{"x": x}]) == {}  # bf16 has fp32's range


def test_without_a_gpu_the_fp16_keep_list_is_planned_on_the_rounding_emulation(tmp_path):
    """An fp16 engine that can't run here: onnxruntime's rounding emulation predicts the cancelling
    difference, the planner marks the nodes, the engine is built again with them in float32 (the
    lowered graph says so) and the note says it was predicted, not measured."""
    trt_or_skip()
    import onnx
    from spine_utils import cancelling_difference

    import unframe
    from unframe.passes import keeps_fp32

    proto, feeds = cancelling_difference()
    src = tmp_path / "cancel.onnx"
    onnx.save(proto, src)
    result = unframe.convert(str(src), to="tensorrt", precision="fp16", sample_inputs=feeds,
                             output=str(tmp_path / "m.engine"), builder_optimization_level=0)
    backend = next(s for s in result.report.stages if s.stage == "backend")
    if backend.status != "skipped":
        pytest.skip("a GPU ran the engine: the plan is then made on a failed comparison, if any")
    note = next(n for n in result.flow.notes if "kept in float32" in n)
    assert "predicted by that emulation" in note
    kept = {n.name for n in result.flow.model.graph if keeps_fp32(n)}
    assert "sub" in kept and kept <= {"p", "q", "sub"}
    lowered = lower_precision(result.flow.model.clone(), "fp16", supports=supports_low)
    by_name = {n.name: n for n in lowered.graph}
    assert all(by_name[k].outputs[0].dtype != ir.DataType.FLOAT16 for k in kept)
    assert by_name["relu"].outputs[0].dtype == ir.DataType.FLOAT16
