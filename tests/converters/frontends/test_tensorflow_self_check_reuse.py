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
    model, x = _dense_model()
    runs = _counted_keras_runs(monkeypatch)
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


def _counted_keras_runs(monkeypatch) -> list[tuple[int, ...]]:
    from unframe.converters.frontends._tf import runners

    runs: list[tuple[int, ...]] = []
    real = runners.KerasRunner._run

    def counted(self, arrays):
        runs.append(next(iter(arrays.values())).shape)
        return real(self, arrays)

    monkeypatch.setattr(runners.KerasRunner, "_run", counted)
    return runs


def test_a_batch_one_sample_is_read_from_the_batch_probes_leading_row(monkeypatch) -> None:
    """A batch-1 sample (a training script's usual one): the batch probe repeats it, so
    TensorFlow runs the probe alone and its first row is the sample's reference (one model run of
    three sizes' worth fewer); onnxruntime still runs the graph at each size and matches it, and
    the graph then answers the sample as Keras run on it alone does."""
    import onnx_ir as ir
    import onnxruntime as ort

    model, x = _dense_model()
    one = x[:1]
    runs = _counted_keras_runs(monkeypatch)
    result = unframe.convert(model, to="onnx", sample_inputs=one)
    export = result.report.stages[0]
    assert export.status == "passed" and export.cases == 2, export.summary()
    assert [r[0] for r in runs] == [2], runs  # the batch probe only; parity reused it
    assert any("leading rows" in n for n in result.notes), result.notes
    session = ort.InferenceSession(ir.serde.serialize_model(result.model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: one})[0]
    np.testing.assert_allclose(got, np.asarray(model(one, training=False)), rtol=1e-4, atol=1e-5)


def test_rows_that_interact_make_tensorflow_run_the_sample_itself(monkeypatch) -> None:
    """A model whose rows interact (each row plus the batch's sum): the probe's first row is not
    the sample's answer, the check of the sample against it fails, and TensorFlow runs the sample
    itself; the export passes on the true reference and says so."""

    @keras.saving.register_keras_serializable(package="unframe_tests")
    class PlusBatchSum(keras.layers.Layer):
        def call(self, x):
            return x + keras.ops.sum(x, axis=0, keepdims=True)

    keras.utils.set_random_seed(0)
    inp = keras.Input((4,), name="x")
    model = keras.Model(inp, PlusBatchSum()(keras.layers.Dense(3)(inp)))
    sample = np.random.default_rng(1).normal(size=(1, 4)).astype(np.float32)
    runs = _counted_keras_runs(monkeypatch)
    result = unframe.convert(model, to="onnx", sample_inputs=sample)
    export = result.report.stages[0]
    assert export.status == "passed" and export.cases == 2, export.summary()
    assert sorted(r[0] for r in runs) == [1, 2], runs  # the probe, then the sample itself
    assert any("ran the first feed itself after all" in n for n in result.notes), result.notes


def test_a_drawn_probe_holds_the_first_feed_as_its_leading_rows() -> None:
    """Without samples unframe draws both feeds; a probe that only grows an axis keeps the first
    feed as its leading block (new values after it), so its run can stand for the first feed's."""
    from unframe.converters.frontends._tf import axes

    rng = np.random.default_rng(0)
    first = {"x": rng.normal(size=(2, 5)).astype(np.float32), "ids": rng.integers(0, 9, (2, 7))}

    def redraw(shapes):
        r = np.random.default_rng(1)
        return {"x": r.normal(size=shapes["x"]).astype(np.float32), "ids": r.integers(0, 9, shapes["ids"])}

    probe = axes.probe_feed(first, [("x", 0), ("ids", 0)], True, redraw)
    assert probe["x"].shape == (3, 5) and probe["ids"].shape == (3, 7)
    assert axes.leading_rows(first, probe, [("x", 0), ("ids", 0)]) == 2
    assert not np.array_equal(probe["x"][2], probe["x"][0])  # the added row is new data
    # an axis other than the batch one, or a probe that shrinks: nothing stands for the first feed
    longer = axes.probe_feed(first, [("ids", 1)], True, redraw)
    assert axes.leading_rows(first, longer, [("ids", 1)]) == 0
    assert axes.leading_rows(probe, first, [("x", 0), ("ids", 0)]) == 0
    assert axes.derived_outputs([np.ones((3, 4)), np.zeros(3)], 2, 3)[0].shape == (2, 4)
    assert axes.derived_outputs([np.ones((4, 4))], 2, 3) is None  # no batch-sized leading axis
