"""--quantize on the LiteRT routes, each with its own quantizer: from torch (litert-torch: PT2E
int8, its dynamic and weight-only recipes) on a CNN trained on scikit-learn's digits, and from
Keras (TensorFlow's TFLite converter: full-integer int8 with a representative dataset,
dynamic-range for int8-dynamic and w8) on a Keras CNN trained on the same digits. Each passes the
accuracy guard (the .tflite on ai-edge-litert's interpreter against the source on held-out sets),
the written file's test accuracy on the interpreter is within a point of the float model's, its
weights are int8 and it is about a quarter of the float size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import unframe

pytest.importorskip("sklearn", reason="needs scikit-learn (its digits dataset)")
pytest.importorskip("ai_edge_litert", reason="needs the litert extra (ai-edge-litert)")

SCHEMES = ["int8", "int8-dynamic", "w8"]


def interpreter(path: Path):
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(path))
    it.allocate_tensors()
    return it


def tflite_scores(path: Path, images: np.ndarray, batch: int | None) -> np.ndarray:
    """The file's outputs on ``images`` with ai-edge-litert's interpreter: all at once where the
    batch is dynamic, else in batches of ``batch`` (the last padded). Quantized inputs and outputs
    (litert-torch's int8 I/O) are (de)quantized with the scale and zero point the file holds."""
    it = interpreter(path)
    inp, out = it.get_input_details()[0], it.get_output_details()[0]
    if batch is None:
        it.resize_tensor_input(inp["index"], [len(images), *images.shape[1:]])
        it.allocate_tensors()
        batch = len(images)
    scores = []
    for start in range(0, len(images), batch):
        chunk = images[start:start + batch]
        x = np.concatenate([chunk, np.zeros((batch - len(chunk), *chunk.shape[1:]), chunk.dtype)])
        if inp["dtype"] != np.float32:
            scale, zero = inp["quantization"]
            x = np.clip(np.round(x / scale) + zero, -128, 127).astype(inp["dtype"])
        it.set_tensor(inp["index"], x)
        it.invoke()
        y = it.get_tensor(out["index"])
        if out["dtype"] != np.float32:
            scale, zero = out["quantization"]
            y = (y.astype(np.float32) - zero) * scale
        scores.append(y[:len(chunk)])
    return np.concatenate(scores)


def int8_tensors(path: Path) -> tuple[int, int]:
    """(constant int8 tensors of 256+ elements: the quantized weights, int8 tensors without data:
    activations) of the file's main subgraph, read from the flatbuffer."""
    from unframe.converters.backends.litert import flatbuf

    schema = flatbuf.schema()
    model = schema.Model.GetRootAsModel(bytearray(path.read_bytes()), 0)
    graph = model.Subgraphs(0)
    weights = activations = 0
    for i in range(graph.TensorsLength()):
        tensor = graph.Tensors(i)
        if tensor.Type() != schema.TensorType.INT8:
            continue
        buffer = model.Buffers(tensor.Buffer())
        if buffer.DataLength() or buffer.Size():
            weights += int(np.prod(tensor.ShapeAsNumpy())) >= 256
        else:
            activations += 1
    return weights, activations


def assert_quantized_file(path: Path, check, float_accuracy: float, scores: np.ndarray, labels: np.ndarray,
                          scheme: str) -> None:
    assert check.stage == "accuracy" and check.status == "passed", check.summary()
    assert "ai-edge-litert" in check.candidate  # judged on the file's own interpreter
    assert check.top1 is not None and check.top1 >= 0.98 and check.cases >= 1
    assert check.size is not None and check.size[1] <= 0.35 * check.size[0], check.size
    accuracy = float((scores.argmax(1) == labels).mean())
    assert accuracy >= float_accuracy - 0.01, (scheme, accuracy, float_accuracy)
    weights, activations = int8_tensors(path)
    assert weights >= 2, weights  # the large conv and dense weights are stored int8
    if scheme == "int8":  # activations too: the kernels take and give int8
        assert activations >= 4, activations
    else:  # float activations between the layers (hybrid kernels quantize them inside)
        assert activations == 0, activations
    from unframe.converters.backends.litert import flatbuf

    assert flatbuf.metadata(path.read_bytes())["unframe.quantize"].decode() == scheme


# -- torch (litert-torch) -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def digits_torch():
    pytest.importorskip("torch", reason="needs torch")
    pytest.importorskip("litert_torch", reason="needs litert-torch")
    from quant_models import digits_cnn

    t = digits_cnn()
    assert t.float_accuracy > 0.85  # a model that learnt something: accuracy can be lost
    return t


@pytest.mark.parametrize("scheme", SCHEMES)
def test_torch_schemes_keep_accuracy_on_the_interpreter(tmp_path, digits_torch, scheme) -> None:
    import torch

    t = digits_torch
    calibration = tmp_path / "calib.npz"
    np.savez(calibration, input=t.train[:320])
    out = tmp_path / f"digits_{scheme}.tflite"
    result = unframe.convert(t.model, to="litert", sample_inputs=torch.tensor(t.train[:8]), quantize=scheme,
                             calibration=calibration, output=out)
    it = interpreter(out)
    dims = it.get_input_details()[0]["shape_signature"]
    scores = tflite_scores(out, t.test, None if dims[0] < 0 else int(dims[0]))
    assert_quantized_file(out, result.report.stages[-1], t.float_accuracy, scores, t.test_labels, scheme)
    if scheme == "int8":  # litert-torch's PT2E makes the I/O int8: the runner (de)quantized it
        assert it.get_input_details()[0]["dtype"] == np.int8


# -- Keras (TensorFlow's TFLite converter) ------------------------------------------------------
@pytest.fixture(scope="module")
def digits_keras():
    pytest.importorskip("tensorflow", reason="needs tensorflow")
    keras = pytest.importorskip("keras", reason="needs keras")
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    x = (images / 16.0).astype(np.float32).reshape(-1, 8, 8, 1)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((8, 8, 1), name="input"),
        keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"), keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x[:1400], labels[:1400], batch_size=100, epochs=6, verbose=0)
    accuracy = float((model.predict(x[1400:], verbose=0).argmax(1) == labels[1400:]).mean())
    assert accuracy > 0.85
    return model, x[:1400], x[1400:], labels[1400:], accuracy


@pytest.mark.parametrize("scheme", SCHEMES)
def test_keras_schemes_keep_accuracy_on_the_interpreter(tmp_path, digits_keras, scheme) -> None:
    model, train, test, labels, float_accuracy = digits_keras
    calibration = tmp_path / "calib.npz"
    np.savez(calibration, input=train[:320])
    out = tmp_path / f"digits_{scheme}.tflite"
    result = unframe.convert(model, to="litert", sample_inputs=train[:8], quantize=scheme,
                             calibration=calibration, output=out)
    scores = tflite_scores(out, test, None)
    assert_quantized_file(out, result.report.stages[-1], float_accuracy, scores, labels, scheme)
    inp = interpreter(out).get_input_details()[0]
    assert inp["dtype"] == np.float32 and inp["shape_signature"][0] == -1  # float I/O, dynamic batch kept
