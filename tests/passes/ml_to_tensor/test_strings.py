"""Strings at the edge of a model, for targets that hold none: a string input read by lookups
becomes vocabulary indices, a string output read from a label table becomes label indices; the
stated mappings, applied on the host, make the lowered model answer exactly what the original
does. Anything else is refused with the reason."""

from __future__ import annotations

import json

import numpy as np
import onnx_ir as ir
from mlt_models import IR_VERSION, assert_same, grid_inputs, lowered, random_tree, run_ort, v3_node
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

from unframe.passes.ml_to_tensor import MAPPING_KEY, check
from unframe.passes.ml_to_tensor.host import MappedReference, encode_feed
from unframe.validate.onnxruntime import OnnxRuntimeRunner


def _opsets() -> list:
    return [oh.make_opsetid("", 21), oh.make_opsetid("ai.onnx.ml", 3)]


def string_input_model() -> object:
    """city [N, 2] strings -> Gather column 1 -> OneHotEncoder, and column 0 -> LabelEncoder."""
    nodes = [
        oh.make_node("Gather", ["city", "c1"], ["col1"], axis=1),
        oh.make_node("OneHotEncoder", ["col1"], ["hot"], domain="ai.onnx.ml",
                     cats_strings=["LA", "NY", "SF"], zeros=1),
        oh.make_node("Gather", ["city", "c0"], ["col0"], axis=1),
        oh.make_node("LabelEncoder", ["col0"], ["code"], domain="ai.onnx.ml",
                     keys_strings=["NY", "Oslo"], values_floats=[2.5, -1.0], default_float=0.0),
    ]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("city", TP.STRING, [None, 2])],
                          [oh.make_tensor_value_info("hot", TP.FLOAT, None),
                           oh.make_tensor_value_info("code", TP.FLOAT, None)],
                          [nh.from_array(np.array([1], np.int64), "c1"),
                           nh.from_array(np.array([0], np.int64), "c0")])
    return oh.make_model(graph, ir_version=IR_VERSION, opset_imports=_opsets())


def test_string_input_becomes_vocabulary_indices() -> None:
    proto = string_input_model()
    feed = {"city": np.array([["NY", "LA"], ["Oslo", "SF"], ["Rome", "NY"], ["LA", "Bonn"]],
                             dtype=object)}
    low, report = lowered(proto, encode_strings=True)
    vocab = report.input_vocab["city"]
    assert set(vocab) == {"LA", "NY", "SF", "Oslo"}
    assert [v.type.tensor_type.elem_type for v in low.graph.input] == [TP.INT64]
    encoded = encode_feed(feed, report.input_vocab)
    assert encoded["city"][2, 0] == -1 and encoded["city"].dtype == np.int64  # outside: -1
    assert_same(run_ort(proto, feed), run_ort(low, encoded))
    stated = json.loads({p.key: p.value for p in low.metadata_props}[MAPPING_KEY])
    assert stated["inputs"]["city"]["vocabulary"] == vocab


def test_string_labels_become_indices_and_the_reference_follows() -> None:
    rng = np.random.default_rng(0)
    trees = [random_tree(rng, 4, 3, 3, [0], 0.2) for _ in range(4)]
    node = v3_node(trees, "TreeEnsembleClassifier", n_targets=3, post="SOFTMAX",
                   labels=["cat", "dog", "eel"])
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("X", TP.FLOAT, [None, 3])],
                          [oh.make_tensor_value_info("label", TP.STRING, None),
                           oh.make_tensor_value_info("scores", TP.FLOAT, None)])
    proto = oh.make_model(graph, ir_version=IR_VERSION, opset_imports=_opsets())
    low, report = lowered(proto, encode_strings=True)
    assert report.output_labels == {"label": ["cat", "dog", "eel"]}
    assert [o.name for o in low.graph.output] == ["label", "scores"]
    assert low.graph.output[0].type.tensor_type.elem_type == TP.INT64
    x = grid_inputs(rng, 200, 3)
    original = OnnxRuntimeRunner(proto)
    mapped = MappedReference(original, report.mappings)
    ref = mapped.run({"X": x})
    got = run_ort(low, {"X": x})
    assert len(np.unique(ref["label"])) == 3
    assert_same([ref["label"], ref["scores"]], got)
    strings = original.run({"X": x})["label"]
    np.testing.assert_array_equal(np.array(["cat", "dog", "eel"], dtype=object)[got[0]], strings)


def test_other_string_readers_are_refused() -> None:
    nodes = [oh.make_node("Equal", ["s", "k"], ["eq"]),
             oh.make_node("Cast", ["eq"], ["y"], to=TP.FLOAT)]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("s", TP.STRING, [None])],
                          [oh.make_tensor_value_info("y", TP.FLOAT, None)],
                          [nh.from_array(np.array(["a"], dtype=object), "k")])
    proto = oh.make_model(graph, ir_version=IR_VERSION, opset_imports=_opsets())
    blockers = check(ir.serde.deserialize_model(proto), encode_strings=True)
    assert len(blockers) == 1 and "Equal" in blockers[0].reason and blockers[0].op == "Equal"
    assert check(ir.serde.deserialize_model(proto)) == []  # no encoding asked: nothing to refuse
