"""convert() on a live Keras model mid-training: weights, optimizer state, trainable flags,
compiled state and RNGs come back exactly as they were, on success and on Ctrl-C, and fit()
goes on identically; mixed precision and a distribution strategy convert."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

import unframe  # noqa: E402
from unframe import pipeline as pl  # noqa: E402


def build(seed: int = 0) -> Any:
    keras.utils.set_random_seed(seed)
    inp = keras.Input((8,), name="x")
    h = keras.layers.Dense(16, name="d1")(inp)
    h = keras.layers.BatchNormalization(name="bn")(h)
    h = keras.layers.Dropout(0.3, name="drop")(keras.layers.Activation("relu")(h))
    out = keras.layers.Dense(4, dtype="float32", name="head")(h)
    model = keras.Model(inp, out)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    return model


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(32, 8)).astype("float32"), rng.normal(size=(32, 4)).astype("float32")


def fingerprint(model: Any) -> dict[str, Any]:
    return {
        "weights": [(v.path, v.numpy().tobytes()) for v in model.variables],
        "optimizer": [(v.path, v.numpy().tobytes()) for v in model.optimizer.variables],
        "trainable": [(layer.name, layer.trainable) for layer in model.layers],
        "compiled": (model.compiled, id(model.optimizer), model.loss, id(model.train_function)),
        "policy": keras.mixed_precision.global_policy().name,
        "numpy_rng": np.random.get_state()[1].tobytes(),
        "python_rng": random.getstate(),
    }


def test_keras_model_mid_training_is_left_exactly_and_fits_on_identically(tmp_path: Path) -> None:
    x, y = data()
    model = build()
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    model.get_layer("d1").trainable = False  # a frozen layer stays frozen
    model.compile(optimizer=model.optimizer, loss="mse")
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    before = fingerprint(model)

    result = unframe.convert(model, to="onnx", output=tmp_path / "k.onnx")

    assert result.report and (tmp_path / "k.onnx").is_file()
    assert 0.3 < result.report.stages[0].outputs[0].scale < 30
    assert fingerprint(model) == before
    # An untouched copy of the same seeded run trains to the same weights.
    twin = build()
    twin.fit(x, y, epochs=1, batch_size=8, verbose=0)
    twin.get_layer("d1").trainable = False
    twin.compile(optimizer=twin.optimizer, loss="mse")
    twin.fit(x, y, epochs=1, batch_size=8, verbose=0)
    keras.utils.set_random_seed(3)
    loss = model.fit(x, y, epochs=1, batch_size=8, verbose=0, shuffle=False).history["loss"]
    keras.utils.set_random_seed(3)
    twin_loss = twin.fit(x, y, epochs=1, batch_size=8, verbose=0, shuffle=False).history["loss"]
    assert loss == twin_loss
    for a, b in zip(model.variables, twin.variables, strict=True):
        assert np.array_equal(a.numpy(), b.numpy()), a.path


def test_keras_state_restored_after_ctrl_c_in_a_stage(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = data()
    model = build()
    model.fit(x, y, epochs=1, verbose=0)
    before = fingerprint(model)

    def interrupted(self: Any, flow: Any) -> None:
        model.get_layer("bn").moving_mean.assign(np.ones(16, "float32"))
        model.get_layer("head").trainable = False
        raise KeyboardInterrupt

    monkeypatch.setattr(pl.ParityStage, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        unframe.convert(model, to="onnx", output=tmp_path / "k.onnx")
    assert fingerprint(model) == before and list(tmp_path.iterdir()) == []


def test_mixed_precision_model_is_checked_at_float16_tolerance() -> None:
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = build()
        x, y = data()
        model.fit(x, y, epochs=1, verbose=0)
        before = fingerprint(model)
        result = unframe.convert(model, to="onnx")
    finally:
        keras.mixed_precision.set_global_policy("float32")
    out = result.report.stages[0].outputs[0]
    assert result.report and (out.atol, out.rtol) == (1e-2, 1e-2)
    assert out.max_abs > 1e-4  # float16 compute: a float32 tolerance would have failed it
    assert any("mixed precision" in n for n in result.notes)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        assert fingerprint(model) == before
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_model_under_a_distribution_strategy() -> None:
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        model = build()
    x, y = data()
    model.fit(x, y, epochs=1, verbose=0)
    before = fingerprint(model)
    result = unframe.convert(model, to="onnx")
    assert result.report and fingerprint(model) == before


def test_the_exports_own_number_check_is_timed_as_parity(tmp_path: Path) -> None:
    """The TF frontend checks each route's numbers against TensorFlow (to pick a route): that
    time is validation, reported under the export's parity, not as the export's work; with
    validation off there is no such check."""
    x, _ = data()
    model = build()
    checked = unframe.convert(model, to="onnx", sample_inputs=x[:4])
    assert checked.export.check_seconds > 0
    assert checked.timings["parity:export"] >= checked.export.check_seconds
    unvalidated = unframe.convert(model, to="onnx", sample_inputs=x[:4], validate=False)
    assert unvalidated.export.check_seconds == 0.0
    assert "parity:export" not in unvalidated.timings
