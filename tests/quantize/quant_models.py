"""Trained tiny models for the quantization tests (issue 38): built in seconds from data that
ships with scikit-learn, so accuracy figures mean something (random networks have logits too
close together for top-1 to say anything)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Trained:
    model: Any
    train: np.ndarray
    test: np.ndarray
    test_labels: np.ndarray
    float_accuracy: float


def digits_cnn(seed: int = 0, epochs: int = 6) -> Trained:
    """A small CNN on scikit-learn's 8x8 digits (1,797 images): about 89-92% test accuracy."""
    import torch
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    x = (images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(32 * 64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    xt, yt = torch.tensor(x[:1400]), torch.tensor(labels[:1400])
    for _ in range(epochs):
        for i in range(0, 1400, 100):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xt[i:i + 100]), yt[i:i + 100]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        acc = float((model(torch.tensor(x[1400:])).argmax(1).numpy() == labels[1400:]).mean())
    return Trained(model, x[:1400], x[1400:], labels[1400:], acc)


def onnx_accuracy(path: Any, trained: Trained) -> float:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    scores = session.run(None, {session.get_inputs()[0].name: trained.test})[0]
    return float((scores.argmax(1) == trained.test_labels).mean())
