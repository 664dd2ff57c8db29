"""Scaler, Normalizer, Binarizer, Imputer, OneHotEncoder, LabelEncoder, ArrayFeatureExtractor,
FeatureVectorizer and ZipMap lowered to standard ONNX give onnxruntime's results (NaN, zero rows,
values between categories, unknown keys included); CastMap is refused with the reason."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from mlt_models import IR_VERSION, assert_same, lowered, run_ort
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

from unframe.passes.ml_to_tensor import check

RNG = np.random.default_rng(0)
X = RNG.normal(size=(60, 3)).astype(np.float32)
X[::7, 1] = np.nan
X[5] = 0.0  # a zero row (Normalizer)


def model(op: str, x_type: int, out_type: int, shape: list[Any] | None = None, ml_opset: int = 3,
          extra: dict[str, np.ndarray] | None = None, inputs: int = 1, **attrs: Any) -> onnx.ModelProto:
    names = ["X"] + [f"X{i}" for i in range(1, inputs)] + list(extra or {})
    node = oh.make_node(op, names, ["Y"], domain="ai.onnx.ml", name="ml", **attrs)
    ins = [oh.make_tensor_value_info(n, x_type, shape) for n in names[:inputs]]
    inits = [nh.from_array(v, k) for k, v in (extra or {}).items()]
    graph = oh.make_graph([node], "g", ins, [oh.make_tensor_value_info("Y", out_type, None)], inits)
    return oh.make_model(graph, ir_version=IR_VERSION, opset_imports=[
        oh.make_opsetid("", 21), oh.make_opsetid("ai.onnx.ml", ml_opset)])


def same_as_ort(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    ref = run_ort(proto, feeds)
    low, report = lowered(proto)
    assert report.lowered and not any(n.domain == "ai.onnx.ml" for n in low.graph.node)
    got = run_ort(low, feeds)
    assert len(np.unique(ref[0])) > 1, "constant reference"
    assert_same(ref, got)


def test_scaler() -> None:
    same_as_ort(model("Scaler", TP.FLOAT, TP.FLOAT, [None, 3], offset=[1.0, 0.0, -0.5],
                      scale=[2.0, 3.0, 0.25]), {"X": X})


def test_scaler_on_integers() -> None:
    xi = RNG.integers(-5, 5, size=(20, 3)).astype(np.int64)
    same_as_ort(model("Scaler", TP.INT64, TP.FLOAT, [None, 3], offset=[1.0], scale=[0.5]), {"X": xi})


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer(norm: str) -> None:
    same_as_ort(model("Normalizer", TP.FLOAT, TP.FLOAT, [None, 3], norm=norm), {"X": X})


def test_binarizer() -> None:
    same_as_ort(model("Binarizer", TP.FLOAT, TP.FLOAT, [None, 3], threshold=0.25),
                {"X": np.nan_to_num(X, nan=0.25)})  # onnxruntime refuses NaN here


@pytest.mark.parametrize("replaced", [float("nan"), 0.0])
def test_imputer(replaced: float) -> None:
    same_as_ort(model("Imputer", TP.FLOAT, TP.FLOAT, [None, 3], replaced_value_float=replaced,
                      imputed_value_floats=[9.0, 8.0, 7.0]), {"X": X})


def test_imputer_on_integers() -> None:
    xi = RNG.integers(0, 3, size=(20, 2)).astype(np.int64)
    same_as_ort(model("Imputer", TP.INT64, TP.INT64, [None, 2], replaced_value_int64=0,
                      imputed_value_int64s=[5, 6]), {"X": xi})


def test_one_hot_encoder_on_floats_truncates() -> None:
    """onnxruntime matches the integer part: 2.7 is category 2, -1.2 is -1, NaN none."""
    x = np.array([[1.0, 2.7], [-1.2, 7.0], [np.nan, 3.0], [2.0, -0.5]], np.float32)
    same_as_ort(model("OneHotEncoder", TP.FLOAT, TP.FLOAT, [None, 2], cats_int64s=[1, 2, 7, -1, 0],
                      zeros=1), {"X": x})


@pytest.mark.parametrize("shape", [[None, 2], [None]])
def test_one_hot_encoder_on_integers(shape: list[Any]) -> None:
    xi = RNG.integers(0, 5, size=(20, 2) if len(shape) == 2 else (20,)).astype(np.int64)
    same_as_ort(model("OneHotEncoder", TP.INT64, TP.FLOAT, shape, cats_int64s=[1, 2, 4], zeros=1),
                {"X": xi})


def test_one_hot_encoder_on_strings_at_opset_19() -> None:
    xs = np.array([["a", "b"], ["c", "zz"], ["b", "a"]], dtype=object)
    same_as_ort(model("OneHotEncoder", TP.STRING, TP.FLOAT, [None, 2], cats_strings=["a", "b", "c"],
                      zeros=1), {"X": xs})


@pytest.mark.parametrize("keys, values, x_type, out_type, x", [
    ({"keys_floats": [1.0, 2.5, 3.0]}, {"values_int64s": [10, 20, 30], "default_int64": -7},
     TP.FLOAT, TP.INT64, np.array([1.0, 2.5, np.nan, 3.0, 4.0], np.float32)),
    ({"keys_int64s": [1, 2, 3]}, {"values_floats": [0.5, 1.5, 2.5], "default_float": -1.0},
     TP.INT64, TP.FLOAT, np.array([[1, 5], [2, 3]], np.int64)),
    ({"keys_int64s": [4, 5]}, {"values_strings": ["x", "y"], "default_string": "?"},
     TP.INT64, TP.STRING, np.array([4, 9, 5], np.int64)),
])
def test_label_encoder(keys: dict, values: dict, x_type: int, out_type: int, x: np.ndarray) -> None:
    same_as_ort(model("LabelEncoder", x_type, out_type, None, ml_opset=2, **keys, **values), {"X": x})


def test_label_encoder_tensor_attributes() -> None:
    same_as_ort(model("LabelEncoder", TP.INT64, TP.INT64, None, ml_opset=4,
                      keys_tensor=nh.from_array(np.array([1, 2], np.int64)),
                      values_tensor=nh.from_array(np.array([7, 8], np.int64)),
                      default_tensor=nh.from_array(np.array([-1], np.int64))),
                {"X": np.array([1, 5, 2, 2], np.int64)})


@pytest.mark.parametrize("x, index", [
    (X, np.array([2, 0], np.int64)),
    (np.array([5.0, 6.0, 7.0], np.float32), np.array([2, 0, 1, 1], np.int64)),  # 1-D: [1, k]
    (X, np.array([[2], [0]], np.int64)),
])
def test_array_feature_extractor(x: np.ndarray, index: np.ndarray) -> None:
    same_as_ort(model("ArrayFeatureExtractor", TP.FLOAT, TP.FLOAT, list(x.shape), extra={"I": index}),
                {"X": x})


@pytest.mark.parametrize("dims", [[2, 3], [5, 1]])
def test_feature_vectorizer(dims: list[int]) -> None:
    """Each input cut or zero-padded to its stated width, then concatenated."""
    proto = model("FeatureVectorizer", TP.FLOAT, TP.FLOAT, [None, 3], inputs=2, inputdimensions=dims)
    same_as_ort(proto, {"X": X, "X1": np.abs(X) + 1})


def test_zipmap_becomes_the_probability_matrix() -> None:
    """The output keeps its name; the report states the column order; the original's list of
    dicts read in that order is the lowered matrix."""
    from unframe.passes.ml_to_tensor.host import zipmap_matrix

    node = oh.make_node("ZipMap", ["X"], ["Y"], domain="ai.onnx.ml", classlabels_int64s=[4, 2, 9])
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("X", TP.FLOAT, [None, 3])],
                          [oh.make_value_info("Y", oh.make_sequence_type_proto(
                              oh.make_map_type_proto(TP.INT64, oh.make_tensor_type_proto(TP.FLOAT, []))))])
    proto = oh.make_model(graph, ir_version=IR_VERSION, opset_imports=[oh.make_opsetid("", 21),
                                                                      oh.make_opsetid("ai.onnx.ml", 1)])
    probs = np.abs(X[:10])
    probs = np.nan_to_num(probs / np.nansum(probs, axis=1, keepdims=True))
    ref = run_ort(proto, {"X": probs})[0]
    proto.graph.output[0].ClearField("type")  # onnx-ir holds no map types (the sklearn frontend does this)
    low, report = lowered(proto)
    assert report.zipmap_columns == {"Y": [4, 2, 9]}
    got = run_ort(low, {"X": probs})[0]
    assert [o.name for o in low.graph.output] == ["Y"]
    np.testing.assert_array_equal(got, zipmap_matrix(ref, report.zipmap_columns["Y"]))


def test_cast_map_is_refused_with_the_reason() -> None:
    node = oh.make_node("CastMap", ["X"], ["Y"], domain="ai.onnx.ml", name="cm")
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("X", TP.FLOAT, [None])],
                          [oh.make_tensor_value_info("Y", TP.FLOAT, None)])
    proto = oh.make_model(graph, ir_version=IR_VERSION, opset_imports=[oh.make_opsetid("", 21),
                                                                      oh.make_opsetid("ai.onnx.ml", 1)])
    blockers = check(ir.serde.deserialize_model(proto))
    assert len(blockers) == 1 and "dense tensor input" in blockers[0].reason
