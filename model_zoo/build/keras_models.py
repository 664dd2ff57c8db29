"""Keras reference models: Keras applications with ``weights=None`` at small input sizes, plus
a small functional CNN and an LSTM, exported through tf2onnx (``from_keras``).

Every builder is ``build(out_dir, opset)``: it writes ``model.onnx``, the native ``model.keras``,
``inputs.npz`` and Keras' own ``outputs.npz`` (keyed by the ONNX output names) into ``out_dir``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
from zoo_common import MODEL_FILE, save_io, seed_everything

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _export(model: Any, x: np.ndarray, out_dir: Path, opset: int) -> None:
    import onnx
    import tensorflow as tf
    import tf2onnx

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
