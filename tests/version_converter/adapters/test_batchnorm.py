"""BatchNormalization 14->13 with training_mode=1: batch statistics and running updates written out."""

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
    ("test_batchnorm_example_training_mode", [13, 7], ()),
    ("test_batchnorm_epsilon_training_mode", [13, 9], ()),
    ("test_batchnorm_example", [13], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[p[0] for p in PAIRS])
def test_golden_cases(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"


def _model(outputs: list[str], stats_type: int = TensorProto.FLOAT) -> onnx.ModelProto:
    node = oh.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], outputs, training_mode=1,
                        momentum=0.8, epsilon=1e-3)
    inputs = [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 7])]
    inputs += [oh.make_tensor_value_info(n, TensorProto.FLOAT if n in "sb" else stats_type, [3]) for n in "sbmv"]
    graph = oh.make_graph([node], "g", inputs,
                          [oh.make_tensor_value_info(o, TensorProto.FLOAT if o == "y" else stats_type, None)
                           for o in outputs if o])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 15)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _expected(x: np.ndarray, s: np.ndarray, b: np.ndarray, m: np.ndarray, v: np.ndarray) -> list[np.ndarray]:
    mean, var = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    y = (x - mean[:, None]) / np.sqrt(var[:, None] + 1e-3) * s[:, None] + b[:, None]
    return [y, m * 0.8 + mean * 0.2, v * 0.8 + var * 0.2]


@pytest.mark.parametrize("outputs", [["y", "rm", "rv"], ["y", "", ""], ["y", "", "rv"]])
def test_3d_dynamic_batch_matches_the_spec(outputs: list[str]) -> None:
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((4, 3, 7)).astype(np.float32),
             **{n: rng.random(3).astype(np.float32) + 0.5 for n in "sbmv"}}
    irm = ir.from_proto(_model(outputs))
    convert_opset(irm, 9)
    out_model = ir.to_proto(irm)
    onnx.checker.check_model(out_model, full_check=True)
    onnx.shape_inference.infer_shapes(out_model, check_type=True, strict_mode=True)
    got = ort.InferenceSession(out_model.SerializeToString()).run(None, feeds)
    expected = _expected(*(feeds[n] for n in "xsbmv"))
    wanted = [expected[i] for i, o in enumerate(outputs) if o]
    for e, g in zip(wanted, got, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


def test_mixed_dtypes_are_refused() -> None:
    irm = ir.from_proto(_model(["y", "rm", "rv"], TensorProto.DOUBLE))
    with pytest.raises(UnsupportedError, match="different"):
        convert_opset(irm, 13)
