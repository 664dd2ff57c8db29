"""Dynamic only where proven (issue 34): an input axis is dynamic only when TensorFlow ran the model
with it changed and the export takes it; every other axis stays as the samples (or the signature)
have it, per input, and the notes say which. A probe unframe drew never ends in exit 3.

Controls (checked against the code before this change): the fixed ``input_signature`` ended in an
untyped TypeError (unframe retraced it with a dynamic batch); the broadcast partner, the
shape-dependent Python branch and the Keras model with a batch baked in ended in exit 3 ("the
source model can't be run ... check the sample inputs")."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest

tf = pytest.importorskip("tensorflow", reason="needs the tf extra (tensorflow)")
pytest.importorskip("tf2onnx", reason="needs the tf extra (tf2onnx)")

import unframe  # noqa: E402


def _session(result) -> ort.InferenceSession:
    proto = ir.serde.serialize_model(result.model)
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


def _dims(value) -> list:
    return [d if isinstance(d, int) else "dyn" for d in value.shape]


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_fixed_input_signature_is_respected() -> None:
    w = tf.constant(_rng().standard_normal((4, 2)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([3, 4], tf.float32, name="x")])
    def fixed(x):
        return tf.matmul(x, w) * 2.0

    result = unframe.convert(fixed, to="onnx")
    assert result.report, str(result.report)
    (x,) = result.model.graph.inputs
    assert _dims(x) == [3, 4]  # the signature's shape, no invented batch
    feed = _rng(1).standard_normal((3, 4)).astype(np.float32)
    got = _session(result).run(None, {"x": feed})[0]
    np.testing.assert_allclose(got, fixed(feed).numpy(), rtol=1e-5, atol=1e-6)


def test_broadcast_partner_stays_fixed_and_the_other_axis_is_dynamic() -> None:
    fn = tf.function(lambda x, y: x * 2.0 + y)
    x = _rng().standard_normal((3, 4, 5)).astype(np.float32)
    y = _rng(1).standard_normal(5).astype(np.float32)
    result = unframe.convert(fn, to="onnx", sample_inputs=(x, y))
    assert result.report, str(result.report)
    a, b = result.model.graph.inputs
    assert _dims(a) == ["dyn", 4, 5] and _dims(b) == [5]
    notes = " ".join(result.notes)
    assert "dynamic axes: input_0[0]" in notes and "kept fixed" in notes and "input_1[0] = 5" in notes
    other = _rng(2).standard_normal((7, 4, 5)).astype(np.float32)  # another batch runs
    got = _session(result).run(None, {a.name: other, b.name: y})[0]
    np.testing.assert_allclose(got, other * 2.0 + y, rtol=1e-6)


def test_python_branch_on_the_shape_exports_at_the_samples_shape() -> None:
    @tf.function
    def branchy(x):
        if x.shape[0] > 2:  # Python on the static shape: fails to trace with an unknown batch
            return x * 3.0
        return x - 1.0

    x = _rng().standard_normal((4, 3)).astype(np.float32)
    result = unframe.convert(branchy, to="onnx", sample_inputs=x)
    assert result.report, str(result.report)
    (value,) = result.model.graph.inputs
    assert _dims(value) == [4, 3]
    assert any(n.startswith("every axis kept as the samples have it") and "input_0[0]" in n
               for n in result.notes), result.notes
    np.testing.assert_allclose(_session(result).run(None, {value.name: x})[0], x * 3.0, rtol=1e-6)


def test_autograph_while_on_the_input_keeps_its_batch_dynamic() -> None:
    @tf.function
    def halve_until_small(x):
        while tf.reduce_max(tf.abs(x)) > 1.0:  # autograph: a tf.while_loop on the input's values
            x = x * 0.5
        return x

    x = (_rng().standard_normal((3, 4)) * 10).astype(np.float32)
    result = unframe.convert(halve_until_small, to="onnx", sample_inputs=x)
    assert result.report, str(result.report)
    (value,) = result.model.graph.inputs
    assert _dims(value) == ["dyn", 4]
    other = (_rng(3).standard_normal((5, 4)) * 40).astype(np.float32)
    got = _session(result).run(None, {value.name: other})[0]
    np.testing.assert_allclose(got, halve_until_small(other).numpy(), rtol=1e-6)


def test_keras_model_with_its_batch_baked_in_keeps_it() -> None:
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((6,), name="features")
    hidden = keras.layers.Dense(6, name="dense")(inp)
    # the model's own code needs batch 2 (a reshape that names it): any other batch fails in Keras
    pairs = keras.layers.Lambda(lambda t: tf.reshape(t, (1, 12)), name="pairs")(hidden)
    model = keras.Model(inp, keras.layers.Dense(3, name="head")(pairs))
    x = _rng().standard_normal((2, 6)).astype(np.float32)
    result = unframe.convert(model, to="onnx", sample_inputs=x)
    assert result.report, str(result.report)
    (value,) = result.model.graph.inputs
    assert _dims(value) == [2, 6]
    assert any("kept fixed" in n and "features[0] = 2" in n for n in result.notes), result.notes
    got = _session(result).run(None, {value.name: x})[0]
    np.testing.assert_allclose(got, model(x, training=False).numpy(), rtol=1e-4, atol=1e-5)


def test_plain_keras_model_keeps_a_dynamic_batch_proven_by_a_second_feed() -> None:
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((5,), name="x")
    model = keras.Model(inp, keras.layers.Dense(3, name="y")(inp))
    result = unframe.convert(model, to="onnx")
    (value,) = result.model.graph.inputs
    assert _dims(value) == ["dyn", 5]
    assert [f["x"].shape[0] for f in result.export.feeds] == [2, 3]  # the probe is parity's second feed
    assert any(n.startswith("dynamic axes: x[0] (2 and 3)") for n in result.notes), result.notes


def test_an_axis_asked_dynamic_is_dynamic_without_a_probe_deciding() -> None:
    fn = tf.function(lambda x: tf.reduce_sum(x, axis=1))
    x = _rng().standard_normal((2, 5)).astype(np.float32)
    result = unframe.convert(fn, to="onnx", sample_inputs=x, dynamic=[("input_0", 1, "length")])
    (value,) = result.model.graph.inputs
    assert [d if isinstance(d, int) else d.value for d in value.shape][1] == "length"
    assert any(n == "dynamic axes as asked: input_0[1]" for n in result.notes), result.notes


def test_stateful_rnn_is_exported_in_the_state_the_user_left_it() -> None:
    """Each run of a stateful LSTM advances its state: the probes and checks unframe runs before
    the export put it back, so the graph holds the user's state (before: the state unframe's own
    runs had left, and parity, run in that same state, passed it)."""
    import keras

    from unframe.converters.frontends._tf.runners import stateful_states

    keras.utils.set_random_seed(0)
    inp = keras.Input(batch_shape=(1, None, 1), name="seq")
    model = keras.Model(inp, keras.layers.LSTM(3, return_sequences=True, stateful=True, name="lstm")(inp))
    x = _rng(9).standard_normal((1, 5, 1)).astype(np.float32)
    model(x, training=False)  # the user's model has run once: its state is not zero
    saved = stateful_states(model)
    expected = model(x, training=False).numpy()  # the next output from the state the user has
    for variable, value in saved:
        variable.assign(value)
    result = unframe.convert(model, to="onnx", sample_inputs=x)
    assert result.report, str(result.report)
    assert all(np.array_equal(v.numpy(), value) for v, value in saved)  # left as it was
    got = _session(result).run(None, {"seq": x})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
