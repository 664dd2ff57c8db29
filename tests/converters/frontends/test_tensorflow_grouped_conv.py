"""Keras grouped convolutions (``Conv2D(groups=g)``, ConvNeXt's depthwise 7x7): Keras' TF backend
wraps them in an XLA function tf2onnx can't map; the export traces the plain convolution and
tf2onnx writes ``Conv(group=g)``, checked against Keras' own (XLA) run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

pytest.importorskip("tensorflow", reason="needs the tf extra (tensorflow)")
pytest.importorskip("tf2onnx", reason="needs the tf extra (tf2onnx)")

import keras  # noqa: E402

import unframe  # noqa: E402
from unframe.validate.onnxruntime import OnnxRuntimeRunner  # noqa: E402


def _grouped() -> keras.Model:
    keras.utils.set_random_seed(0)
    inp = keras.Input((16, 16, 8), name="image")
    x = keras.layers.Conv2D(8, 7, padding="same", groups=8, name="depthwise")(inp)  # ConvNeXt's
    x = keras.layers.LayerNormalization()(x)
    x = keras.layers.Conv2D(12, 3, strides=2, groups=4, name="grouped")(x)
    return keras.Model(inp, x)


def test_grouped_convs_export_as_grouped_onnx_convs(tmp_path: Path) -> None:
    model = _grouped()
    x = np.random.default_rng(1).standard_normal((2, 16, 16, 8)).astype(np.float32)
    reference = model(x).numpy()
    assert 0.1 < np.abs(reference).max() < 100  # order-1 outputs: the comparison means something
    out = tmp_path / "grouped.onnx"
    result = unframe.convert(model, to="onnx", sample_inputs=x, output=out)
    assert result.report.stages[0].stage == "export"
    groups = sorted(a.i for n in onnx.load(out).graph.node if n.op_type == "Conv"
                    for a in n.attribute if a.name == "group")
    assert groups == [4, 8]
    runner = OnnxRuntimeRunner(str(out))
    got = runner.run({runner.input_specs()[0].name: x})
    np.testing.assert_allclose(next(iter(got.values())), reference, atol=1e-4, rtol=1e-3)
    # the model itself is untouched: Keras still runs its own (XLA) convolution
    np.testing.assert_array_equal(model(x).numpy(), reference)
