"""A Keras model built on a dict of inputs that refuses a list (keras-hub backbones: tf2onnx's
from_keras calls the model with a list): the frontend traces a function that passes the dict, and
the ONNX outputs match Keras in its own order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import unframe

pytest.importorskip("tf2onnx", reason="needs the tf extra (tf2onnx)")
keras_hub = pytest.importorskip("keras_hub", reason="needs keras-hub (pip install --no-deps keras-hub==0.32.0)")


def test_keras_hub_bert_backbone_with_dict_inputs(tmp_path: Path) -> None:
    import keras

    keras.utils.set_random_seed(0)
    model = keras_hub.models.BertBackbone(vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
                                          intermediate_dim=32, max_sequence_length=8)
    rng = np.random.default_rng(0)
    for w in model.weights:  # order-one outputs: the 0.02-std init gives flat ones
        value = np.asarray(w.numpy())
        w.assign(value + rng.standard_normal(value.shape).astype(value.dtype) * 0.3)
    mask = np.ones((2, 8), np.int32)
    mask[1, 5:] = 0
    samples = {"token_ids": rng.integers(1, 50, (2, 8)).astype(np.int32),
               "segment_ids": np.zeros((2, 8), np.int32), "padding_mask": mask}
    with pytest.raises(ValueError, match="structure of `inputs`"):  # why from_keras can't take it
        model(list(samples.values()), training=False)
    expected = {k: np.asarray(v) for k, v in model(samples, training=False).items()}
    assert 0.3 < np.abs(expected["sequence_output"]).max() < 100 and expected["sequence_output"].std() > 0.05
    result = unframe.convert(model, to="onnx", sample_inputs=samples, output=tmp_path / "bert.onnx")
    assert result.report, str(result.report)
    session = ort.InferenceSession(str(tmp_path / "bert.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(None, samples)
    # the outputs keep Keras' order (keras.tree.flatten: the dict's keys sorted) and names
    assert [o.name for o in session.get_outputs()] == list(model.output_names)
    for name, value in zip(sorted(expected), got, strict=True):
        np.testing.assert_allclose(value, expected[name], atol=1e-4, rtol=1e-3)


def test_keras_hub_gemma_backbone_with_a_captured_constant() -> None:
    """GemmaBackbone scales its embeddings by a constant it computed eagerly: tf2onnx's
    from_function makes it a graph input (``gemma_backbone_1/Mul/y:0``) that nobody feeds; the
    frontend turns it back into an initializer. Keras' own export of it needs a dict signature."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras_hub.models.GemmaBackbone(vocabulary_size=64, num_layers=1, num_query_heads=2,
                                           num_key_value_heads=1, hidden_dim=16, intermediate_dim=32, head_dim=8)
    rng = np.random.default_rng(0)
    for w in model.weights:  # order-one outputs
        value = np.asarray(w.numpy())
        w.assign(value + rng.standard_normal(value.shape).astype(value.dtype) * 0.3)
    samples = {"token_ids": rng.integers(1, 64, (2, 6)).astype(np.int32), "padding_mask": np.ones((2, 6), np.int32)}
    expected = np.asarray(model(samples, training=False))
    assert 0.3 < np.abs(expected).max() < 100
    result = unframe.convert(model, to="onnx", sample_inputs=samples)
    assert result.report, str(result.report)
    assert sorted(v.name for v in result.model.graph.inputs) == ["padding_mask", "token_ids"]
    import onnx_ir as ir

    session = ort.InferenceSession(ir.serde.serialize_model(result.model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, samples)[0], expected, atol=1e-4, rtol=1e-3)
