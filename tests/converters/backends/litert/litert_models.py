"""Tiny seeded models for the LiteRT tests, outputs of order 1, and the frontends' inputs for them
(what the direct functions take: the torch frontend's ModelInputs, the TF frontend's TfModel and
input specs)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest


def torch_cnn() -> Any:
    """Conv -> ReLU -> mean -> Linear, perturbed: outputs of order 1."""
    import torch

    torch.manual_seed(0)

    class Cnn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x: Any) -> Any:
            return self.fc(torch.relu(self.conv(x)).mean((2, 3))) * 3.0

    return perturbed(Cnn().eval())


def torch_two_heads() -> Any:
    """A float input and an integer one, a dict of outputs (one integer)."""
    import torch

    torch.manual_seed(1)

    class Heads(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(5, 3)

        def forward(self, x: Any, ids: Any) -> Any:
            return {"score": torch.tanh(self.fc(x)) * 2.0, "ids2": ids * 2}

    return perturbed(Heads().eval())


def torch_batch_view() -> Any:
    """A view that holds the batch (``h.view(batch, 2, 3)``) and ``ids * 2``: litert-torch 0.10
    can't lower it with a dynamic batch, and its static .tflite can't be resized to another
    batch (the reshape keeps the traced one)."""
    import torch

    torch.manual_seed(2)

    class BatchView(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(6, 6)

        def forward(self, x: Any, ids: Any) -> Any:
            return self.fc(x).view(x.shape[0], 2, 3).softmax(-1) * 3.0, ids * 2

    return perturbed(BatchView().eval())


def hf_llama() -> Any:
    """A one-layer Llama from its config class (no download), seeded and perturbed."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=64, max_position_embeddings=32,
                                      use_cache=False)
    return perturbed(transformers.LlamaForCausalLM(config).eval())


def perturbed(model: Any) -> Any:
    import torch

    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2 * float(p.std().clamp(min=1e-2)) if p.numel() > 1 else p * 0.1)
    return model


def torch_inputs(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None, *,
                 static: bool = False) -> Any:
    """What the torch frontend prepares: names per tensor leaf and the dynamic axes."""
    from unframe.converters.base import InputSpec
    from unframe.converters.frontends._torch.inputs import finalize

    return finalize(model, args, kwargs or {}, InputSpec(static=static), type(model).__name__)


def keras_two_io() -> Any:
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(0)
    image = keras.Input((12, 12, 3), name="image")
    extra = keras.Input((5,), name="extra")
    h = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(image)
    h = keras.layers.GlobalAveragePooling2D()(h)
    logits = keras.layers.Dense(4, name="logits")(h)
    total = keras.layers.Add(name="total")([keras.layers.Dense(5)(h), extra])
    model = keras.Model([image, extra], [logits, total])
    for layer in model.layers:  # Keras' init leaves biases at 0 and small outputs: perturb
        layer.set_weights([w + np.random.default_rng(0).normal(0, 0.3, w.shape).astype(w.dtype)
                           for w in layer.get_weights()])
    return model


def tf_inputs(native: Any) -> tuple[Any, list[Any]]:
    """(TfModel, input specs) as the TF frontend loads and declares them."""
    from unframe.converters.base import InputSpec
    from unframe.converters.frontends._tf.native import from_object
    from unframe.converters.frontends._tf.signature import declared_inputs

    model = from_object(native, None)
    return model, declared_inputs(model, InputSpec())


def scale_ok(values: Any) -> bool:
    """Outputs of order 1: a check that the parity in a test can fail."""
    top = max(float(np.abs(np.asarray(v, dtype=np.float64)).max()) for v in values)
    return 0.1 < top < 20.0
