"""Parity of an opset conversion on a model of large weights loads them once (issue 39,
``unframe.validate.shared``): the graph before runs once as the reference and hands the values
where the converted nodes start to the candidate, which runs only those nodes; when the converted
nodes read large weights themselves, the reference's session is closed before theirs opens.

The models are small; the size from which weights count as large is lowered for the test
(``LARGE_WEIGHTS``), so the same code runs as on a 2 GB model. Controls: a converted node broken
after the conversion fails parity (the rest is really compared, on the reference's values), and
without the shared path two full sessions are open at once (counted)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import unframe
import unframe.validate.shared as shared
from unframe.errors import ParityError
from unframe.validate import onnxruntime as uort


def _model(folder: Path, *, transposed: bool = False) -> Path:
    """opset 17: x -> MatMul(W1) -> Tanh -> MatMul(W2) -> ReduceMax(axes=[1] attribute) -> y
    (ReduceMax takes its axes as an input from opset 18: converted); with ``transposed`` a
    MatMul(Transpose(W3)) after the Tanh (Transpose's schema changes at 21: a converted node
    reading a weight). Weights in external data, perturbed so the outputs are of order 1."""
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((32, 48)) * 0.4).astype(np.float32)
    w2 = (rng.standard_normal((48, 16)) * 0.4).astype(np.float32)
    w3 = (rng.standard_normal((48, 48)) * 0.4).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Tanh", ["h"], ["t"])]
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")]
    last = "t"
    if transposed:
        nodes += [helper.make_node("Transpose", ["w3"], ["w3t"], perm=[1, 0]),
                  helper.make_node("MatMul", ["t", "w3t"], ["g"])]
        inits.append(numpy_helper.from_array(w3, "w3"))
        last = "g"
    nodes += [helper.make_node("MatMul", [last, "w2"], ["m"]),
              helper.make_node("ReduceMax", ["m"], ["y"], axes=[1], keepdims=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = folder / "m.onnx"
    onnx.save(proto, path, save_as_external_data=True, location="m.onnx.data", size_threshold=1024)
    return path


@pytest.fixture
def large(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared, "LARGE_WEIGHTS", 1024)


@pytest.fixture
def sessions(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many onnxruntime sessions (of any model) are open at once, at most."""
    count = {"open": 0, "peak": 0, "made": 0}
    real_init, real_close = uort.OnnxRuntimeRunner.__init__, uort.OnnxRuntimeRunner.close

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        count["open"] += 1
        count["made"] += 1
        count["peak"] = max(count["peak"], count["open"])

    def close(self):
        if getattr(self, "session", None) is not None or getattr(self, "remote", None) is not None:
            count["open"] -= 1
        real_close(self)

    monkeypatch.setattr(uort.OnnxRuntimeRunner, "__init__", init)
    monkeypatch.setattr(uort.OnnxRuntimeRunner, "close", close)
    return count


def _ort(path: Path, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_the_weights_are_loaded_once_and_the_converted_nodes_run_on_the_references_values(tmp_path, large):
    source = _model(tmp_path)
    result = unframe.convert_opset(source, 21, output=tmp_path / "m21.onnx")
    assert result.report, str(result.report)
    note = next(n for n in result.notes if n.startswith("opset parity on large weights"))
    assert "3 node(s) unchanged" in note and "2 converted" in note and "1 boundary value" in note, note
    x = np.random.default_rng(1).standard_normal((3, 32)).astype(np.float32)
    np.testing.assert_allclose(_ort(tmp_path / "m21.onnx", x), _ort(source, x), rtol=1e-5, atol=1e-5)
    assert float(np.abs(_ort(source, x)).max()) > 0.3  # of order 1: parity can fail here


def test_a_converted_node_that_computes_wrong_fails_parity(tmp_path, large, monkeypatch):
    from unframe import version_converter

    real = version_converter.convert_opset

    def broken(model, target, **kwargs):
        out = real(model, target, **kwargs)
        reduce = next(n for n in model.graph if n.op_type == "ReduceMax")
        reduce.attributes["keepdims"] = __import__("onnx_ir").AttrInt64("keepdims", 1)  # wrong shape
        return out

    monkeypatch.setattr(version_converter, "convert_opset", broken)
    with pytest.raises(ParityError, match="opset"):
        unframe.convert_opset(_model(tmp_path), 21, output=tmp_path / "m21.onnx")
    assert not (tmp_path / "m21.onnx").exists()


def test_a_converted_node_reading_large_weights_opens_one_session_at_a_time(tmp_path, large, sessions):
    source = _model(tmp_path, transposed=True)
    result = unframe.convert_opset(source, 21, output=tmp_path / "m21.onnx")
    assert result.report, str(result.report)
    note = next(n for n in result.notes if n.startswith("opset parity on large weights"))
    assert "2 node(s) unchanged" in note, note  # MatMul(W1), Tanh; Transpose-21 and after are the rest
    assert sessions["made"] == 2 and sessions["peak"] == 1  # the reference's, then the rest's
    x = np.random.default_rng(2).standard_normal((4, 32)).astype(np.float32)
    np.testing.assert_allclose(_ort(tmp_path / "m21.onnx", x), _ort(source, x), rtol=1e-5, atol=1e-5)


def test_small_weights_keep_the_whole_graph_checked(tmp_path, sessions):
    result = unframe.convert_opset(_model(tmp_path), 21, output=tmp_path / "m21.onnx")
    assert result.report, str(result.report)
    assert not any(n.startswith("opset parity on large weights") for n in result.notes)
    assert sessions["peak"] == 2  # both whole graphs, side by side (what large weights avoid)


def test_the_cut_of_a_graph_the_converter_left_alone_is_all_shared(tmp_path):
    import onnx_ir as ir

    model = ir.load(_model(tmp_path))
    before = model.clone()
    plan = shared.cut(before, model)
    assert (plan.shared, plan.rest, plan.boundary) == (4, 0, [])  # nothing converted: all of it
    assert plan.prefix_outputs == ["y"]
