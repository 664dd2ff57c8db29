"""KerasConvert over a real 3-epoch fit: per epoch, a checked ONNX file from that epoch's
weights, converted in a background process; parity figures in the fit's logs; training left
exactly as it would have been; ranks other than 0 convert nothing."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.callbacks.conftest import framework

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
keras = framework("keras")

from unframe.callbacks.keras import KerasConvert  # noqa: E402


def build() -> Any:
    keras.utils.set_random_seed(0)
    inp = keras.Input((8,), name="x")
    h = keras.layers.Dense(16, kernel_initializer=keras.initializers.RandomNormal(0, 0.6))(inp)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.Dropout(0.2)(keras.layers.Activation("relu")(h))
    model = keras.Model(inp, keras.layers.Dense(4, name="y")(h))
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    return model


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(64, 8)).astype("float32"), rng.normal(size=(64, 4)).astype("float32")


class Settle(keras.callbacks.Callback):
    """Real epochs outlast a conversion; these take milliseconds. Waiting for the converter at
    each epoch's end gives every epoch its own job, and keeps the weights each job was given."""

    def __init__(self, convert: KerasConvert) -> None:
        super().__init__()
        self.convert = convert
        self.weights: list[list[np.ndarray]] = []

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.weights.append([w.copy() for w in self.model.get_weights()])
        converter = self.convert.schedule.converter
        deadline = time.monotonic() + 300
        while not converter.idle and time.monotonic() < deadline:
            time.sleep(0.05)


@pytest.mark.slow
def test_three_epochs_give_checked_artifacts_and_logs(tmp_path: Path) -> None:
    import onnxruntime as ort

    x, y = data()
    model = build()
    convert = KerasConvert(tmp_path / "out", to="onnx")
    settle = Settle(convert)
    history = model.fit(x, y, epochs=3, batch_size=16, verbose=0, shuffle=False,
                        callbacks=[convert, settle])

    names = sorted(p.name for p in (tmp_path / "out").glob("*.onnx"))
    assert names == ["epoch=0-step=4.onnx", "epoch=1-step=8.onnx", "epoch=2-step=12.onnx"]
    assert all(o.ok for o in convert.outcomes) and len(convert.outcomes) == 3
    twin = build()
    for name, weights in zip(names, settle.weights, strict=True):
        twin.set_weights(weights)
        expected = twin.predict(x[:5], verbose=0)
        assert 0.3 < np.abs(expected).max() < 30
        got = ort.InferenceSession(str(tmp_path / "out" / name)).run(None, {"x": x[:5]})[0]
        np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-3)
    assert not np.array_equal(settle.weights[0][0], settle.weights[2][0])
    # Parity in the fit's logs: the figures of each conversion as it arrived.
    passed = history.history["unframe/onnx/parity_passed"]
    assert passed and all(v == 1.0 for v in passed)
    # (0 itself happens: Keras and onnxruntime can run this small Dense stack bit for bit alike)
    assert all(0 <= v < 1e-4 for v in history.history["unframe/onnx/parity_max_abs"])
    # Training is exactly what it is without the callback.
    plain = build()
    plain.fit(x, y, epochs=3, batch_size=16, verbose=0, shuffle=False)
    for a, b in zip(model.get_weights(), plain.get_weights(), strict=True):
        assert np.array_equal(a, b)


def test_only_rank_zero_converts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    x, y = data()
    model = build()
    convert = KerasConvert(tmp_path / "out", to="onnx")
    model.fit(x, y, epochs=2, batch_size=16, verbose=0, callbacks=[convert])
    assert convert.outcomes == [] and convert.schedule.converter is None
    assert not (tmp_path / "out").exists()
