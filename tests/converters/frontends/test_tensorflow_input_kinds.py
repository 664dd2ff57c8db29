"""Every TF input kind a peer (tf2onnx) takes (issue 34): a ConcreteFunction, a function without
inputs, TF1-style functions that raise while tracing (typed, TF's telling line first), a frozen
GraphDef ``.pb`` with its input and output names, UTF-8 string samples as ``str``/``bytes``/object
arrays, unique output names for a Keras layer with several outputs, outputs of unknown rank; and
(issue 36) dict inputs through Keras' own export route and a captured constant that tf2onnx turns
into a graph input.

Controls (checked against the code before this change): the ConcreteFunction and the function
without inputs were exit 2; the TF1-style function escaped as a bare ValueError; a .pb was not
taken (exit 2); object-dtype string samples were exit 4 ("dtype object"); ``LSTM(return_state=True)``
gave three outputs named ``lstm`` (exit 9); Keras' export of the dict model got a flat signature;
the captured constant stayed a graph input nobody feeds; the unknown-rank output was exit 4."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest

tf = pytest.importorskip("tensorflow", reason="needs the tf extra (tensorflow)")
tf2onnx = pytest.importorskip("tf2onnx", reason="needs the tf extra (tf2onnx)")

import unframe  # noqa: E402
from unframe.errors import InputError, TrustRequiredError  # noqa: E402


def _session(model) -> ort.InferenceSession:
    proto = ir.serde.serialize_model(model) if isinstance(model, ir.Model) else model
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


W = _rng(5).standard_normal((4, 3)).astype(np.float32)


@tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
def affine(x):
    return tf.matmul(x, W) + 0.5


def test_concrete_function() -> None:
    concrete = affine.get_concrete_function()
    result = unframe.convert(concrete, from_="tf", to="onnx")
    assert result.report, str(result.report)
    feed = _rng(1).standard_normal((5, 4)).astype(np.float32)
    got = _session(result.model).run(None, {result.model.graph.inputs[0].name: feed})[0]
    np.testing.assert_allclose(got, feed @ W + 0.5, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("samples", [{}, None], ids=["sample_inputs={}", "no samples"])
def test_function_without_inputs(samples) -> None:
    table = _rng(2).standard_normal((2, 3)).astype(np.float32)
    fn = tf.function(lambda: tf.nn.softmax(tf.constant(table) * 3.0))
    result = unframe.convert(fn, to="onnx", sample_inputs=samples)
    assert result.report, str(result.report)
    assert len(result.model.graph.inputs) == 0
    got = _session(result.model).run(None, {})[0]
    np.testing.assert_allclose(got, tf.nn.softmax(table * 3.0).numpy(), rtol=1e-5)


def test_tf1_style_function_is_a_typed_error_with_tfs_line_first() -> None:
    @tf.function
    def makes_variables(x):
        v = tf.Variable(tf.ones_like(x))  # TF1 habit: a variable created on every call
        return x * v

    with pytest.raises(InputError) as caught:
        unframe.convert(makes_variables, to="onnx", sample_inputs=np.ones((2, 2), np.float32))
    message = caught.value.message
    assert message.startswith("ValueError: tf.function only supports singleton tf.Variables"), message
    assert "in user code at test_tensorflow_input_kinds.py:" in message and "makes_variables" in message
    assert "\n" not in str(caught.value)


def _frozen_graph(path: Path, *, write_file: bool = False) -> np.ndarray:
    weights = _rng(3).standard_normal((3, 2)).astype(np.float32)
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        y = tf.identity(tf.nn.relu(tf.matmul(x, weights)) + 1.0, name="y")
        tf.identity(y * 2.0, name="twice")
        if write_file:
            tf.io.write_file(str(path) + ".leak", tf.strings.as_string(tf.reduce_sum(y)), name="leak")
    path.write_bytes(graph.as_graph_def().SerializeToString())
    return weights


def test_frozen_graphdef_with_its_output_names(tmp_path: Path) -> None:
    weights = _frozen_graph(tmp_path / "frozen.pb")
    x = _rng(4).standard_normal((4, 3)).astype(np.float32)
    # tf2onnx-style names: the input as "x:0", the output named as --outputs y:0
    result = unframe.convert(tmp_path / "frozen.pb", to="onnx", outputs=["y:0"], sample_inputs={"x:0": x})
    assert result.report, str(result.report)
    assert [v.name for v in result.model.graph.inputs] == ["x"]
    assert [v.name for v in result.model.graph.outputs] == ["y"]
    got = _session(result.model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, np.maximum(x @ weights, 0) + 1.0, rtol=1e-5, atol=1e-6)


def test_frozen_graphdef_from_the_cli_finds_its_outputs(tmp_path: Path) -> None:
    weights = _frozen_graph(tmp_path / "frozen.pb")
    out = tmp_path / "frozen.onnx"
    proc = subprocess.run([sys.executable, "-m", "unframe.cli.main", "convert", str(tmp_path / "frozen.pb"),
                           "-o", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["twice"]  # the tensor no node consumes
    x = _rng(6).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], (np.maximum(x @ weights, 0) + 1.0) * 2.0,
                               rtol=1e-5, atol=1e-6)
    named = tmp_path / "named.onnx"
    proc = subprocess.run([sys.executable, "-m", "unframe.cli.main", "convert", str(tmp_path / "frozen.pb"),
                           "--outputs", "y:0,twice:0", "-o", str(named)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    session = ort.InferenceSession(str(named), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["y", "twice"]


def test_frozen_graphdef_that_writes_files_needs_trust(tmp_path: Path) -> None:
    _frozen_graph(tmp_path / "leaky.pb", write_file=True)
    with pytest.raises(TrustRequiredError, match="WriteFile"):
        unframe.convert(tmp_path / "leaky.pb", to="onnx", outputs=["y:0"])
    assert not Path(str(tmp_path / "leaky.pb") + ".leak").exists()


def test_a_pb_that_is_no_graphdef_is_refused(tmp_path: Path) -> None:
    (tmp_path / "junk.pb").write_bytes(b"\xff\x00 definitely not a protobuf \x12")
    with pytest.raises(InputError, match="not a frozen TensorFlow GraphDef"):
        unframe.convert(tmp_path / "junk.pb", to="onnx")


@pytest.mark.parametrize("kind", ["object-str", "object-bytes", "unicode", "bytes-scalar-list"])
def test_utf8_string_samples(kind: str) -> None:
    words = ["héllo", "wörld", "日本語", "plain"]
    sample = {"object-str": np.array(words, dtype=object),
              "object-bytes": np.array([w.encode() for w in words], dtype=object),
              "unicode": np.array(words),
              "bytes-scalar-list": [w.encode() for w in words]}[kind]

    @tf.function
    def reorder(s):
        return tf.reverse(s, [0]), tf.gather(s, [2, 2, 0])

    result = unframe.convert(reorder, to="onnx", sample_inputs=(sample,))
    assert result.report, str(result.report)
    got = _session(result.model).run(None, {result.model.graph.inputs[0].name: np.array(words, dtype=object)})
    assert list(got[0]) == words[::-1]
    assert list(got[1]) == ["日本語", "日本語", "héllo"]


def test_lstm_with_states_gets_unique_output_names() -> None:
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((5, 3), name="seq")
    model = keras.Model(inp, keras.layers.LSTM(4, return_state=True, name="lstm")(inp))
    assert list(model.output_names) == ["lstm", "lstm", "lstm"]  # what Keras names them
    x = _rng(7).standard_normal((2, 5, 3)).astype(np.float32) * 2
    result = unframe.convert(model, to="onnx", sample_inputs=x)
    assert result.report, str(result.report)
    assert [v.name for v in result.model.graph.outputs] == ["lstm", "lstm_1", "lstm_2"]
    got = _session(result.model).run(None, {"seq": x})
    for g, want in zip(got, model(x, training=False), strict=True):
        np.testing.assert_allclose(g, np.asarray(want), rtol=1e-4, atol=1e-5)


def _dict_model():
    import keras

    keras.utils.set_random_seed(0)
    ids = keras.Input((6,), name="token_ids", dtype="int32")
    mask = keras.Input((6,), name="padding_mask", dtype="float32")
    emb = keras.layers.Embedding(20, 4, name="emb")(ids)
    pooled = keras.layers.GlobalAveragePooling1D()(emb * keras.ops.expand_dims(mask, -1))
    return keras.Model({"token_ids": ids, "padding_mask": mask}, keras.layers.Dense(3, name="head")(pooled))


def test_dict_input_model_through_keras_own_export_route() -> None:
    from unframe.converters.base import ConvertOptions
    from unframe.converters.frontends._tf import export as routes
    from unframe.converters.registry import FRONTENDS
    from unframe.validate.runner import TensorSpec

    model = _dict_model()
    native = FRONTENDS.get("tf").load(model, ConvertOptions())
    inputs = [TensorSpec("token_ids", (None, 6), "int32"), TensorSpec("padding_mask", (None, 6), "float32")]
    proto = routes.keras_export(native, inputs, 17)  # Keras' own ONNX export, a dict signature
    graph = routes.finish(proto, inputs, native.outputs, True, [])
    feed = {"token_ids": _rng(8).integers(0, 20, (3, 6)).astype(np.int32),
            "padding_mask": (_rng(9).random((3, 6)) > 0.3).astype(np.float32)}
    got = _session(graph).run(None, feed)[0]
    np.testing.assert_allclose(got, model(feed, training=False).numpy(), rtol=1e-4, atol=1e-5)


def test_dict_input_keras_file(tmp_path: Path) -> None:
    model = _dict_model()
    model.save(tmp_path / "dict.keras")
    feed = {"token_ids": _rng(10).integers(0, 20, (2, 6)).astype(np.int32),
            "padding_mask": np.ones((2, 6), np.float32)}
    result = unframe.convert(tmp_path / "dict.keras", to="onnx", sample_inputs=feed)
    assert result.report, str(result.report)
    got = _session(result.model).run(None, feed)[0]
    np.testing.assert_allclose(got, model(feed, training=False).numpy(), rtol=1e-4, atol=1e-5)


def test_captured_constant_is_an_initializer_not_an_input() -> None:
    scale = tf.constant(_rng(11).standard_normal(4).astype(np.float32))  # an eager tensor, captured

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def scaled(x):
        return x * scale + 1.0

    # the peer's own graph: the capture is a second input that nobody can feed
    proto, _ = tf2onnx.convert.from_function(scaled, input_signature=[tf.TensorSpec([None, 4], tf.float32)],
                                             opset=17)
    assert len(proto.graph.input) == 2
    result = unframe.convert(scaled, to="onnx")
    assert result.report, str(result.report)
    assert [v.name for v in result.model.graph.inputs] == ["x"]
    feed = _rng(12).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(_session(result.model).run(None, {"x": feed})[0], feed * scale.numpy() + 1.0,
                               rtol=1e-6)


def test_output_of_unknown_rank_gets_its_rank_from_the_run() -> None:
    @tf.function
    def diag(d, rows, cols):
        return tf.raw_ops.MatrixDiagV3(diagonal=d, k=0, num_rows=rows, num_cols=cols, padding_value=7.0,
                                       align="LEFT_RIGHT")

    d = _rng(13).standard_normal((2, 3)).astype(np.float32)
    result = unframe.convert(diag, to="onnx", sample_inputs=(d, np.array(3, np.int32), np.array(4, np.int32)))
    assert result.report, str(result.report)
    (out,) = result.model.graph.outputs
    assert out.shape is not None and len(out.shape) == 3
    names = [v.name for v in result.model.graph.inputs]
    got = _session(result.model).run(None, dict(zip(names, [d, np.array(3, np.int32), np.array(4, np.int32)],
                                                          strict=True)))[0]
    np.testing.assert_allclose(got, diag(d, 3, 4).numpy())


@pytest.mark.parametrize("concrete", [False, True], ids=["tf.function", "ConcreteFunction"])
def test_function_taking_a_dict(concrete: bool) -> None:
    @tf.function(input_signature=[{"ids": tf.TensorSpec([None, 3], tf.float32),
                                   "mask": tf.TensorSpec([None, 3], tf.float32)}])
    def masked(features):
        return features["ids"] * features["mask"] + 1.0

    result = unframe.convert(masked.get_concrete_function() if concrete else masked, from_="tf", to="onnx")
    assert result.report, str(result.report)
    assert [v.name for v in result.model.graph.inputs] == ["features_ids", "features_mask"]
    ids = _rng(14).standard_normal((4, 3)).astype(np.float32)
    mask = (_rng(15).random((4, 3)) > 0.5).astype(np.float32)
    got = _session(result.model).run(None, {"features_ids": ids, "features_mask": mask})[0]
    np.testing.assert_allclose(got, ids * mask + 1.0, rtol=1e-6)


def test_keras_sequential_capturing_a_constant() -> None:
    """A Keras 3 Sequential model (tf2onnx's from_keras fails on its output names) whose layer
    closes over an eager tensor: Keras' own export leaves that tensor a graph input; the route
    through the model's call makes it an initializer."""
    import keras

    keras.utils.set_random_seed(0)
    kernel = tf.constant(_rng(16).standard_normal((3, 3, 3, 4)).astype(np.float32))
    model = keras.Sequential([keras.Input((8, 8, 3)),
                              keras.layers.Lambda(lambda x: tf.nn.conv2d(x, kernel, 1, "SAME"))])
    x = _rng(17).standard_normal((2, 8, 8, 3)).astype(np.float32)
    result = unframe.convert(model, to="onnx", sample_inputs=x)
    assert result.report, str(result.report)
    assert len(result.model.graph.inputs) == 1
    got = _session(result.model).run(None, {result.model.graph.inputs[0].name: x})[0]
    np.testing.assert_allclose(got, model(x, training=False).numpy(), rtol=1e-4, atol=1e-4)


def test_contrib_op_inside_a_loop_gets_its_domain_imported() -> None:
    """tf2onnx lowers MatrixSetDiagV3 to a Loop holding onnxruntime's com.microsoft Range without
    importing that domain: onnxruntime runs it, onnx.checker (the ONNX backend) refused it."""
    base = np.full((2, 3, 4), 7, np.int64)
    diag = np.array([[1, 2, 3], [4, 5, 6]], np.int64)
    k = np.array([0], np.int32)
    fn = tf.function(lambda a, b, c: tf.raw_ops.MatrixSetDiagV3(input=a, diagonal=b, k=c, align="RIGHT_LEFT"))
    result = unframe.convert(fn, to="onnx", sample_inputs=(base, diag, k))
    assert result.report, str(result.report)
    assert result.model.opset_imports.get("com.microsoft") == 1
    names = [v.name for v in result.model.graph.inputs]
    got = _session(result.model).run(None, dict(zip(names, [base, diag, k], strict=True)))[0]
    np.testing.assert_array_equal(got, fn(base, diag, k).numpy())


def test_op_only_onnxruntime_has_goes_through_its_contrib_ops() -> None:
    """MatrixInverse has no standard ONNX op; tf2onnx maps it to onnxruntime's com.microsoft
    Inverse when allowed: the last route, after every standard one failed (before: exit 4)."""
    x = (_rng(18).random((4, 5, 5)) + np.eye(5) * 3).astype(np.float32)
    result = unframe.convert(tf.function(lambda a: tf.linalg.inv(a)), to="onnx", sample_inputs=x)
    assert result.report, str(result.report)
    assert "contrib ops" in result.export.route and result.model.opset_imports.get("com.microsoft") == 1
    got = _session(result.model).run(None, {result.model.graph.inputs[0].name: x})[0]
    np.testing.assert_allclose(got, np.linalg.inv(x), rtol=1e-4, atol=1e-5)
