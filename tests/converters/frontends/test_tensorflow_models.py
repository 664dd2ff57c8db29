"""TF/Keras frontend on real architectures built with seeded weights: names, dynamic batch,
channels-last layout and numbers against Keras itself (called directly, not through the
frontend's runner)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

pytest.importorskip("tensorflow", reason="needs the tf extra (tensorflow)")
pytest.importorskip("tf2onnx", reason="needs the tf extra (tf2onnx)")

import tf_models  # noqa: E402

from unframe.converters.base import ConvertOptions, InputSpec  # noqa: E402
from unframe.converters.registry import FRONTENDS  # noqa: E402
from unframe.validate.compare import compare  # noqa: E402
from unframe.validate.onnxruntime import OnnxRuntimeRunner  # noqa: E402

ARCHITECTURES = ["small_cnn", "tiny_mobilenet", "text_rnn", "causal_conv1d", "attention", "two_io"]


@pytest.fixture(scope="module")
def fe():
    return FRONTENDS.get("tf")


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_architecture_exports_with_parity(fe, name: str) -> None:
    model = tf_models.BUILDERS[name](0)
    native = fe.load(model, ConvertOptions())
    export = fe.to_onnx(native, InputSpec(), ConvertOptions())
    graph = export.model.graph

    # Names are the Keras model's own.
    assert [v.name for v in graph.inputs] == [t.name for t in model.inputs]
    assert sorted(v.name for v in graph.outputs) == sorted(model.output_names)
    assert export.route.startswith("tf2onnx from_keras"), export.notes
    assert export.opset == fe.default_opset()

    # Dynamic batch named "batch"; other dims (channels-last included) exactly as in Keras.
    for value, tensor in zip(graph.inputs, model.inputs, strict=True):
        dims = list(value.shape)
        assert isinstance(dims[0], ir.SymbolicDim) and dims[0].value == "batch"
        assert dims[1:] == list(tensor.shape[1:])
    batches = [next(iter(f.values())).shape[0] for f in export.feeds]
    assert len(export.feeds) == 2 and batches[0] != batches[1]

    ort = OnnxRuntimeRunner(export.model)
    for feed in export.feeds:
        got = ort.run(feed)
        want = tf_models.call_keras(model, feed)
        assert set(got) == set(want)
        for out_name, value in want.items():
            np.testing.assert_allclose(got[out_name], value, atol=1e-4, rtol=1e-3,
                                       err_msg=f"{name}: output {out_name}")

    # The frontend's runner (used by the pipeline's parity stage) agrees as well.
    assert compare(fe.runner(native, export), ort, export.feeds)
    if name == "text_rnn":
        _check_token_feeds(export.feeds)


def _check_token_feeds(feeds: list[dict[str, np.ndarray]]) -> None:
    """Generated token ids are valid for the Embedding (below input_dim) yet varied."""
    tokens = [f["tokens"] for f in feeds]
    assert all(t.dtype == np.int32 for t in tokens)
    assert all(0 <= t.min() and t.max() < tf_models.VOCAB for t in tokens)
    assert len(np.unique(np.concatenate([t.ravel() for t in tokens]))) > 10
