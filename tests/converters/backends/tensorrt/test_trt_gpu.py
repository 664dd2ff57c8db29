"""GPU tier: the engine's outputs against onnxruntime's. Skipped, with the reason, when the CUDA
driver reports no device (checked through libcuda before any TensorRT runtime object exists)."""

from __future__ import annotations

import numpy as np
import pytest
from trt_models import cnn_model, gpu_or_skip, ort_run, trt_or_skip

from unframe.converters.base import Target
from unframe.converters.registry import BACKENDS
from unframe.validate.compare import compare_arrays

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_engine_matches_onnxruntime_on_two_batch_sizes(precision, tmp_path):
    trt_or_skip()
    gpu_or_skip()
    backend = BACKENDS.get("tensorrt")
    model = cnn_model()
    target = Target("tensorrt", options={"precision": precision, "builder_optimization_level": 0,
                                         "sample_shapes": {"x": (2, 3, 16, 16)}})
    artifact = backend.convert(model, target, tmp_path)
    runner = backend.runner(artifact, target)
    tol = backend.tolerance(np.dtype(np.float32), target)
    assert tol.of_scale == (precision == "fp16")
    rng = np.random.default_rng(0)
    for batch in (1, 5):
        feeds = {"x": rng.standard_normal((batch, 3, 16, 16)).astype(np.float32)}
        got, want = runner.run(feeds)["y"], ort_run(model, feeds)["y"]
        assert got.shape == want.shape == (batch, 5)
        parity = compare_arrays("y", want, got, tol.atol, tol.rtol, of_scale=tol.of_scale)
        assert parity.passed and parity.scale > 0.3, parity.reason
