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


def _dense_model():
    keras.utils.set_random_seed(0)
    inp = keras.Input((6, 6, 3), name="image")
    model = keras.Model(inp, keras.layers.Dense(4)(keras.layers.Flatten()(keras.layers.Conv2D(4, 3)(inp))))
    rng = np.random.default_rng(0)
    model.set_weights([w + rng.normal(0, 0.3, w.shape).astype(w.dtype) for w in model.get_weights()])
    return model, rng.normal(size=(2, 6, 6, 3)).astype(np.float32)


def test_the_parity_reference_reuses_tensorflows_own_runs_of_the_export(monkeypatch) -> None:
    """The export's probes ran TensorFlow on both parity feeds: the parity stage's reference
    returns those outputs instead of running the model again (was 4 runs: 2 probes, 2 parity)."""
    from unframe.converters.frontends._tf import runners

    model, x = _dense_model()
    runs: list[tuple[int, ...]] = []
    real = runners.KerasRunner._run

    def counted(self, arrays):
        runs.append(next(iter(arrays.values())).shape)
        return real(self, arrays)

    monkeypatch.setattr(runners.KerasRunner, "_run", counted)
    result = unframe.convert(model, to="onnx", sample_inputs=x)
    assert result.report.stages[0].status == "passed" and result.report.stages[0].cases == 2
    assert len(runs) == 2 and runs[0][0] != runs[1][0], runs  # the samples and the batch probe, once each


def test_the_self_checks_comparison_stands_for_parity_unless_the_options_differ(monkeypatch) -> None:
    """The frontend compared the same outputs on the same feeds at the export's tolerances: the
    parity stage reports that comparison instead of making it again, unless --atol/--rtol change
    what it would compare (then it compares, once more)."""
    from unframe.validate import compare as compare_module

    model, x = _dense_model()
    calls: list[str] = []
    real = compare_module.compare

    def counted(*args, **kwargs):
        calls.append(kwargs.get("stage", ""))
        return real(*args, **kwargs)

    monkeypatch.setattr(compare_module, "compare", counted)
    from unframe.pipeline import parity as parity_module

    monkeypatch.setattr(parity_module, "compare", counted)
    result = unframe.convert(model, to="onnx", sample_inputs=x)
    export = result.report.stages[0]
    assert export.status == "passed" and export.cases == 2 and export.max_abs < 1e-4
    assert export.reference.startswith("keras") and export.candidate.startswith("onnxruntime")
    assert calls == ["export"], calls  # the frontend's own comparison only
    calls.clear()
    result = unframe.convert(model, to="onnx", sample_inputs=x, atol=1e-3)
    assert result.report.stages[0].status == "passed"
    assert calls == ["export", "export"], calls  # --atol: the parity stage compares itself
