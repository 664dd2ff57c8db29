"""Keras reference models: Keras applications with ``weights=None`` at small input sizes, plus
a small functional CNN and an LSTM, exported through tf2onnx (``from_keras``).

Every builder is ``build(out_dir, opset)``: it writes ``model.onnx``, the native ``model.keras``,
``inputs.npz`` and Keras' own ``outputs.npz`` (keyed by the ONNX output names) into ``out_dir``.

Random-init Keras applications give a softmax of exactly 1/classes everywhere, which no parity
check can learn anything from (it was reported weak). Every model is perturbed before export
(``perturb``): each BatchNormalization's moving statistics are set to the statistics its input
really has on calibration images, with random gamma and beta, so activations neither vanish nor
explode through the depth; and the classifier is rescaled and centred so its logits spread with a
standard deviation of about 2 across classes and images. Outputs are then of order 1 and differ
from class to class and from image to image.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
from zoo_common import MODEL_FILE, save_io, seed_everything

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


LOGIT_STD = 2.0  # the classifier's logits after perturbation: a softmax with a clear winner


def perturb(model: Any, like: np.ndarray, seed: int = 1) -> None:
    """Make a random-init model's outputs informative (see the module docstring); ``like`` gives
    the input's shape and dtype, the calibration images are drawn with another seed."""
    rng = np.random.default_rng(seed)
    calibration = rng.standard_normal((8, *like.shape[1:])).astype(like.dtype)
    _calibrate_batch_norms(model, calibration, rng)
    _spread_classifier(model, calibration, rng)


def _calibrate_batch_norms(model: Any, x: np.ndarray, rng: np.random.Generator) -> None:
    """One forward pass in training mode with momentum 0 sets every BatchNormalization's moving
    mean and variance to its input's batch statistics, each layer seeing the ones before it
    already normalized that way; then gamma and beta are drawn at random."""
    from keras import layers

    norms = [layer for layer in model._flatten_layers() if isinstance(layer, layers.BatchNormalization)]
    if not norms:
        return
    momenta = [layer.momentum for layer in norms]
    for layer in norms:
        layer.momentum = 0.0
    model(x, training=True)
    for layer, momentum in zip(norms, momenta, strict=True):
        layer.momentum = momentum
        size = layer.gamma.shape if layer.gamma is not None else layer.beta.shape
        if layer.gamma is not None:
            layer.gamma.assign(rng.uniform(0.6, 1.6, size).astype(np.float32))
        if layer.beta is not None:
            layer.beta.assign(rng.normal(0.0, 0.3, size).astype(np.float32))


def _spread_classifier(model: Any, x: np.ndarray, rng: np.random.Generator) -> None:
    """The last Dense or Conv2D (the classifier): its pre-activation logits on the calibration
    images, centred over the images and scaled to a standard deviation of ``LOGIT_STD``."""
    import keras
    from keras import layers

    head = [layer for layer in model._flatten_layers() if isinstance(layer, (layers.Dense, layers.Conv2D))][-1]
    if head.bias is None:
        return
    activation, head.activation = head.activation, keras.activations.linear
    try:
        logits = np.asarray(keras.Model(model.inputs, head.output)(x, training=False), np.float64)
    finally:
        head.activation = activation
    centred = logits - logits.mean(axis=0, keepdims=True)
    gain = LOGIT_STD / max(float(centred.std()), 1e-12)
    kernel, bias = head.kernel.numpy(), head.bias.numpy()
    features_term = logits.mean(axis=tuple(range(logits.ndim - 1))) - bias  # mean of features @ kernel
    head.kernel.assign((kernel * gain).astype(np.float32))
    offsets = rng.normal(0.0, 0.5, bias.shape)  # classes apart on average, each image its own winner
    head.bias.assign((-gain * features_term + offsets).astype(np.float32))


def _export(model: Any, x: np.ndarray, out_dir: Path, opset: int) -> None:
    import onnx
    import tensorflow as tf
    import tf2onnx

    perturb(model, x)
    # tf2onnx logs a traceback when one of its optional graph optimizers gives up (MobileNetV3's
    # hard-swish); the conversion goes on without it and the parity check below still holds.
    logging.getLogger("tf2onnx").setLevel(logging.ERROR)
    name = model.inputs[0].name.split(":")[0]
    spec = (tf.TensorSpec((None, *x.shape[1:]), tf.float32, name=name),)
    proto, _ = tf2onnx.convert.from_keras(model, input_signature=spec, opset=opset)
    onnx.save(proto, str(out_dir / MODEL_FILE))
    model.save(str(out_dir / "model.keras"))
    result = model(x, training=False)
    results = result if isinstance(result, (list, tuple)) else [result]
    names = [o.name for o in proto.graph.output]
    save_io(out_dir, {proto.graph.input[0].name: x},
            {n: np.asarray(r) for n, r in zip(names, results, strict=True)})


def _app(factory: str, size: int, **kwargs: Any) -> Any:
    import keras

    keras.utils.set_random_seed(0)
    seed_everything()
    build = getattr(keras.applications, factory)
    return build(weights=None, input_shape=(size, size, 3), classes=10, **kwargs)


def _images(size: int, batch: int = 2) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((batch, size, size, 3)).astype(np.float32)


def mobilenet_v2(out_dir: Path, opset: int) -> None:
    _export(_app("MobileNetV2", 96, alpha=0.35), _images(96), out_dir, opset)


def mobilenet_v3_small(out_dir: Path, opset: int) -> None:
    _export(_app("MobileNetV3Small", 96, alpha=0.75, minimalistic=False, include_preprocessing=False),
            _images(96), out_dir, opset)


def mobilenet_v1(out_dir: Path, opset: int) -> None:
    _export(_app("MobileNet", 64, alpha=0.25), _images(64), out_dir, opset)


def small_cnn(out_dir: Path, opset: int) -> None:
    import keras
    from keras import layers

    keras.utils.set_random_seed(0)
    inp = keras.Input((28, 28, 1), name="digits")
    x = layers.Conv2D(8, 3, activation="relu")(inp)
    x = layers.BatchNormalization()(x)
    x = layers.MaxPooling2D()(x)
    x = layers.SeparableConv2D(16, 3, activation="swish")(x)
    x = layers.GlobalAveragePooling2D()(x)
    out = layers.Dense(10, activation="softmax")(x)
    model = keras.Model(inp, out)
    x_in = np.random.default_rng(0).standard_normal((3, 28, 28, 1)).astype(np.float32)
    _export(model, x_in, out_dir, opset)


def lstm_classifier(out_dir: Path, opset: int) -> None:
    import keras
    from keras import layers

    keras.utils.set_random_seed(0)
    inp = keras.Input((10, 6), name="series")
    x = layers.LSTM(16, return_sequences=True)(inp)
    x = layers.GRU(8)(x)
    out = layers.Dense(3)(x)
    model = keras.Model(inp, out)
    x_in = np.random.default_rng(0).standard_normal((2, 10, 6)).astype(np.float32)
    _export(model, x_in, out_dir, opset)
