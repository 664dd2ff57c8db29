"""Graph preparation passes: constant folding, unused-node removal, int64 narrowing, float CumSum. Each graph is
run with onnxruntime before and after to show the passes keep its numbers."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper
from trt_models import const, make_model, ort_run, vi

from unframe.converters.backends.tensorrt import preflight
from unframe.converters.backends.tensorrt.prepare import (
    CompactNonZeroPass,
    FloatCumSumPass,
    FoldConstantsPass,
    NarrowInt64Pass,
    prepare,
)

I64 = TensorProto.INT64


def ops(model) -> list[str]:
    return [n.op_type for n in model.graph]


def shape_reshape_model():
    """y = Reshape(x, Concat(Gather(Shape(x), 0), -1)) * 2, plus an unused Neg node, and a
    ReduceMean whose axes come from Shape arithmetic."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["d0"], axis=0),
        helper.make_node("Unsqueeze", ["d0", "axes0"], ["d0u"]),
        helper.make_node("Concat", ["d0u", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Mul", ["r", "two"], ["y"]),
        helper.make_node("Neg", ["x"], ["unused"]),
        helper.make_node("Size", ["s"], ["rank"]),
        helper.make_node("Sub", ["rank", "one"], ["last"]),
        helper.make_node("Unsqueeze", ["last", "axes0"], ["axes"]),
        helper.make_node("ReduceMean", ["x", "axes"], ["m"], name="mean"),
    ]
    inits = [const("zero", np.array(0, np.int64)), const("axes0", np.array([0], np.int64)),
             const("minus1", np.array([-1], np.int64)), const("two", np.array(2, np.float32)),
             const("one", np.array(1, np.int64))]
    return make_model(nodes, [vi("x", [2, 3, 4])], [vi("y", [2, 12]), vi("m", None)], inits)


def test_folding_turns_shape_subgraphs_into_initializers():
    model = shape_reshape_model()
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    before = ort_run(model, {"x": x})
    prepared = prepare(model)
    assert ops(prepared) == ["Reshape", "Mul", "ReduceMean"]
    reshape = next(n for n in prepared.graph if n.op_type == "Reshape")
    assert reshape.inputs[1].const_value.numpy().tolist() == [2, -1]
    mean = next(n for n in prepared.graph if n.op_type == "ReduceMean")
    assert mean.inputs[1].const_value.numpy().tolist() == [2]
    after = ort_run(prepared, {"x": x})
    for name in before:
        np.testing.assert_array_equal(before[name], after[name])
    assert preflight.check(prepared) == []


def test_resize_scales_computed_from_constants_become_an_initializer():
    nodes = [helper.make_node("Mul", ["base", "factor"], ["scales"]),
             helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")]
    inits = [const("base", np.array([1, 1, 1, 1], np.float32)),
             const("factor", np.array([1, 1, 2, 2], np.float32))]
    model = make_model(nodes, [vi("x", [1, 1, 2, 2])], [vi("y", [1, 1, 4, 4])], inits)
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    before = ort_run(model, {"x": x})
    prepared = prepare(model)
    assert ops(prepared) == ["Resize"]
    resize = next(iter(prepared.graph))
    assert resize.inputs[2].const_value.numpy().tolist() == [1, 1, 2, 2]
    np.testing.assert_array_equal(ort_run(prepared, {"x": x})["y"], before["y"])


def test_folding_keeps_graph_outputs_and_dynamic_shapes():
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Add", ["c", "c"], ["k"])]
    model = make_model(nodes, [vi("x", ["N", 3])], [vi("s", None, I64), vi("k", [2])],
                       [const("c", np.array([1.0, 2.0], np.float32))])
    result = FoldConstantsPass()(model)
    # Shape of a dynamic input can't fold; k is a graph output, which stays a node's output.
    assert not result.modified
    assert ops(result.model) == ["Shape", "Add"]


def test_folding_refuses_outputs_much_larger_than_inputs():
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["big"]),
             helper.make_node("Add", ["x", "big"], ["y"])]
    model = make_model(nodes, [vi("x", [1024, 1024])], [vi("y", [1024, 1024])],
                       [const("shape", np.array([1024, 1024], np.int64))])
    assert ops(prepare(model)) == ["ConstantOfShape", "Add"]


def test_int64_indices_and_slice_bounds_are_narrowed():
    nodes = [helper.make_node("Gather", ["x", "idx"], ["g"], axis=1),
             helper.make_node("Slice", ["g", "starts", "ends", "axes"], ["y"])]
    inits = [const("idx", np.array([2, 0], np.int64)), const("starts", np.array([1], np.int64)),
             const("ends", np.array([np.iinfo(np.int64).max], np.int64)),
             const("axes", np.array([0], np.int64))]
    model = make_model(nodes, [vi("x", [4, 3])], [vi("y", [3, 2])], inits)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    before = ort_run(model, {"x": x})["y"]
    result = NarrowInt64Pass()(model)
    assert result.modified
    inits_after = result.model.graph.initializers
    assert {n: inits_after[n].const_value.numpy().dtype for n in ("idx", "starts", "ends", "axes")} \
        == {n: np.dtype(np.int32) for n in ("idx", "starts", "ends", "axes")}
    assert int(inits_after["ends"].const_value.numpy()[0]) == np.iinfo(np.int32).max
    np.testing.assert_array_equal(ort_run(result.model, {"x": x})["y"], before)


def test_int64_that_does_not_fit_or_is_shared_stays():
    nodes = [helper.make_node("Gather", ["x", "idx"], ["g"], axis=0),
             helper.make_node("Add", ["idx", "idx"], ["twice"])]
    model = make_model(nodes, [vi("x", [4, 3])], [vi("g", [2, 3]), vi("twice", [2], I64)],
                       [const("idx", np.array([1, 3], np.int64))])
    assert not NarrowInt64Pass()(model).modified  # Add needs it as int64 too


def position_ids_model(length: int | str = "S"):
    """RoBERTa's position ids: cumsum of the non-padding mask (``mask.int()``, widened to int64 by
    torch's cumsum), times the mask, plus the padding index (int64 in and out)."""
    nodes = [helper.make_node("Equal", ["ids", "pad"], ["is_pad"]),
             helper.make_node("Not", ["is_pad"], ["keep"]),
             helper.make_node("Cast", ["keep"], ["mask32"], to=TensorProto.INT32),
             helper.make_node("Cast", ["mask32"], ["mask"], to=I64),
             helper.make_node("CumSum", ["mask", "axis"], ["count"], name="positions"),
             helper.make_node("Mul", ["count", "mask"], ["masked"]),
             helper.make_node("Add", ["masked", "pad"], ["pos"])]
    inits = [const("pad", np.array(1, np.int64)), const("axis", np.array(1, np.int64))]
    return make_model(nodes, [vi("ids", ["B", length], I64)], [vi("pos", ["B", length], I64)], inits)


def test_a_running_count_is_summed_in_float_for_tensorrt():
    model = position_ids_model()
    ids = np.array([[0, 5, 9, 1, 1], [0, 7, 1, 3, 1]], np.int64)  # 1 is the padding id
    before = ort_run(model, {"ids": ids})["pos"]
    assert before.max() > 2  # the count actually runs
    assert [b.op for b in preflight.check(model)] == ["CumSum"]  # int64 CumSum: refused as is
    prepared = prepare(model)
    cumsum = next(n for n in prepared.graph if n.op_type == "CumSum")
    assert cumsum.inputs[0].dtype == ir.DataType.FLOAT and cumsum.outputs[0].dtype == ir.DataType.FLOAT
    assert [o.name for o in prepared.graph.outputs] == ["pos"]
    assert prepared.graph.outputs[0].dtype == ir.DataType.INT64
    after = ort_run(prepared, {"ids": ids})["pos"]
    assert after.dtype == np.int64
    np.testing.assert_array_equal(after, before)
    assert preflight.check(prepared) == []


def test_integer_cumsum_that_float_would_not_hold_exactly_stays():
    plain = make_model([helper.make_node("CumSum", ["x", "axis"], ["y"])], [vi("x", [2, 8], I64)],
                       [vi("y", [2, 8], I64)], [const("axis", np.array(1, np.int64))])
    assert not FloatCumSumPass()(plain).modified  # any int64 values: their sums may pass 2**24
    too_long = position_ids_model(length=(1 << 24) + 1)
    assert not FloatCumSumPass()(too_long).modified


def test_nonzero_of_a_mask_reads_it_as_float_with_the_same_indices():
    """torchvision's detectors keep the boxes over a score threshold: NonZero(Greater(...)), a BOOL
    TensorRT's NonZero doesn't take. The mask is cast to float32; the indices can't change."""
    model = make_model([helper.make_node("Greater", ["s", "t"], ["m"]), helper.make_node("NonZero", ["m"], ["i"]),
                        helper.make_node("Cast", ["s"], ["k"], to=TensorProto.INT64),
                        helper.make_node("NonZero", ["k"], ["j"])],
                       [vi("s", [2, 6])], [vi("i", None, I64), vi("j", None, I64)],
                       [const("t", np.array(0.3, np.float32))])
    s = np.array([[0.1, 0.5, 0.9, 0.2, 0.31, 0.0], [0.7, 0.3, 0.0, 2.5, -4.0, 0.4]], np.float32)
    before = ort_run(model, {"s": s})
    assert 0 < before["i"].shape[1] < s.size  # some kept, some not
    assert sorted(b.op for b in preflight.check(model)) == ["NonZero", "NonZero"]
    prepared = prepare(model)
    for node in (n for n in prepared.graph if n.op_type == "NonZero"):
        assert node.inputs[0].dtype == ir.DataType.FLOAT
    after = ort_run(prepared, {"s": s})
    for name in ("i", "j"):
        np.testing.assert_array_equal(after[name], before[name])
    assert preflight.check(prepared) == []


def keep_over_threshold_model(length: int | str = "N"):
    """torchvision's detectors: ``scores[scores > t]`` (NonZero -> Transpose -> GatherND), plus the
    indices of a float tensor's nonzeros and of an int64 tensor's, each over one axis."""
    nodes = [helper.make_node("Greater", ["s", "t"], ["m"]), helper.make_node("NonZero", ["m"], ["i"]),
             helper.make_node("Transpose", ["i"], ["it"], perm=[1, 0]),
             helper.make_node("GatherND", ["s", "it"], ["kept"]),
             helper.make_node("NonZero", ["s"], ["j"]),
             helper.make_node("Cast", ["s"], ["k"], to=TensorProto.INT64),
             helper.make_node("NonZero", ["k"], ["l"])]
    return make_model(nodes, [vi("s", [length])],
                      [vi("kept", ["K"]), vi("i", [1, "K"], I64), vi("j", [1, "J"], I64), vi("l", [1, "L"], I64)],
                      [const("t", np.array(0.3, np.float32))])


def test_nonzero_over_one_axis_becomes_a_compaction_with_the_same_indices():
    """tensorrt-rtx's parser takes NonZero only as a plugin it doesn't ship; over one axis it is
    rewritten into a running count, a scatter and a slice. onnxruntime: the same indices as
    NonZero's for every kind of input, none kept and all kept included."""
    model = keep_over_threshold_model()
    prepared = prepare(model.clone(), native_nonzero=False)
    assert "NonZero" not in ops(prepared)
    assert {"CumSum", "ScatterElements", "Slice"} <= set(ops(prepared))
    rng = np.random.default_rng(0)
    feeds = [rng.standard_normal(n).astype(np.float32) for n in (1, 7, 5000)]
    feeds += [np.zeros(6, np.float32), np.full(6, 2.0, np.float32),  # none kept; all kept
              np.array([0.0, -0.0, np.nan, 0.31, 0.29, -2.0, 1e-30], np.float32),
              np.round(rng.standard_normal(64)).astype(np.float32)]  # many exact zeros
    kept_counts = set()
    for s in feeds:
        before, after = ort_run(model, {"s": s}), ort_run(prepared, {"s": s})
        for name in ("kept", "i", "j", "l"):
            assert after[name].dtype == before[name].dtype
            np.testing.assert_array_equal(after[name], before[name], err_msg=f"{name} for {s[:8]}")
        kept_counts.add(before["i"].shape[1])
    assert 0 in kept_counts and len(kept_counts) > 3


def test_compaction_only_where_the_parser_lacks_nonzero():
    model = keep_over_threshold_model(length=12)
    assert ops(prepare(model.clone(), native_nonzero=True)).count("NonZero") == 3
    two_axes = make_model([helper.make_node("NonZero", ["s"], ["i"])], [vi("s", [2, 6])], [vi("i", [2, "K"], I64)])
    assert not CompactNonZeroPass()(two_axes).modified  # not rewritten: the parser will name it
    assert [b.op for b in preflight.check(two_axes, "tensorrt_rtx")] == ["NonZero"]
    assert preflight.check(two_axes, "tensorrt") == []
    too_long = keep_over_threshold_model(length=(1 << 24) + 1)  # float32 can't count that far
    assert not CompactNonZeroPass()(too_long).modified


def test_non_max_suppression_is_named_for_tensorrt_rtx_only():
    """tensorrt-rtx 1.7 parses NonMaxSuppression but its builder has no layer for it (measured in
    test_trt_build); NVIDIA's TensorRT has one."""
    model = make_model([helper.make_node("NonMaxSuppression", ["b", "s", "m"], ["sel"])],
                       [vi("b", [1, 10, 4]), vi("s", [1, 1, 10])], [vi("sel", ["K", 3], I64)],
                       [const("m", np.array([5], np.int64))])
    blockers = preflight.check(model, "tensorrt_rtx")
    assert [b.op for b in blockers] == ["NonMaxSuppression"] and "no implementation" in blockers[0].reason
    assert preflight.check(model, "tensorrt") == []


def test_a_large_weights_layout_change_is_left_to_the_builder(monkeypatch):
    """A decoder's LM head reads its tied embedding transposed: folding that Transpose would hold
    a second copy of the largest weight (1 GB at Llama-1B) in memory and write it out again, so
    nodes over weights past FOLD_INPUT_BYTES stay for TensorRT's builder; small ones still fold."""
    from unframe.converters.backends.tensorrt import prepare as prep

    monkeypatch.setattr(prep, "FOLD_INPUT_BYTES", 4096)
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Transpose", ["embed"], ["embed_t"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "embed_t"], ["logits"]),
             helper.make_node("Transpose", ["small"], ["small_t"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "small_t"], ["z"])]
    inits = [const("embed", rng.standard_normal((64, 32)).astype(np.float32)),  # 8 KiB
             const("small", rng.standard_normal((4, 32)).astype(np.float32))]  # 512 B
    model = make_model(nodes, [vi("x", [2, 32])], [vi("logits", [2, 64]), vi("z", [2, 4])], inits)
    x = rng.standard_normal((2, 32)).astype(np.float32)
    before = ort_run(model, {"x": x})
    prepared = prepare(model)
    assert ops(prepared) == ["Transpose", "MatMul", "MatMul"]
    assert next(iter(prepared.graph)).inputs[0].name == "embed"
    after = ort_run(prepared, {"x": x})
    for name in before:
        np.testing.assert_array_equal(before[name], after[name])
