"""TF frontend sources and options: .keras/.h5 files, SavedModel signatures, TFLite, tf.function
and tf.Module objects, nchw_inputs, static shapes, --inputs overrides, user samples, and the
fallback routes (another opset, Keras' own exporter, the Erfc extension)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx_ir as ir
import pytest

tf = pytest.importorskip("tensorflow", reason="needs the tf extra (tensorflow)")
pytest.importorskip("tf2onnx", reason="needs the tf extra (tf2onnx)")

import tf_models  # noqa: E402

from unframe.converters.base import ConvertOptions, InputSpec  # noqa: E402
from unframe.converters.frontends._tf import export as routes  # noqa: E402
from unframe.converters.registry import FRONTENDS  # noqa: E402
from unframe.validate.compare import compare  # noqa: E402
from unframe.validate.onnxruntime import OnnxRuntimeRunner  # noqa: E402
from unframe.validate.runner import TensorSpec  # noqa: E402


@pytest.fixture(scope="module")
def fe():
    return FRONTENDS.get("tf")


@pytest.fixture(scope="module")
def cnn():
    return tf_models.small_cnn(0)


@pytest.fixture(scope="module")
def cnn_files(cnn, tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tf_files")
    paths = {"keras": folder / "cnn.keras", "h5": folder / "cnn.h5",
             "saved_model": folder / "cnn_saved", "tflite": folder / "cnn.tflite"}
    cnn.save(paths["keras"])
    cnn.save(paths["h5"])
    cnn.export(str(paths["saved_model"]), verbose=False)
    converter = tf.lite.TFLiteConverter.from_keras_model(cnn)
    paths["tflite"].write_bytes(converter.convert())
    return paths


def _export(fe, source, spec: InputSpec | None = None, **options):
    opts = ConvertOptions(options=options)
    native = fe.load(source, opts)
    return native, fe.to_onnx(native, spec or InputSpec(), opts)


def _assert_matches_keras(model, export, *, nchw: bool = False, atol: float = 1e-4) -> None:
    """ONNX on the export's feeds against the original Keras model called directly."""
    ort = OnnxRuntimeRunner(export.model)
    for feed in export.feeds:
        got = ort.run(feed)
        tf_feed = {k: np.moveaxis(v, 1, -1) if nchw else v for k, v in feed.items()}
        want = tf_models.call_keras(model, tf_feed)
        assert len(got) == len(want)
        for (gname, gval), (wname, wval) in zip(got.items(), want.items(), strict=True):
            np.testing.assert_allclose(gval, wval, atol=atol, rtol=1e-3, err_msg=f"{gname}/{wname}")


@pytest.mark.parametrize("kind", ["keras", "h5"])
def test_keras_files(fe, cnn, cnn_files, kind: str) -> None:
    assert fe.accepts_path(cnn_files[kind])
    native, export = _export(fe, cnn_files[kind])
    assert native.kind == "keras" and export.route.startswith("tf2onnx from_keras")
    assert [v.name for v in export.model.graph.inputs] == ["image"]
    _assert_matches_keras(cnn, export)


def test_saved_model_default_signature(fe, cnn, cnn_files) -> None:
    assert fe.accepts_path(cnn_files["saved_model"])
    native, export = _export(fe, cnn_files["saved_model"])
    assert native.signature == "serving_default"
    assert export.route.startswith("tf2onnx from_saved_model")
    graph = export.model.graph
    assert [v.name for v in graph.inputs] == ["image"]
    assert [v.name for v in graph.outputs] == ["output_0"]  # the signature's key
    assert graph.inputs[0].shape[0] == ir.SymbolicDim("batch")
    _assert_matches_keras(cnn, export)
    assert compare(fe.runner(native, export), OnnxRuntimeRunner(export.model), export.feeds)


def test_saved_model_named_signature(fe, tmp_path: Path) -> None:
    module = tf.Module()
    module.w = tf.Variable(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32))
    module.score = tf.function(lambda x: {"scores": tf.matmul(x, module.w)},
                               input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    module.norm = tf.function(lambda x: {"norm": tf.norm(x, axis=-1)},
                              input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    tf.saved_model.save(module, str(tmp_path / "sm"),
                        signatures={"score": module.score, "norm": module.norm})
    native, export = _export(fe, tmp_path / "sm", signature="norm")
    assert native.signature == "norm"
    assert [v.name for v in export.model.graph.outputs] == ["norm"]
    feed = export.feeds[0]
    got = OnnxRuntimeRunner(export.model).run(feed)["norm"]
    np.testing.assert_allclose(got, np.linalg.norm(feed["x"], axis=-1), rtol=1e-5)


def test_tflite(fe, cnn, cnn_files) -> None:
    assert fe.accepts_path(cnn_files["tflite"])
    native, export = _export(fe, cnn_files["tflite"])
    assert native.kind == "tflite" and export.route.startswith("tf2onnx from_tflite")
    assert [v.name for v in export.model.graph.inputs] == ["image"]  # signature key, not tensor name
    assert len(export.feeds) == 2
    _assert_matches_keras(cnn, export)
    assert compare(fe.runner(native, export), OnnxRuntimeRunner(export.model), export.feeds)


def test_tf_function_with_dict_outputs(fe) -> None:
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="a"),
                                  tf.TensorSpec([None, 4], tf.float32, name="b")])
    def fn(a, b):
        return {"sum": a + b, "prod": a * b}

    assert fe.accepts_object(fn)
    native, export = _export(fe, fn)
    graph = export.model.graph
    assert [v.name for v in graph.inputs] == ["a", "b"]
    assert [v.name for v in graph.outputs] == ["prod", "sum"]
    got = OnnxRuntimeRunner(export.model).run(export.feeds[1])
    np.testing.assert_allclose(got["sum"], export.feeds[1]["a"] + export.feeds[1]["b"])
    np.testing.assert_allclose(got["prod"], export.feeds[1]["a"] * export.feeds[1]["b"])


def test_tf_module_with_unnamed_signature(fe) -> None:
    class Affine(tf.Module):
        def __init__(self) -> None:
            self.w = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3) / 10)

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        def __call__(self, x):
            return tf.matmul(x, self.w), tf.reduce_sum(x, axis=1)

    module = Affine()
    assert fe.accepts_object(module)
    native, export = _export(fe, module)
    graph = export.model.graph
    assert [v.name for v in graph.inputs] == ["x"]  # the argument's name
    assert [v.name for v in graph.outputs] == ["output_0", "output_1"]
    ort = OnnxRuntimeRunner(export.model)
    for feed in export.feeds:
        got = ort.run(feed)
        np.testing.assert_allclose(got["output_0"], feed["x"] @ module.w.numpy(), rtol=1e-5)
        np.testing.assert_allclose(got["output_1"], feed["x"].sum(axis=1), rtol=1e-5)


def test_tf_function_without_signature_uses_samples(fe) -> None:
    fn = tf.function(lambda x: tf.nn.relu(x) * 3.0)
    sample = np.random.default_rng(3).standard_normal((4, 5)).astype(np.float32)
    _, export = _export(fe, fn, InputSpec(samples=sample))
    assert export.feeds[0]["input_0"] is not None
    np.testing.assert_array_equal(export.feeds[0]["input_0"], sample)
    assert export.feeds[1]["input_0"].shape == (3, 5)  # second batch size from the sample
    got = OnnxRuntimeRunner(export.model).run(export.feeds[0])["output_0"]
    np.testing.assert_allclose(got, np.maximum(sample, 0) * 3.0, rtol=1e-6)


def test_nchw_inputs_transposes_at_the_edge(fe, cnn) -> None:
    _, export = _export(fe, cnn, nchw_inputs=True)
    graph = export.model.graph
    assert list(graph.inputs[0].shape)[1:] == [3, 16, 16]
    consumers = graph.inputs[0].uses()
    assert len(consumers) == 1
    node = next(iter(consumers)).node
    assert node.op_type == "Transpose" and list(node.attributes["perm"].value) == [0, 2, 3, 1]
    assert all(f["image"].shape[1] == 3 for f in export.feeds)
    _assert_matches_keras(cnn, export, nchw=True)


def test_channels_last_kept_by_default(fe, cnn) -> None:
    _, export = _export(fe, cnn)
    assert list(export.model.graph.inputs[0].shape)[1:] == [16, 16, 3]


def test_static_freezes_every_dim(fe, cnn) -> None:
    _, export = _export(fe, cnn, InputSpec(static=True))
    assert list(export.model.graph.inputs[0].shape) == [1, 16, 16, 3]
    assert list(export.model.graph.outputs[0].shape) == [1, 5]
    assert len(export.feeds) == 1
    _assert_matches_keras(cnn, export)


def test_inputs_override_and_user_samples(fe, cnn) -> None:
    spec = InputSpec(tensors=[TensorSpec("image", (4, 16, 16, 3), "float32")], static=True)
    _, export = _export(fe, cnn, spec)
    assert list(export.model.graph.inputs[0].shape) == [4, 16, 16, 3]
    sample = np.random.default_rng(7).standard_normal((5, 16, 16, 3)).astype(np.float32)
    _, export = _export(fe, cnn, InputSpec(samples={"image": sample}))
    np.testing.assert_array_equal(export.feeds[0]["image"], sample)
    assert [f["image"].shape[0] for f in export.feeds] == [5, 4]
    _assert_matches_keras(cnn, export)


def test_lower_opset_falls_back_to_another_opset(fe) -> None:
    """Einsum needs opset 12: at opset 10 onnxruntime rejects tf2onnx's graph (and Keras' own
    export's), so the frontend takes tf2onnx at opset 18 and says why."""
    model = tf_models.tiny_attention(0)
    opts = ConvertOptions(opset=10)
    native = fe.load(model, opts)
    export = fe.to_onnx(native, InputSpec(), opts)
    assert export.opset == 18 and export.route == "tf2onnx from_keras (opset 18)"
    assert any("opset 10" in n and "Einsum" in n for n in export.notes), export.notes
    assert any(n.startswith("keras export") for n in export.notes), export.notes
    _assert_matches_keras(model, export)


def test_keras_own_export_route(fe, cnn) -> None:
    native = fe.load(cnn, ConvertOptions())
    inputs = [TensorSpec("image", (None, 16, 16, 3), "float32")]
    proto = routes.keras_export(native, inputs, 17)
    model = routes.finish(proto, inputs, native.outputs, True, [])
    assert model.opset_imports[""] == 17
    assert [v.name for v in model.graph.outputs] == ["logits"]
    feed = {"image": np.random.default_rng(1).standard_normal((2, 16, 16, 3)).astype(np.float32)}
    np.testing.assert_allclose(OnnxRuntimeRunner(model).run(feed)["logits"],
                               tf_models.call_keras(cnn, feed)["logits"], atol=1e-4, rtol=1e-3)


def test_exact_gelu_through_the_erfc_extension(fe) -> None:
    model = tf_models.gelu_mlp(0)
    _, export = _export(fe, model)
    ops = {n.op_type for n in export.model.graph}
    assert "Erfc" not in ops and "Erf" in ops
    assert not [n for n in export.notes if not n.startswith("dynamic axes")]  # no fallback route
    _assert_matches_keras(model, export)


def test_tflite_static(fe, cnn, cnn_files) -> None:
    _, export = _export(fe, cnn_files["tflite"], InputSpec(static=True))
    assert list(export.model.graph.inputs[0].shape) == [1, 16, 16, 3]
    assert len(export.feeds) == 1
    _assert_matches_keras(cnn, export)


def test_dynamic_axis_names_from_the_caller(fe) -> None:
    fn = tf.function(lambda x: tf.reduce_mean(x, axis=1, keepdims=True) - x,
                     input_signature=[tf.TensorSpec([None, None], tf.float32, name="x")])
    _, export = _export(fe, fn, InputSpec(dynamic=[("x", 0, "rows"), ("x", -1, "cols")]))
    dims = [d.value for d in export.model.graph.inputs[0].shape]
    assert dims == ["rows", "cols"]
    assert [f["x"].shape for f in export.feeds] == [(2, 8), (3, 6)]
    feed = export.feeds[1]
    got = OnnxRuntimeRunner(export.model).run(feed)["output_0"]
    np.testing.assert_allclose(got, feed["x"].mean(axis=1, keepdims=True) - feed["x"], rtol=1e-5,
                               atol=1e-6)


def test_subclassed_keras_model_with_samples(fe) -> None:
    import keras

    class Scorer(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.embed = keras.layers.Embedding(7, 3)
            self.head = keras.layers.Dense(2)

        def call(self, tokens):
            return self.head(keras.ops.mean(self.embed(tokens), axis=1))

    keras.utils.set_random_seed(0)
    model = Scorer()
    tokens = np.array([[1, 2, 3], [6, 0, 5]], dtype=np.int32)
    model(tokens)  # build
    native, export = _export(fe, model, InputSpec(samples=tokens))
    assert native.int_high == 7
    assert [v.name for v in export.model.graph.outputs] == ["output_0"]
    ort = OnnxRuntimeRunner(export.model)
    for feed in export.feeds:
        np.testing.assert_allclose(ort.run(feed)["output_0"], model(feed["input_0"]).numpy(),
                                   atol=1e-5, rtol=1e-4)


def test_tflite_in_children_forked_from_a_template_answers_as_in_a_fresh_one(cnn_files) -> None:
    """Three conversions in one process: the first child imports TensorFlow itself; at the second
    start a template imports it once and the second and third children are forks of it. All three
    give the same answers."""
    from unframe import sandbox
    from unframe.converters.frontends._tf import probes

    sandbox.close_all()
    path, rng = cnn_files["tflite"], np.random.default_rng(0)
    answers, parents = [], []
    for _ in range(3):
        with sandbox.session():  # a conversion: its child is closed at the end
            inputs, outputs, names = probes.describe_tflite(path)
            if not answers:
                arrays = {s.name: rng.standard_normal([2 if d is None else d for d in s.shape]).astype(s.dtype)
                          for s in inputs}
            outs = probes.run_tflite(path, arrays, names)
            child = sandbox.existing(probes.SANDBOX).proc.pid
            parents.append(int(Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[1]))
        answers.append((inputs, outputs, outs))
    template = sandbox._templates[sandbox._key(probes.import_tensorflow)]
    assert parents[0] == __import__("os").getpid() != parents[1] == parents[2] == template.proc.pid
    for inputs, outputs, outs in answers[1:]:
        assert (inputs, outputs) == answers[0][:2]
        assert all(np.array_equal(a, b) for a, b in zip(outs, answers[0][2], strict=True))
    assert np.abs(answers[0][2][0]).max() > 0.01  # not an all-zero output
    sandbox.close_all()
