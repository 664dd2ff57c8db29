"""Refusals of TensorRT's parser that the preparation rewrites exactly, each predicted by
pre-flight: upper-case Einsum subscripts (torchvision's MaxViT), integer CumSum (BLOOM's ALiBi
positions) and a Loop whose trip count is only in its condition (tf2onnx's ``tf.range`` loop).

For each: the raw graph is refused by the real parser (tensorrt-rtx on the CPU) and pre-flight
names it; the prepared graph gives onnxruntime's outputs exactly, pre-flight finds nothing, the
parser takes it and the engine builds."""

from __future__ import annotations

import string
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper
from trt_models import const, make_model, ort_run, trt_or_skip, vi

from unframe.converters.backends.tensorrt import cumsum, preflight
from unframe.converters.backends.tensorrt.backend import check_report
from unframe.converters.backends.tensorrt.einsum import normalize_equation
from unframe.converters.backends.tensorrt.prepare import prepare
from unframe.converters.backends.tensorrt.profiles import ProfileShape
from unframe.converters.backends.tensorrt.table import supports_low
from unframe.converters.base import Target
from unframe.converters.registry import BACKENDS
from unframe.errors import UnsupportedError
from unframe.passes.precision import lower_precision

I64, I32, F = TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT
RNG = np.random.default_rng(0)
FAST = {"builder_optimization_level": 0}


def parser_refuses_raw_and_takes_prepared(model: ir.Model, op: str, *, raw_parse: bool = False) -> None:
    """The raw graph: refused by pre-flight at ``op``, and by the parser unless ``raw_parse``.
    Prepared (what ``check`` and ``convert`` read): no blocker, no disagreement, the parser
    takes it."""
    trt_or_skip()
    raw = preflight.parser_verdict(model)
    assert raw is not None and raw.supported == raw_parse
    assert [b.op for b in preflight.check(model)] == [op]
    report = check_report(model)
    assert report.blockers == [] and report.disagreements == [], report.to_dict()
    assert preflight.parser_verdict(prepare(model.clone())).supported


def builds(model: ir.Model, tmp_path: Path, **options) -> None:
    backend = BACKENDS.get("tensorrt")
    artifact = backend.convert(model, Target("tensorrt", options={**FAST, **options}), tmp_path)
    assert len(artifact.model) > 1000


# -- Einsum ------------------------------------------------------------------------------------

# torchvision MaxViT's attention, as torch writes it (rank 6, upper case, spaces)
MAXVIT = "B G P H I D, B G P H J D -> B G P H I J"


def einsum_model(equation: str, shapes: list[list[int]]) -> ir.Model:
    names = [f"x{i}" for i in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], equation=equation, name="einsum")
    return make_model([node], [vi(n, s) for n, s in zip(names, shapes, strict=True)], [vi("y", None)])


def test_maxvit_einsum_with_upper_case_subscripts_is_renamed(tmp_path):
    shapes = [[1, 2, 3, 2, 4, 5], [1, 2, 3, 2, 6, 5]]
    model = einsum_model(MAXVIT, shapes)
    feeds = {f"x{i}": RNG.normal(size=s).astype(np.float32) for i, s in enumerate(shapes)}
    before = ort_run(model, feeds)["y"]
    parser_refuses_raw_and_takes_prepared(model, "Einsum")
    prepared = prepare(model.clone())
    equation = next(n for n in prepared.graph if n.op_type == "Einsum").attributes["equation"].value
    assert equation == equation.lower() and " " not in equation
    np.testing.assert_array_equal(ort_run(prepared, feeds)["y"], before)
    builds(model, tmp_path)


@pytest.mark.parametrize("equation, shapes", [
    (MAXVIT, [[1, 2, 1, 2, 3, 4], [1, 2, 1, 2, 5, 4]]),
    ("Ij,jK", [[2, 3], [3, 4]]),            # implicit output: numpy orders I, K (upper case first)
    ("bA,Ab", [[2, 3], [3, 2]]),            # implicit, everything summed
    ("...Ij, jk -> ...kI", [[2, 3, 4], [4, 5]]),
    ("Ii->I", [[3, 3]]),                    # a repeated subscript (diagonal) keeps its pairing
    ("ba", [[2, 3]]),                        # lower case, implicit: unchanged meaning
])
def test_renamed_equations_contract_the_same_way(equation, shapes):
    """numpy (onnx's reference Einsum) gives the same result for the renamed equation."""
    arrays = [RNG.normal(size=s) for s in shapes]
    renamed = normalize_equation(equation)
    assert renamed is not None and not any(c in string.ascii_uppercase or c == " " for c in renamed)
    np.testing.assert_allclose(np.einsum(renamed, *arrays), np.einsum(equation.replace(" ", ""), *arrays))


def test_an_equation_with_more_letters_than_a_to_z_stays_named():
    letters = string.ascii_lowercase + "Z"  # 27 distinct subscripts
    model = einsum_model(f"{letters}->{letters[::-1]}", [[1] * 27])
    assert normalize_equation(f"{letters}->{letters}") is None
    reasons = [b.reason for b in preflight.check(prepare(model.clone()))]
    assert any("more distinct letters" in r for r in reasons)


# -- integer CumSum ----------------------------------------------------------------------------

def alibi_positions_model(length: int | str = "S", dtype: int = I64) -> ir.Model:
    """BLOOM's ``(attention_mask.cumsum(-1) - 1) * attention_mask`` on an int64 graph input:
    nothing in the graph bounds the mask's values."""
    nodes = [helper.make_node("CumSum", ["mask", "axis"], ["count"], name="cumsum"),
             helper.make_node("Sub", ["count", "one"], ["from_zero"]),
             helper.make_node("Mul", ["from_zero", "mask"], ["positions"])]
    np_type = np.int64 if dtype == I64 else np.int32
    inits = [const("axis", np.array(-1, np.int64)), const("one", np.array(1, np_type))]
    return make_model(nodes, [vi("mask", ["B", length], dtype)], [vi("positions", ["B", length], dtype)], inits)


def test_bloom_alibi_positions_are_summed_in_float_digits(tmp_path):
    model = alibi_positions_model()
    mask = np.array([[0, 0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 0, 0]], np.int64)  # left/right padded
    before = ort_run(model, {"mask": mask})["positions"]
    assert before.max() > 2
    # TensorRT's table (10.15) lists CumSum for float types only; tensorrt-rtx 1.7's parser
    # takes int64 as well (undocumented): pre-flight keeps the documented rule
    parser_refuses_raw_and_takes_prepared(model, "CumSum", raw_parse=True)
    prepared = prepare(model.clone())
    assert all(n.inputs[0].dtype == ir.DataType.FLOAT for n in prepared.graph if n.op_type == "CumSum")
    np.testing.assert_array_equal(ort_run(prepared, {"mask": mask})["positions"], before)
    builds(model, tmp_path, sample_shapes={"mask": (2, 8)})
    # an fp16 engine keeps the digit sums in float32 (float16 holds integers exactly to 2048)
    low = lower_precision(prepare(model.clone()), "fp16", supports=supports_low)
    assert all(n.inputs[0].dtype == ir.DataType.FLOAT for n in low.graph if n.op_type == "CumSum")
    np.testing.assert_array_equal(ort_run(low, {"mask": mask})["positions"], before)


@pytest.mark.parametrize("dtype", [I64, I32])
@pytest.mark.parametrize("axis, attrs", [(1, {}), (-1, {"exclusive": 1}), (0, {"reverse": 1}),
                                         (-2, {"exclusive": 1, "reverse": 1})])
def test_any_integer_values_sum_exactly(dtype, axis, attrs):
    """Not only masks: values over the whole type, negative too (the digits of a negative number
    are negative remainders), summed as onnxruntime's integer CumSum sums them."""
    np_type = np.int64 if dtype == I64 else np.int32
    info = np.iinfo(np_type)
    model = make_model([helper.make_node("CumSum", ["x", "axis"], ["y"], **attrs)], [vi("x", [4, 9], dtype)],
                       [vi("y", [4, 9], dtype)], [const("axis", np.array(axis, np.int64))])
    x = RNG.integers(info.min // 16, info.max // 16, size=(4, 9), dtype=np_type)
    x[1] = RNG.integers(-20, 20, size=9)
    x[2, :3] = [info.max // 16, -1, info.min // 16]
    before = ort_run(model, {"x": x})["y"]
    assert cumsum.DigitCumSumPass()(model).modified
    after = ort_run(model, {"x": x})["y"]
    assert after.dtype == before.dtype
    np.testing.assert_array_equal(after, before)
    assert preflight.check(model) == []


def test_an_axis_too_long_for_exact_float_digits_is_refused():
    model = alibi_positions_model(length=cumsum.MAX_EXACT_LENGTH + 1)
    assert not cumsum.DigitCumSumPass()(model).modified
    assert [b.op for b in check_report(model, ask_parser=False).blockers] == ["CumSum"]


def test_a_profile_past_the_exact_length_is_refused_before_the_build():
    prepared = prepare(alibi_positions_model())
    fine = {"mask": ProfileShape((1, 1), (2, 8), (4, 4096))}
    cumsum.check_profile(prepared, fine)
    too_long = {"mask": ProfileShape((1, 1), (2, 8), (4, cumsum.MAX_EXACT_LENGTH + 1))}
    with pytest.raises(UnsupportedError, match="sums integers exactly"):
        cumsum.check_profile(prepared, too_long)


# -- a Loop whose trip count is in its condition -----------------------------------------------

@pytest.fixture(scope="module")
def tf_range_loop() -> ir.Model:
    """tf2onnx's export of a tf.function with ``for t in tf.range(12)`` collecting a TensorArray:
    a while-Loop (no M) with a scan output."""
    tf = pytest.importorskip("tensorflow", reason="needs tensorflow to build the loop")
    tf2onnx = pytest.importorskip("tf2onnx", reason="needs tf2onnx to export the loop")
    spec = [tf.TensorSpec([2, 4], tf.float32)]

    @tf.function(input_signature=spec)
    def steps(x):
        states = tf.TensorArray(tf.float32, size=12)
        y = x
        for t in tf.range(12):
            y = tf.tanh(y * 0.9 + tf.cast(t, tf.float32) * 0.1)
            states = states.write(t, y)
        return states.stack()

    proto, _ = tf2onnx.convert.from_function(steps, input_signature=spec, opset=18)
    loop = next(n for n in proto.graph.node if n.op_type == "Loop")
    assert loop.input[0] == ""  # the trip count is only in the condition
    return ir.from_proto(proto)


def test_tf_range_loop_gets_its_trip_count(tf_range_loop, tmp_path):
    feeds = {"x": RNG.normal(size=(2, 4)).astype(np.float32) * 2}
    before = ort_run(tf_range_loop, feeds)
    parser_refuses_raw_and_takes_prepared(tf_range_loop, "Loop")
    prepared = prepare(tf_range_loop.clone())
    loop = next(n for n in prepared.graph if n.op_type == "Loop")
    (states,) = before.values()
    assert int(loop.inputs[0].const_value.numpy()) == states.shape[0]
    for name, value in ort_run(prepared, feeds).items():
        np.testing.assert_array_equal(value, before[name])
    builds(tf_range_loop, tmp_path)


def test_a_loop_condition_read_from_data_stays_named_by_preflight(tf_range_loop):
    """The same loop with its limit fed by the model: no constant trip count to find."""
    proto = ir.to_proto(tf_range_loop)
    limit = next(n for n in proto.graph.node if n.op_type == "Loop").input[4]
    kept = [t for t in proto.graph.initializer if t.name != limit]
    del proto.graph.initializer[:]
    proto.graph.initializer.extend(kept)
    proto.graph.input.append(helper.make_tensor_value_info(limit, I32, []))
    onnx.checker.check_model(proto)
    reasons = [b.reason for b in check_report(ir.from_proto(proto), ask_parser=False).blockers]
    assert len(reasons) == 1 and "scan output" in reasons[0] and "trip count" in reasons[0]
