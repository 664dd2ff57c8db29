"""A Keras model trained with quantization-aware training (TensorFlow Model Optimization's
``quantize_model``, on ``tf_keras``: Keras 2, which tfmot builds on) carried through the export as
ONNX QuantizeLinear/DequantizeLinear and onto every target the TF frontend reaches, each checked
against the framework's own quantized forward (issue 38).

Trained on scikit-learn's digits: a float CNN, then a quantization-aware fine-tune. Controls: before
this change a ``tf_keras`` model was refused (exit 2: "tf.Module ... has no tf.function __call__");
with it but without one step of the output quantizer allowed, the export's parity failed (exit 5:
5 of 40 logits a step apart, where TensorFlow's fake quantization and onnxruntime put a value at a
step's edge on either side); TensorRT refuses the model (asymmetric zero points: exit 4)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import unframe
from unframe.api import PartialFailure

pytest.importorskip("sklearn", reason="needs scikit-learn (its digits dataset)")
tfmot = pytest.importorskip("tensorflow_model_optimization",
                            reason="needs tensorflow-model-optimization and tf_keras (make install puts them in)")
keras2 = pytest.importorskip("tf_keras", reason="needs tf_keras (Keras 2, which tfmot builds on)")


def qat_digits() -> tuple[object, np.ndarray, np.ndarray, np.ndarray, float]:
    """(the quantization-aware model, training images, test images, test labels, its own test
    accuracy): NHWC 8x8x1 images in [0, 1]."""
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    x = (images / 16.0).astype(np.float32).reshape(-1, 8, 8, 1)
    keras2.utils.set_random_seed(0)
    model = keras2.Sequential([
        keras2.layers.InputLayer((8, 8, 1), name="image"),
        keras2.layers.Conv2D(16, 3, padding="same", activation="relu"),
        keras2.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras2.layers.Flatten(), keras2.layers.Dense(64, activation="relu"), keras2.layers.Dense(10)])
    loss = keras2.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras2.optimizers.Adam(1e-2), loss=loss)
    model.fit(x[:1400], labels[:1400], batch_size=100, epochs=6, verbose=0)
    qat = tfmot.quantization.keras.quantize_model(model)
    qat.compile(optimizer=keras2.optimizers.Adam(1e-3), loss=loss)
    qat.fit(x[:1400], labels[:1400], batch_size=100, epochs=2, verbose=0)
    accuracy = float((qat.predict(x[1400:], verbose=0).argmax(1) == labels[1400:]).mean())
    return qat, x[:1400], x[1400:], labels[1400:], accuracy


def test_qat_keras_model_through_every_route_it_reaches(tmp_path) -> None:
    import onnxruntime as ort

    model, train, test, test_labels, accuracy = qat_digits()
    assert accuracy > 0.8, accuracy  # a model that learnt the digits: top-1 means something
    try:
        result = unframe.convert(model, to="all", sample_inputs=train[:8], output=tmp_path / "out")
        results, errors = result.results, {}
    except PartialFailure as failure:
        results, errors = failure.result.results, failure.result.errors
    assert all(e.exit_code == 4 for e in errors.values()), {k: str(e) for k, e in errors.items()}
    assert {"onnx", "coreml", "openvino", "litert"} <= set(results), (set(results), errors)
    onnx_result = results["onnx"]
    export = onnx_result.report.stages[0]
    assert export.reference.startswith("tensorflow") and export.status == "passed"  # its own quantized forward
    assert any("the model's own quantization" in n for n in onnx_result.notes), onnx_result.notes
    for name, res in results.items():
        last = res.report.stages[-1]
        assert last.status == "passed" and last.top1 == 1.0, (name, last.summary())
    written = tmp_path / "out" / "model.onnx"
    ops = [n.op_type for n in onnx.load(written).graph.node]
    assert ops.count("QuantizeLinear") >= 4 and "DequantizeLinear" in ops
    session = ort.InferenceSession(str(written), providers=["CPUExecutionProvider"])
    scores = session.run(None, {session.get_inputs()[0].name: test})[0]
    onnx_accuracy = float((scores.argmax(1) == test_labels).mean())
    assert onnx_accuracy >= accuracy - 0.01, (onnx_accuracy, accuracy)  # the QAT model's own, kept
    if "tensorrt" in errors:  # TensorRT takes zero points of 0 only; tfmot's activations have others
        assert errors["tensorrt"].blockers, str(errors["tensorrt"])
