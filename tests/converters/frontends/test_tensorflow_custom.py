"""Keras files with custom classes: refused with the class they need, loaded with
``custom_objects`` (a .py module, which needs trust), and converted with parity.

The classes are plain (no ``register_keras_serializable``), so Keras never learns them
globally: a file that loaded with its module in one test still needs it in the next.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="needs the tf extra (tensorflow)")
pytest.importorskip("tf2onnx", reason="needs the tf extra (tf2onnx)")
ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime")

from click.testing import CliRunner  # noqa: E402

import unframe  # noqa: E402
from unframe.cli.main import cli  # noqa: E402
from unframe.converters.base import ConvertOptions  # noqa: E402
from unframe.converters.registry import FRONTENDS  # noqa: E402
from unframe.errors import InputError, TrustRequiredError  # noqa: E402

CUSTOM_MODULE = '''
import keras
from keras import ops


class ScaleShift(keras.layers.Layer):
    """y = x * scale + shift, per channel, with a config argument."""

    def __init__(self, gain=1.5, **kwargs):
        super().__init__(**kwargs)
        self.gain = gain

    def build(self, input_shape):
        self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="scale")
        self.shift = self.add_weight(shape=(input_shape[-1],), initializer="zeros", name="shift")

    def call(self, x):
        return x * self.scale * self.gain + self.shift

    def get_config(self):
        return {**super().get_config(), "gain": self.gain}


class TinyNet(keras.Model):
    """A subclassed model: Dense -> tanh -> ScaleShift -> Dense."""

    def __init__(self, units=3, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.hidden = keras.layers.Dense(8, name="hidden")
        self.scale_shift = ScaleShift(gain=0.5, name="scale_shift")
        self.head = keras.layers.Dense(units, name="head")

    def call(self, x):
        return self.head(self.scale_shift(ops.tanh(self.hidden(x))))

    def get_config(self):
        return {**super().get_config(), "units": self.units}
'''

_names = itertools.count()


def _import(path: Path) -> ModuleType:
    name = f"test_custom_defs_{next(_names)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _perturb(model: Any, seed: int) -> None:
    """Random-init weights give small outputs: draw every weight from N(0, 0.7) instead."""
    rng = np.random.default_rng(seed)
    for w in model.weights:
        w.assign(rng.normal(0.0, 0.7, size=tuple(w.shape)).astype("float32"))


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Any]:
    """(a) a functional model with a custom layer, (b) a subclassed model; both saved as .keras
    with their reference outputs on a fixed batch."""
    import keras

    folder = tmp_path_factory.mktemp("tf_custom")
    module_path = folder / "custom_defs.py"
    module_path.write_text(CUSTOM_MODULE)
    defs = _import(module_path)
    x = np.random.default_rng(7).normal(size=(4, 6)).astype("float32")

    keras.utils.set_random_seed(0)
    inp = keras.Input((6,), name="x")
    h = keras.layers.Dense(8, name="dense_in")(inp)
    h = defs.ScaleShift(gain=1.5, name="scale_shift")(h)
    functional = keras.Model(inp, keras.layers.Dense(3, name="y")(h), name="with_layer")
    _perturb(functional, 1)

    keras.utils.set_random_seed(0)
    subclassed = defs.TinyNet(units=3, name="tiny")
    subclassed(np.zeros((1, 6), "float32"))
    _perturb(subclassed, 2)

    out: dict[str, Any] = {"module": module_path, "x": x}
    for key, model in (("layer", functional), ("subclassed", subclassed)):
        path = folder / f"{key}.keras"
        model.save(path)
        ref = np.asarray(model(x, training=False))
        assert np.abs(ref).max() > 0.1 and np.isfinite(ref).all()
        out[key] = (path, ref)
    return out


@pytest.fixture(scope="module")
def fe():
    return FRONTENDS.get("tf")


CLASS_OF = {"layer": "ScaleShift", "subclassed": "TinyNet"}


def _onnx_output(path: Path, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


@pytest.mark.parametrize("key", ["layer", "subclassed"])
def test_missing_class_is_named(saved, fe, key: str) -> None:
    path, _ = saved[key]
    with pytest.raises(InputError) as err:
        fe.load(path, ConvertOptions())
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: needs the custom class '{CLASS_OF[key]}' "
                          "(a custom layer or subclassed model)")
    assert "pass --custom-objects module.py that defines it (with --trust)" in msg
    assert "re-save" not in msg


@pytest.mark.parametrize("key", ["layer", "subclassed"])
def test_module_needs_trust(saved, key: str, tmp_path: Path) -> None:
    path, _ = saved[key]
    with pytest.raises(TrustRequiredError) as err:
        unframe.convert(path, to="onnx", custom_objects=str(saved["module"]),
                        output=tmp_path / "m.onnx")
    assert err.value.exit_code == 6
    msg = str(err.value)
    assert str(saved["module"]) in msg and "--trust" in msg and "\n" not in msg
    assert not (tmp_path / "m.onnx").exists()


@pytest.mark.parametrize("key", ["layer", "subclassed"])
def test_converts_with_module_and_trust(saved, key: str, tmp_path: Path) -> None:
    path, ref = saved[key]
    out = tmp_path / f"{key}.onnx"
    result = unframe.convert(path, to="onnx", custom_objects=str(saved["module"]), trust=True,
                             output=out)
    assert result.report and out.is_file()
    got = _onnx_output(out, saved["x"])
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


def test_registration_does_not_leak(saved, fe) -> None:
    """After a load with the module, a load without it still fails: nothing was registered."""
    path, _ = saved["layer"]
    fe.load(path, ConvertOptions(trust=True, options={"custom_objects": str(saved["module"])}))
    with pytest.raises(InputError, match="needs the custom class 'ScaleShift'"):
        fe.load(path, ConvertOptions(trust=True))


def test_dict_and_module_objects_need_no_trust(saved, fe) -> None:
    """From Python the classes are already imported: nothing runs from a file."""
    path, ref = saved["layer"]
    defs = _import(saved["module"])
    for given in ({"ScaleShift": defs.ScaleShift}, defs):
        native = fe.load(path, ConvertOptions(options={"custom_objects": given}))
        np.testing.assert_allclose(np.asarray(native.obj(saved["x"], training=False)), ref,
                                   atol=1e-6)


def test_module_without_the_class(saved, fe, tmp_path: Path) -> None:
    other = tmp_path / "other_defs.py"
    other.write_text("import keras\n\nclass Unrelated(keras.layers.Layer):\n"
                     "    def call(self, x):\n        return x\n")
    with pytest.raises(InputError) as err:
        fe.load(saved["layer"][0], ConvertOptions(trust=True, options={"custom_objects": str(other)}))
    assert "needs the custom class 'ScaleShift'" in str(err.value)
    assert str(other) in str(err.value)


def test_module_that_raises_on_import(saved, fe, tmp_path: Path) -> None:
    bad = tmp_path / "broken_defs.py"
    bad.write_text("import keras\nraise RuntimeError('no GPU here\\nsecond line')\n")
    with pytest.raises(InputError) as err:
        fe.load(saved["layer"][0], ConvertOptions(trust=True, options={"custom_objects": str(bad)}))
    msg = str(err.value)
    assert err.value.exit_code == 3 and "\n" not in msg
    assert str(bad) in msg and "RuntimeError: no GPU here" in msg and "second line" not in msg


def test_missing_module_file(saved, fe, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.py"
    for trust in (False, True):
        with pytest.raises(InputError) as err:
            fe.load(saved["layer"][0], ConvertOptions(trust=trust,
                                                      options={"custom_objects": str(missing)}))
        assert str(missing) in str(err.value)


def test_truncated_file_keeps_its_message(saved, fe, tmp_path: Path) -> None:
    """Real corruption is not mistaken for a missing class."""
    path = tmp_path / "cut.keras"
    with zipfile.ZipFile(saved["layer"][0]) as src, zipfile.ZipFile(path, "w") as dst:
        dst.writestr("config.json", src.read("config.json"))  # config, but no weights
        dst.writestr("metadata.json", src.read("metadata.json"))
    with pytest.raises(InputError) as err:
        fe.load(path, ConvertOptions(trust=True, options={"custom_objects": str(saved["module"])}))
    assert "re-save it with model.save()" in str(err.value)
    assert "needs the custom" not in str(err.value)


def test_cli(saved, tmp_path: Path) -> None:
    path, ref = saved["layer"]
    out = tmp_path / "cli.onnx"
    runner = CliRunner()
    r = runner.invoke(cli, ["convert", str(path), "--to", "onnx", "-o", str(out)])
    assert r.exit_code == 3, r.output
    assert "needs the custom class 'ScaleShift'" in r.output and "--custom-objects" in r.output
    r = runner.invoke(cli, ["convert", str(path), "--to", "onnx", "-o", str(out),
                            "--custom-objects", str(saved["module"])])
    assert r.exit_code == 6, r.output
    r = runner.invoke(cli, ["convert", str(path), "--to", "onnx", "-o", str(out),
                            "--custom-objects", str(saved["module"]), "--trust"])
    assert r.exit_code == 0, r.output
    assert "wrote" in r.output
    np.testing.assert_allclose(_onnx_output(out, saved["x"]), ref, atol=1e-4, rtol=1e-4)
