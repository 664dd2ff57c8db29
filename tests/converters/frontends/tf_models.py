"""Small Keras models built with seeded weights, shared by the TF frontend tests and bench.

Each builder returns a fresh, uncompiled ``keras.Model`` with named inputs and outputs. Weights are
seeded (``keras.utils.set_random_seed``), and BatchNormalization statistics are set to non-trivial
values so that a wrong inference-mode conversion would show up in parity.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

VOCAB = 50  # Embedding input_dim of the text model


def _seed(seed: int) -> None:
    import keras

    keras.utils.set_random_seed(seed)


def _randomize_batchnorm(model: Any, seed: int) -> None:
    """Give every BatchNormalization layer non-trivial moving statistics (fresh layers have mean 0,
    variance 1, which would hide a conversion that ignores them)."""
    import keras

    rng = np.random.default_rng(seed)
    for layer in model._flatten_layers():
        if isinstance(layer, keras.layers.BatchNormalization):
            for w in (layer.moving_mean, layer.gamma, layer.beta):
                w.assign(rng.normal(0.0, 0.5, size=w.shape).astype("float32"))
            layer.moving_variance.assign(rng.uniform(0.5, 2.0, size=layer.moving_variance.shape)
                                         .astype("float32"))


def small_cnn(seed: int = 0) -> Any:
    import keras
    from keras import layers

    _seed(seed)
    image = keras.Input((16, 16, 3), name="image")
    x = layers.Conv2D(8, 3, padding="same", name="conv1")(image)
    x = layers.BatchNormalization(name="bn1")(x)
    x = layers.ReLU()(x)
    x = layers.MaxPooling2D(name="pool1")(x)
    x = layers.Conv2D(8, 3, strides=1, padding="valid", name="conv2")(x)
    x = layers.BatchNormalization(name="bn2")(x)
    x = layers.AveragePooling2D(2, name="pool2")(x)
    x = layers.GlobalAveragePooling2D()(x)
    logits = layers.Dense(5, name="logits")(x)
    model = keras.Model(image, logits, name="small_cnn")
    _randomize_batchnorm(model, seed)
    return model


def mobilenet_v2(seed: int = 0) -> Any:
    import keras

    _seed(seed)
    model = keras.applications.MobileNetV2(input_shape=(32, 32, 3), alpha=0.35, weights=None,
                                           classes=7)
    _randomize_batchnorm(model, seed)
    return model


def text_rnn(seed: int = 0) -> Any:
    import keras
    from keras import layers

    _seed(seed)
    tokens = keras.Input((12,), dtype="int32", name="tokens")
    x = layers.Embedding(VOCAB, 8, name="embed")(tokens)
    x = layers.Bidirectional(layers.LSTM(6, return_sequences=True), name="bilstm")(x)
    x = layers.GRU(5, name="gru")(x)
    scores = layers.Dense(3, activation="softmax", name="scores")(x)
    return keras.Model(tokens, scores, name="text_rnn")


def causal_conv1d(seed: int = 0) -> Any:
    import keras
    from keras import layers

    _seed(seed)
    signal = keras.Input((32, 4), name="signal")
    x = signal
    for i, rate in enumerate((1, 2, 4)):
        x = layers.Conv1D(6, 3, padding="causal", dilation_rate=rate, activation="relu",
                          name=f"causal{i}")(x)
    out = layers.Conv1D(2, 1, name="forecast")(x)
    return keras.Model(signal, out, name="causal_conv1d")


def attention(seed: int = 0) -> Any:
    import keras
    from keras import layers

    _seed(seed)
    seq = keras.Input((10, 16), name="sequence")
    attn = layers.MultiHeadAttention(num_heads=2, key_dim=8, name="mha")(seq, seq)
    x = layers.LayerNormalization(name="ln1")(seq + attn)
    ff = layers.Dense(16, activation="gelu", name="ff")(x)
    x = layers.LayerNormalization(name="ln2")(x + ff)
    pooled = layers.GlobalAveragePooling1D()(x)
    return keras.Model(seq, pooled, name="attention")


def two_inputs_two_outputs(seed: int = 0) -> Any:
    """Named inputs and outputs in a dict: names must survive the conversion."""
    import keras
    from keras import layers

    _seed(seed)
    a = keras.Input((4,), name="left")
    b = keras.Input((3,), name="right")
    x = layers.Concatenate()([a, b])
    x = layers.Dense(6, activation="tanh", name="hidden")(x)
    return keras.Model({"left": a, "right": b},
                       {"score": layers.Dense(1, name="score")(x),
                        "probs": layers.Dense(3, activation="softmax", name="probs")(x)},
                       name="two_io")


def with_lambda(seed: int = 0) -> Any:
    import keras
    from keras import layers

    _seed(seed)
    x_in = keras.Input((4,), name="x")
    x = layers.Lambda(lambda t: t * 2.0 + 1.0, name="affine")(x_in)
    return keras.Model(x_in, layers.Dense(2, name="y")(x), name="with_lambda")


BUILDERS: dict[str, Callable[[int], Any]] = {
    "small_cnn": small_cnn,
    "mobilenet_v2": mobilenet_v2,
    "text_rnn": text_rnn,
    "causal_conv1d": causal_conv1d,
    "attention": attention,
    "two_io": two_inputs_two_outputs,
}


def tiny_mobilenet(seed: int = 0) -> Any:
    """A Keras application architecture (MobileNet v1, alpha 0.25, 32x32): small enough for tests."""
    import keras

    _seed(seed)
    model = keras.applications.MobileNet(input_shape=(32, 32, 3), alpha=0.25, weights=None,
                                         classes=6)
    _randomize_batchnorm(model, seed)
    return model


def tiny_attention(seed: int = 0) -> Any:
    """One tiny MultiHeadAttention: tf2onnx writes an Einsum node, which needs opset 12+."""
    import keras
    from keras import layers

    _seed(seed)
    seq = keras.Input((4, 6), name="sequence")
    out = layers.MultiHeadAttention(num_heads=1, key_dim=2, name="mha")(seq, seq)
    return keras.Model(seq, out, name="tiny_attention")


def gelu_mlp(seed: int = 0) -> Any:
    """Exact GELU: TF lowers it to Erfc, which tf2onnx 1.17 can't map by itself."""
    import keras
    from keras import layers

    _seed(seed)
    x = keras.Input((8,), name="x")
    y = layers.Dense(4, activation="gelu", name="hidden")(x)
    return keras.Model(x, layers.Dense(2, name="y")(y), name="gelu_mlp")


BUILDERS["tiny_mobilenet"] = tiny_mobilenet


def call_keras(model: Any, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run a Keras model on a feed by input name, outputs by output name: independent of the
    frontend's own runner, for tests to compare against."""
    names = [t.name for t in model.inputs]
    struct = getattr(model, "_inputs_struct", None)
    if isinstance(struct, dict):
        args: Any = {k: feed[v.name] for k, v in struct.items()}
    elif len(names) == 1:
        args = feed[names[0]]
    else:
        args = [feed[n] for n in names]
    out = model(args, training=False)
    if isinstance(out, dict):
        return {k: np.asarray(v) for k, v in out.items()}
    outs = out if isinstance(out, (list, tuple)) else [out]
    return {n: np.asarray(v) for n, v in zip(model.output_names, outs, strict=True)}
