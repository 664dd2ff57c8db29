"""ConstantTripCountPass: a Loop whose condition reads only constants gets its trip count as M.
Every rewritten model is run with onnxruntime before and after: the outputs (scan outputs too)
must be identical; loops whose count depends on data, or runs past the cap, stay as they are."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

from unframe.passes.loops import ConstantTripCountPass, has_trip_limit, trip_count

F, I64, I32, B = TP.FLOAT, TP.INT64, TP.INT32, TP.BOOL
X = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)


def counter_loop(start: int, limit: int, delta: int, *, compare: str = "Less", trip: int | None = None,
                 cond_from_data: bool = False, read_cond: bool = False, scan: bool = True) -> onnx.ModelProto:
    """tf2onnx's shape of ``for t in tf.range(start, limit, delta)``: a counter carried with its
    limit and step, the condition compares the next counter (cast to float) with the limit."""
    body_nodes = [
        oh.make_node("Add", ["t", "d"], ["t_next"]),
        oh.make_node("Cast", ["t"], ["tf"], to=F),
        oh.make_node("Mul", ["y", "decay"], ["yd"]),
        oh.make_node("Add", ["yd", "tf"], ["y_raw"]),
        oh.make_node("Tanh", ["y_raw"], ["y_next"]),
        oh.make_node("Cast", ["t_next"], ["t_next_f"], to=F),
        oh.make_node("Cast", ["lim"], ["lim_f"], to=F),
    ]
    if cond_from_data:  # stop when the state's first element passes a bound: data-dependent
        body_nodes += [oh.make_node("ReduceMax", ["y_next"], ["peak"], keepdims=0),
                       oh.make_node("Less", ["peak", "lim_f"], ["cond_out"])]
    else:
        body_nodes.append(oh.make_node(compare, ["t_next_f", "lim_f"], ["cond_out"]))
    outputs = ["cond_out", "t_next", "y_next", "lim", "d"] + (["y_next_scan"] if scan else [])
    if scan:
        body_nodes.append(oh.make_node("Identity", ["y_next"], ["y_next_scan"]))
    if read_cond:  # the body reads its incoming condition: the loop keeps it beside M
        body_nodes += [oh.make_node("Cast", ["c"], ["cf"], to=F), oh.make_node("Mul", ["y_next", "cf"], ["yc"])]
        outputs[2] = "yc"
    body = oh.make_graph(
        body_nodes, "body",
        [oh.make_tensor_value_info("i", I64, []), oh.make_tensor_value_info("c", B, []),
         oh.make_tensor_value_info("t", I32, []), oh.make_tensor_value_info("y", F, None),
         oh.make_tensor_value_info("lim", I32, []), oh.make_tensor_value_info("d", I32, [])],
        [oh.make_tensor_value_info(n, t, None) for n, t in zip(outputs, [B, I32, F, I32, I32, F], strict=False)],
        [nh.from_array(np.array(0.5, np.float32), "decay")])
    nodes = [oh.make_node("Cast", ["start"], ["start_f"], to=F), oh.make_node("Cast", ["limit"], ["limit_f"], to=F),
             oh.make_node(compare, ["start_f", "limit_f"], ["cond0"]),
             oh.make_node("Loop", ["M" if trip is not None else "", "cond0", "start", "x", "limit", "delta"],
                          ["t_end", "y_end", "l_end", "d_end"] + (["ys"] if scan else []), body=body, name="loop")]
    inits = [nh.from_array(np.array(v, np.int32), n) for n, v in (("start", start), ("limit", limit), ("delta", delta))]
    if trip is not None:
        inits.append(nh.from_array(np.array(trip, np.int64), "M"))
    outs = [oh.make_tensor_value_info("y_end", F, None)] + ([oh.make_tensor_value_info("ys", F, None)] if scan else [])
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", F, [2, 3])], outs, inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


def run(model: onnx.ModelProto) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString()).run(None, {"x": X})


def rewritten(proto: onnx.ModelProto) -> tuple[ir.Model, bool]:
    model = ir.from_proto(proto)
    return model, ConstantTripCountPass()(model).modified


def loop_of(model: ir.Model) -> ir.Node:
    return next(n for n in model.graph if n.op_type == "Loop")


@pytest.mark.parametrize("start, limit, delta, compare", [
    (0, 12, 1, "Less"), (3, 40, 7, "Less"), (10, 0, -3, "Greater"), (0, 12, 1, "LessOrEqual"),
    (5, 5, 1, "Less")])  # the last runs no iteration: its initial condition is false
def test_counter_loop_gets_its_trip_count_and_no_condition(start, limit, delta, compare):
    proto = counter_loop(start, limit, delta, compare=compare)
    before = run(proto)
    model, modified = rewritten(proto)
    assert modified
    loop = loop_of(model)
    assert loop.inputs[0] is not None and loop.inputs[1] is None  # a plain for-loop now
    assert has_trip_limit(loop)
    trips = int(loop.inputs[0].const_value.numpy())
    assert trips == before[1].shape[0]  # the scan output's length: what onnxruntime iterated
    after = run(ir.to_proto(model))
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)


def test_an_int64_max_trip_count_is_replaced_by_the_real_one():
    proto = counter_loop(0, 9, 2, trip=np.iinfo(np.int64).max)
    before = run(proto)
    model, modified = rewritten(proto)
    assert modified and int(loop_of(model).inputs[0].const_value.numpy()) == before[1].shape[0] == 5
    np.testing.assert_array_equal(run(ir.to_proto(model))[1], before[1])


def test_a_given_trip_count_that_stops_first_is_kept():
    """M = 3 below the condition's 12: the loop runs 3 times, and the pass says so."""
    proto = counter_loop(0, 12, 1, trip=3)
    assert trip_count(loop_of(ir.from_proto(proto))) is None  # M < INT32_MAX is a trip limit already
    assert not rewritten(proto)[1]


def test_a_body_that_reads_its_condition_keeps_it_beside_m():
    proto = counter_loop(0, 6, 1, read_cond=True)
    before = run(proto)
    model, modified = rewritten(proto)
    loop = loop_of(model)
    assert modified and loop.inputs[0] is not None and loop.inputs[1] is not None
    for a, b in zip(before, run(ir.to_proto(model)), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_data_dependent_condition_is_left_alone():
    proto = counter_loop(0, 3, 1, cond_from_data=True, scan=False)
    model, modified = rewritten(proto)
    assert not modified and loop_of(model).inputs[0] is None


def test_a_loop_past_the_cap_is_left_alone():
    proto = counter_loop(0, 50, 1)
    model = ir.from_proto(proto)
    assert not ConstantTripCountPass(max_trips=20)(model).modified
    assert ConstantTripCountPass(max_trips=50)(model).modified


def test_a_condition_read_from_a_graph_input_is_left_alone():
    proto = counter_loop(0, 12, 1)
    proto.graph.input.append(oh.make_tensor_value_info("limit", I32, []))  # now a model input
    model = ir.from_proto(proto)
    assert not ConstantTripCountPass()(model).modified


def test_coreml_converts_a_counting_loop_with_scan_outputs(tmp_path):
    """The CoreML backend runs the pass before its check: a for-loop over tf.range with a scan
    output (refused without a constant trip count) converts and matches onnxruntime in the MIL
    evaluator."""
    pytest.importorskip("coremltools", reason="needs the coreml extra")
    import unframe

    src = tmp_path / "loop.onnx"
    onnx.save(counter_loop(0, 12, 1), src)
    assert unframe.check(src, to="coreml")
    result = unframe.convert(src, to="coreml", output=tmp_path / "loop.mlpackage", precision="fp32")
    backend = result.report.stages[-1]
    assert backend.stage == "backend" and backend.status == "passed", backend
