"""TF1 deployment files as tf2onnx's own suite builds them (issue 34): frozen graphs whose
``PlaceholderWithDefault`` inputs are fed or left at their default, lookup tables in a frozen graph
that kept its initializer, and TF1 SavedModels (``tf.compat.v1.saved_model.Builder``) whose tables
are filled from a vocabulary in their assets.

Controls (the code before this change): a default left unfed was exit 9 ("input_names needs to be
provided" without other inputs; "non-const default value ... --use_default" for a computed one); a
fed constant default was folded by tf2onnx and parity failed (exit 5); a frozen graph's table was
exit 3 (TF's "table not initialized": the initializer never ran) or exit 4 ("can't map
HashTableV2"); a TF1 SavedModel with a table was exit 9 ("Failed to import metagraph")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest

tf = pytest.importorskip("tensorflow", reason="needs the tf extra (tensorflow)")
pytest.importorskip("tf2onnx", reason="needs the tf extra (tf2onnx)")

import unframe  # noqa: E402
from unframe.errors import TrustRequiredError, UnsupportedError  # noqa: E402

tf1 = tf.compat.v1
X = np.array([[1.0, 2.0], [-3.0, -4.0]], np.float32)
Y = np.array([[2.0, -4.0], [6.0, -8.0]], np.float32)
VOCAB = ["apple", "pear", "banana", "cherry ♥", "grape"]


def _run(model: ir.Model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    proto = ir.serde.serialize_model(model)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _computed_default(path: Path) -> None:
    """out = (x + y) + z, where z defaults to x + y (tf2onnx's own computed-default case)."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, X.shape, name="x")
        y = tf1.placeholder(tf.float32, Y.shape, name="y")
        total = tf.add(x, y)
        z = tf1.placeholder_with_default(total, X.shape, name="z")
        tf.identity(tf.add(total, z), name="out")
    path.write_bytes(graph.as_graph_def().SerializeToString())


def test_a_computed_default_left_unfed_is_its_default(tmp_path: Path) -> None:
    _computed_default(tmp_path / "g.pb")
    result = unframe.convert(tmp_path / "g.pb", to="onnx", outputs=["out:0"], sample_inputs={"x": X, "y": Y})
    assert result.report, str(result.report)
    assert [v.name for v in result.model.graph.inputs] == ["x", "y"]
    b = X[::-1].copy()
    np.testing.assert_allclose(_run(result.model, {"x": b, "y": Y})[0], 2 * (b + Y))


def test_a_fed_default_is_an_input(tmp_path: Path) -> None:
    _computed_default(tmp_path / "g.pb")
    z = np.full_like(X, 10.0)
    result = unframe.convert(tmp_path / "g.pb", to="onnx", outputs=["out:0"],
                             sample_inputs={"x": X, "y": Y, "z": z})
    assert result.report, str(result.report)
    assert sorted(v.name for v in result.model.graph.inputs) == ["x", "y", "z"]
    np.testing.assert_allclose(_run(result.model, {"x": X, "y": Y, "z": -z})[0], X + Y - z)


@pytest.mark.parametrize("fed", [False, True], ids=["default", "fed"])
def test_a_constant_default_with_no_other_input(tmp_path: Path, fed: bool) -> None:
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder_with_default(tf.constant(X), X.shape, name="x")
        tf.identity(x * 3.0, name="out")
    (tmp_path / "g.pb").write_bytes(graph.as_graph_def().SerializeToString())
    samples = {"x": Y} if fed else {}
    result = unframe.convert(tmp_path / "g.pb", to="onnx", outputs=["out:0"], sample_inputs=samples)
    assert result.report, str(result.report)
    if fed:  # tf2onnx folds the constant default: the feed would be ignored
        np.testing.assert_allclose(_run(result.model, {"x": Y})[0], Y * 3.0)
    else:
        assert len(result.model.graph.inputs) == 0
        np.testing.assert_allclose(_run(result.model, {})[0], X * 3.0)


def _frozen_table(path: Path, keep_initializer: bool) -> None:
    """A string -> id table built from constants, frozen with or without its initializer."""
    graph = tf.Graph()
    with graph.as_default():
        words = tf1.placeholder(tf.string, [None], name="words")
        init = tf.lookup.KeyValueTensorInitializer(tf.constant(VOCAB), tf.constant(np.arange(5, dtype=np.int64) * 7))
        table = tf.lookup.StaticHashTable(init, default_value=-1)
        tf.identity(table.lookup(words) + 1, name="ids")
        with tf1.Session(graph=graph) as sess:
            sess.run(tf1.tables_initializer())
            keep = ["ids"] + (["init_all_tables"] if keep_initializer else [])
            frozen = tf1.graph_util.convert_variables_to_constants(sess, graph.as_graph_def(), keep)
    path.write_bytes(frozen.SerializeToString())


def test_a_frozen_graph_that_kept_its_table_initializer(tmp_path: Path) -> None:
    _frozen_table(tmp_path / "t.pb", keep_initializer=True)
    words = np.array(["pear", "nope", "cherry ♥"], dtype=object)
    result = unframe.convert(tmp_path / "t.pb", to="onnx", outputs=["ids:0"], sample_inputs={"words": words})
    assert result.report, str(result.report)
    other = np.array(["grape", "apple", "x", "banana"], dtype=object)
    np.testing.assert_array_equal(_run(result.model, {"words": other})[0], [29, 1, 0, 15])


def test_a_frozen_table_without_its_initializer_is_refused_by_name(tmp_path: Path) -> None:
    _frozen_table(tmp_path / "t.pb", keep_initializer=False)
    with pytest.raises(UnsupportedError) as caught:
        unframe.convert(tmp_path / "t.pb", to="onnx", outputs=["ids:0"],
                        sample_inputs={"words": np.array(["pear"], dtype=object)})
    assert caught.value.exit_code == 4
    assert "no contents in the file" in caught.value.message and "init_all_tables" in caught.value.hint
    assert [b.node for b in caught.value.blockers] == ["hash_table"]


def _tf1_saved_model(path: Path, vocab: Path, size_only: bool = False) -> None:
    """An Estimator-style TF1 SavedModel: a vocabulary table filled from an asset by its main op."""
    vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    graph = tf.Graph()
    with graph.as_default(), tf1.Session(graph=graph) as sess:
        words = tf1.placeholder(tf.string, [None], name="words")
        filename = tf.constant(str(vocab))
        tf1.add_to_collection(tf1.GraphKeys.ASSET_FILEPATHS, filename)  # as index_table_from_file does
        table = tf.lookup.StaticHashTable(
            tf.lookup.TextFileInitializer(filename, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
                                          tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER), default_value=-1)
        ids = table.size() + 0 if size_only else table.lookup(words) * 2
        sess.run(tf1.tables_initializer())
        info = tf1.saved_model.utils.build_tensor_info
        signature = tf1.saved_model.signature_def_utils.build_signature_def(
            inputs={"words": info(words)}, outputs={"ids": info(ids)},
            method_name=tf1.saved_model.signature_constants.PREDICT_METHOD_NAME)
        builder = tf1.saved_model.Builder(str(path))
        builder.add_meta_graph_and_variables(sess, ["serve"], signature_def_map={"serving_default": signature},
                                             main_op=tf1.tables_initializer(),
                                             assets_collection=tf1.get_collection(tf1.GraphKeys.ASSET_FILEPATHS))
        builder.save()
    vocab.unlink()  # the SavedModel holds its own copy among its assets


def test_a_tf1_saved_model_with_a_vocabulary_table(tmp_path: Path) -> None:
    _tf1_saved_model(tmp_path / "sm", tmp_path / "vocab.txt")
    assert (tmp_path / "sm" / "assets" / "vocab.txt").exists()
    result = unframe.convert(tmp_path / "sm", to="onnx",
                             sample_inputs={"words": np.array(["pear", "cherry ♥", "?"], dtype=object)})
    assert result.report, str(result.report)
    got = _run(result.model, {"words": np.array(["grape", "zzz", "apple"], dtype=object)})[0]
    np.testing.assert_array_equal(got, [8, -2, 0])


def test_a_tf1_saved_model_keeps_an_input_its_output_does_not_read(tmp_path: Path) -> None:
    _tf1_saved_model(tmp_path / "sm", tmp_path / "vocab.txt", size_only=True)
    result = unframe.convert(tmp_path / "sm", to="onnx", sample_inputs={"words": np.array(["pear"], dtype=object)})
    assert result.report, str(result.report)
    assert [v.name for v in result.model.graph.inputs] == ["words"]
    assert _run(result.model, {"words": np.array(["a", "b"], dtype=object)})[0] == len(VOCAB)


def test_a_frozen_table_read_from_a_file_needs_trust(tmp_path: Path) -> None:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    graph = tf.Graph()
    with graph.as_default(), tf1.Session(graph=graph) as sess:
        words = tf1.placeholder(tf.string, [None], name="words")
        table = tf.lookup.StaticHashTable(
            tf.lookup.TextFileInitializer(str(vocab), tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
                                          tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER), default_value=-1)
        tf.identity(table.lookup(words), name="ids")
        sess.run(tf1.tables_initializer())
        frozen = tf1.graph_util.convert_variables_to_constants(sess, graph.as_graph_def(), ["ids", "init_all_tables"])
    (tmp_path / "t.pb").write_bytes(frozen.SerializeToString())
    words = {"words": np.array(["banana"], dtype=object)}
    with pytest.raises(TrustRequiredError, match="InitializeTableFromTextFileV2"):
        unframe.convert(tmp_path / "t.pb", to="onnx", outputs=["ids:0"], sample_inputs=words)
    result = unframe.convert(tmp_path / "t.pb", to="onnx", outputs=["ids:0"], sample_inputs=words, trust=True)
    assert _run(result.model, {"words": np.array(["cherry ♥", "pear"], dtype=object)})[0].tolist() == [3, 1]
