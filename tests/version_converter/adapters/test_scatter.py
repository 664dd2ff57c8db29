"""Golden node cases through the scatter adapters: each path is converted step by step, checked with the
full checker and strict shape inference, run, and compared with the case's expected outputs."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from adapter_cases import check_path
from onnx import TensorProto
from onnx import helper as oh

from unframe.errors import UnsupportedError
from unframe.version_converter import convert_opset

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_scatter_with_axis", [11, 10], ()),
    ("test_scatter_elements_with_axis", [10, 11], ()),
    # reduction: the updates applied one at a time in a Loop (duplicates combine in order)
    ("test_scatternd_add", [15, 11], ()),
    ("test_scatternd_multiply", [13], ()),
    ("test_scatternd_max", [17, 11], ()),
    ("test_scatternd_min_with_element_indices", [17], ()),
    ("test_scatter_elements_with_duplicate_indices", [15, 11], ()),
    ("test_scatter_elements_with_reduction_max", [17, 13], ()),
    ("test_scatter_elements_with_negative_indices", [15], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"


def _spec_scatter_nd(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, f) -> np.ndarray:
    out = data.copy()
    for idx in np.ndindex(indices.shape[:-1]):
        at = tuple(indices[idx])
        out[at] = f(out[at], updates[idx])
    return out


_F = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _model(op: str, reduction: str, shapes: dict[str, list], index_type: int, attrs: dict) -> onnx.ModelProto:
    node = oh.make_node(op, ["data", "indices", "updates"], ["y"], reduction=reduction, **attrs)
    types = {"data": TensorProto.FLOAT, "indices": index_type, "updates": TensorProto.FLOAT}
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info(n, types[n], shapes[n]) for n in types],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, shapes["data"])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def _run_converted(model: onnx.ModelProto, target: int, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    irm = ir.from_proto(model)
    convert_opset(irm, target)
    out_model = ir.to_proto(irm)
    onnx.checker.check_model(out_model, full_check=True)
    onnx.shape_inference.infer_shapes(out_model, check_type=True, strict_mode=True)
    assert "Loop" in {n.op_type for n in out_model.graph.node}
    return ort.InferenceSession(out_model.SerializeToString()).run(None, feeds)[0]


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_scatter_nd_duplicates_follow_the_spec_loop(reduction: str) -> None:
    """Many duplicate slice and element indices (negative ones too), data of unknown batch size."""
    rng = np.random.default_rng(0)
    data = rng.standard_normal((4, 3, 2)).astype(np.float32)
    for indices, upd_shape in ((rng.integers(-4, 4, (5, 2, 1)), (5, 2, 3, 2)),
                               (rng.integers(-2, 2, (6, 3)), (6,))):
        updates = rng.standard_normal(upd_shape).astype(np.float32)
        shapes = {"data": ["N", 3, 2], "indices": list(indices.shape), "updates": list(upd_shape)}
        model = _model("ScatterND", reduction, shapes, TensorProto.INT64, {})
        feeds = {"data": data, "indices": indices, "updates": updates}
        got = _run_converted(model, 11 if reduction in ("add", "mul") else 13, feeds)
        np.testing.assert_allclose(got, _spec_scatter_nd(data, indices, updates, _F[reduction]), rtol=1e-6)


@pytest.mark.parametrize("reduction", ["add", "max"])
def test_scatter_elements_duplicates_follow_the_spec_loop(reduction: str) -> None:
    rng = np.random.default_rng(1)
    data = rng.standard_normal((3, 4)).astype(np.float32)
    indices = rng.integers(-4, 4, (3, 6)).astype(np.int32)
    updates = rng.standard_normal((3, 6)).astype(np.float32)
    shapes = {"data": [3, 4], "indices": [3, 6], "updates": [3, 6]}
    model = _model("ScatterElements", reduction, shapes, TensorProto.INT32, {"axis": -1})
    expected = data.copy()
    for i, j in np.ndindex(indices.shape):
        expected[i, indices[i, j]] = _F[reduction](expected[i, indices[i, j]], updates[i, j])
    got = _run_converted(model, 15, {"data": data, "indices": indices, "updates": updates})
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_scatter_elements_with_run_time_indices_shape_is_refused() -> None:
    shapes = {"data": [3, 4], "indices": [3, "K"], "updates": [3, "K"]}
    irm = ir.from_proto(_model("ScatterElements", "add", shapes, TensorProto.INT64, {"axis": 1}))
    with pytest.raises(UnsupportedError, match="needs a static indices shape"):
        convert_opset(irm, 15)
