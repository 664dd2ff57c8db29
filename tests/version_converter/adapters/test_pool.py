"""MaxPool/AveragePool 22->21 and the dilated AveragePool/LpPool rewrite as a Conv: opset 22's ceil-mode rule (windows starting in the right padding
are dropped) expressed at opset 21, checked on onnx's golden cases and on a sweep of pool
geometries against onnxruntime (which applies the rule at every opset)."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from adapter_cases import check_path
from onnx import TensorProto
from onnx import helper as oh

from unframe.version_converter import convert_opset

# (case, targets, inputs frozen as constants): the shape shared with the other family tests
PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_maxpool_2d_ceil_output_size_reduce_by_one", [21, 18], ()),
    ("test_averagepool_2d_ceil_last_window_starts_on_pad", [21, 19], ()),
    ("test_maxpool_2d_ceil", [21, 9], ()),
    ("test_averagepool_2d_ceil", [9], ()),
    # dilated AveragePool (19->18) and LpPool (18->17) as a grouped Conv
    ("test_averagepool_2d_dilations", [18, 9], ()),
    ("test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_True", [17], ()),
    ("test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True", [18, 7], ()),
    ("test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_False", [17], ()),
    ("test_lppool_2d_dilations", [17, 7], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[p[0] for p in PAIRS])
def test_golden_cases(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"


def _pool(op: str, height: int, width: int, attrs: dict) -> onnx.ModelProto:
    node = oh.make_node(op, ["x"], ["y"], **attrs)
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, height, width])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 22)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _geometries():
    for op, h, w, k, s, pb, pe, cip in itertools.product(
            ("MaxPool", "AveragePool"), (2, 5, 7), (4, 5), (1, 2, 3), (1, 2, 3), (0, 1), (0, 1, 2), (0, 1)):
        if pb >= k or pe >= k or k > h + pb + pe or (op == "MaxPool" and cip):
            continue
        attrs = {"kernel_shape": [k, 2], "strides": [s, 2], "ceil_mode": 1, "pads": [pb, 0, pe, 0]}
        if op == "AveragePool":
            attrs["count_include_pad"] = cip
        yield op, h, w, attrs


@pytest.mark.parametrize("target", [21, 9])
def test_sweep_matches_onnxruntime_and_the_target_spec(target: int) -> None:
    """21: opset 22's rule in floor mode where it differs; 9: no ceil_mode attribute at all."""
    rng = np.random.default_rng(0)
    rewritten = refused = 0
    for op, h, w, attrs in _geometries():
        model = _pool(op, h, w, attrs)
        x = rng.standard_normal((1, 2, h, w)).astype(np.float32)
        expected = _run(model, x)
        irm = ir.from_proto(model)
        try:
            convert_opset(irm, target)
        except Exception as exc:  # only the documented refusal is allowed
            assert "count_include_pad=1" in str(exc) or "end pad" in str(exc), (op, h, w, attrs, exc)
            refused += 1
            continue
        out_model = ir.to_proto(irm)
        onnx.checker.check_model(out_model, full_check=True)  # the target's spec agrees with the shapes
        ceil_mode = {a.name: a.i for a in out_model.graph.node[0].attribute}.get("ceil_mode", 0)
        rewritten += ceil_mode == 0
        got = _run(out_model, x)
        assert got.shape == expected.shape, (op, h, w, attrs)
        np.testing.assert_allclose(got, expected, atol=1e-6, err_msg=str((op, h, w, attrs)))
    assert rewritten > 0, "no geometry exercised the rewrite"
    assert refused < rewritten, f"{refused} refusals: the rewrite hardly ever applies"


def test_mixed_axes_with_count_include_pad_is_refused() -> None:
    # height: the rule drops a window (floor mode fits); width 5, k=2, s=2: ceil mode keeps a
    # partial window that only extra padding could keep in floor mode, which count_include_pad counts
    attrs = {"kernel_shape": [1, 2], "strides": [2, 2], "ceil_mode": 1, "count_include_pad": 1}
    irm = ir.from_proto(_pool("AveragePool", 2, 5, attrs))
    with pytest.raises(Exception, match="count_include_pad=1"):
        convert_opset(irm, 21)


# -- dilated AveragePool (19->18) and LpPool (18->17) as a grouped Conv -------------------------------


def _dilated(op: str, height: int | str, attrs: dict, opset: int) -> onnx.ModelProto:
    node = oh.make_node(op, ["x"], ["y"], **attrs)
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, height, 6])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 9
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _dilated_geometries():
    for op, h, k, s, d, pb, pe, cip, ceil in itertools.product(
            ("AveragePool", "LpPool"), (5, 8), (2, 3), (1, 2, 3), (2, 3), (0, 1), (0, 2), (0, 1), (0, 1)):
        if pb >= k or pe >= k or d * (k - 1) + 1 > h + pb + pe or (op == "LpPool" and cip):
            continue
        attrs = {"kernel_shape": [k, 2], "strides": [s, 1], "dilations": [d, 1], "ceil_mode": ceil,
                 "pads": [pb, 0, pe, 0]}
        if op == "AveragePool":
            attrs["count_include_pad"] = cip
        yield op, h, attrs


def test_dilated_sweep_matches_onnxruntime() -> None:
    """Every geometry either converts to a Conv form that computes what onnxruntime's dilated pool
    computes, or is refused because its last ceil-mode window starts in the end padding."""
    rng = np.random.default_rng(1)
    converted = 0
    for op, h, attrs in _dilated_geometries():
        model = _dilated(op, h, attrs, 19 if op == "AveragePool" else 18)
        x = rng.standard_normal((1, 2, h, 6)).astype(np.float32)
        expected = _run(model, x)
        irm = ir.from_proto(model)
        try:
            convert_opset(irm, 17)
        except Exception as exc:
            assert "starts in the end padding" in str(exc), (op, h, attrs, exc)
            continue
        out_model = ir.to_proto(irm)
        onnx.checker.check_model(out_model, full_check=True)
        assert "Conv" in {n.op_type for n in out_model.graph.node}
        got = _run(out_model, x)
        assert got.shape == expected.shape, (op, h, attrs)
        np.testing.assert_allclose(got, expected, atol=1e-5, err_msg=str((op, h, attrs)))
        converted += 1
    assert converted > 100


def test_dilated_dynamic_height_with_full_windows() -> None:
    """count_include_pad=1 without ceil mode: every window has all its taps, no static size needed."""
    attrs = {"kernel_shape": [2, 2], "dilations": [2, 1], "pads": [1, 0, 1, 0], "count_include_pad": 1}
    model = _dilated("AveragePool", "H", attrs, 19)
    x = np.random.default_rng(2).standard_normal((1, 2, 7, 6)).astype(np.float32)
    irm = ir.from_proto(model)
    convert_opset(irm, 11)
    np.testing.assert_allclose(_run(ir.to_proto(irm), x), _run(model, x), atol=1e-5)


@pytest.mark.parametrize(("attrs", "reason"), [
    ({"kernel_shape": [2, 2], "dilations": [2, 1], "pads": [1, 0, 1, 0]}, "needs static spatial sizes"),
    ({"kernel_shape": [2, 2], "dilations": [2, 1], "auto_pad": "SAME_UPPER"}, "disagree on its padding"),
])
def test_dilated_refusals(attrs: dict, reason: str) -> None:
    irm = ir.from_proto(_dilated("AveragePool", "H", attrs, 19))
    with pytest.raises(Exception, match=reason):
        convert_opset(irm, 18)
