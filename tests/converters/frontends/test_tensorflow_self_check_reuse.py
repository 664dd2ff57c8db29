"""The TF frontend checks each export route's graph with onnxruntime on the parity feeds; the
pipeline's export parity then compares the same graph on the same feeds. It reuses the frontend's
onnxruntime outputs instead of running the graph again (the Conv2DTranspose case of issue 39 ran
every 17M-element output twice)."""

from __future__ import annotations

import numpy as np
import pytest

import unframe
from unframe.validate import onnxruntime as ort_module

keras = pytest.importorskip("keras", reason="needs keras")


def test_export_parity_reuses_the_self_checks_runs(monkeypatch) -> None:
    keras.utils.set_random_seed(0)
    inp = keras.Input((6, 6, 3), name="image")
    model = keras.Model(inp, keras.layers.Dense(4)(keras.layers.Flatten()(keras.layers.Conv2D(4, 3)(inp))))
    x = np.random.default_rng(0).normal(size=(2, 6, 6, 3)).astype(np.float32)
    runs: list[int] = []
    real = ort_module.OnnxRuntimeRunner.run

    def counted(self, feeds):  # the real run, counted
        runs.append(1)
        return real(self, feeds)

    monkeypatch.setattr(ort_module.OnnxRuntimeRunner, "run", counted)
    result = unframe.convert(model, to="onnx", sample_inputs=x)
    export = result.report.stages[0]
    assert export.stage == "export" and export.status == "passed" and export.cases == 2
    assert len(runs) == 2, runs  # the self-check's two feeds; the parity stage ran none again
