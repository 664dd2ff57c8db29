"""The TF frontend through the public pipeline: ``unframe.convert`` and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

pytest.importorskip("tensorflow", reason="needs the tf extra (tensorflow)")
pytest.importorskip("tf2onnx", reason="needs the tf extra (tf2onnx)")

import tf_models  # noqa: E402
from click.testing import CliRunner  # noqa: E402

import unframe  # noqa: E402
from unframe.cli.main import cli  # noqa: E402
from unframe.errors import TrustRequiredError  # noqa: E402
from unframe.validate.onnxruntime import OnnxRuntimeRunner  # noqa: E402


def test_convert_keras_object_to_onnx(tmp_path: Path) -> None:
    model = tf_models.causal_conv1d(0)
    out = tmp_path / "causal.onnx"
    result = unframe.convert(model, to="onnx", output=out)
    assert result.report and result.report.stages[0].stage == "export"
    assert result.report.stages[0].cases == 2  # two batch sizes
    assert result.export.route.startswith("tf2onnx from_keras")
    saved = onnx.load(out)
    assert [i.name for i in saved.graph.input] == ["signal"]
    x = np.random.default_rng(5).standard_normal((4, 32, 4)).astype(np.float32)
    got = OnnxRuntimeRunner(saved).run({"signal": x})["forecast"]
    np.testing.assert_allclose(got, model(x).numpy(), atol=1e-4, rtol=1e-3)


def test_keras_sequential_object_converts() -> None:
    """Keras 3's Sequential has no ``output_names``: its outputs are named as tf2onnx names them."""
    import keras

    keras.utils.set_random_seed(2)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(7, activation="tanh"),
                              keras.layers.Dense(3, name="scores")])
    assert not hasattr(model, "output_names")
    x = np.random.default_rng(2).standard_normal((4, 5)).astype(np.float32)
    result = unframe.convert(model, to="onnx", sample_inputs=x)
    assert result.report and result.report.stages[0].cases >= 1
    names = [v.name for v in result.model.graph.outputs]
    got = OnnxRuntimeRunner(result.model).run({result.model.graph.inputs[0].name: x})[names[0]]
    want = model(x).numpy()
    assert 0.1 < float(np.abs(want).max()) < 100
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)


def test_convert_with_sample_inputs_and_older_opset(tmp_path: Path) -> None:
    model = tf_models.two_inputs_two_outputs(0)
    rng = np.random.default_rng(2)
    samples = {"left": rng.standard_normal((3, 4)).astype(np.float32),
               "right": rng.standard_normal((3, 3)).astype(np.float32)}
    result = unframe.convert(model, to="onnx", opset=13, sample_inputs=samples)
    assert result.report
    assert result.export.opset == 13
    got = OnnxRuntimeRunner(result.model).run(samples)
    want = tf_models.call_keras(model, samples)
    for name in ("probs", "score"):
        np.testing.assert_allclose(got[name], want[name], atol=1e-5, rtol=1e-4)


def test_convert_lambda_file_needs_trust(tmp_path: Path) -> None:
    path = tmp_path / "lam.keras"
    tf_models.with_lambda(0).save(path)
    with pytest.raises(TrustRequiredError):
        unframe.convert(path, to="onnx")
    assert unframe.convert(path, to="onnx", trust=True).report


def test_cli_convert_keras_file(tmp_path: Path) -> None:
    src = tmp_path / "cnn.keras"
    tf_models.small_cnn(0).save(src)
    out = tmp_path / "cnn.onnx"
    res = CliRunner().invoke(cli, ["convert", str(src), "--from", "tf", "--to", "onnx",
                                   "--nchw-inputs", "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output[res.output.index("{"):])
    assert report["parity"]["passed"]
    saved = onnx.load(out)
    dims = [d.dim_value or d.dim_param for d in saved.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 3, 16, 16]


def test_cli_lambda_without_trust_exit_code(tmp_path: Path) -> None:
    path = tmp_path / "lam.keras"
    tf_models.with_lambda(0).save(path)
    res = CliRunner().invoke(cli, ["convert", str(path), "-o", str(tmp_path / "o.onnx")])
    assert res.exit_code == TrustRequiredError.exit_code, res.output
    assert not (tmp_path / "o.onnx").exists()


def test_frontend_module_imports_no_framework() -> None:
    code = ("import sys, unframe.converters.frontends.tensorflow as t, "
            "unframe.converters.frontends._tf.native, unframe.converters.frontends._tf.runners;"
            "print(sorted(m for m in ('tensorflow', 'keras', 'tf2onnx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
