"""Bad input to the torch frontend: one-line typed errors that say what to do; the exporter
fallback; the external-data path for models past 2 GB (exercised with a lowered threshold)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir
import pytest

torch = pytest.importorskip("torch", reason="needs torch")
pytest.importorskip("onnxscript", reason="needs onnxscript (torch.onnx dynamo exporter)")

import torch_models as tm  # noqa: E402

from unframe import io  # noqa: E402
from unframe.converters.base import ConvertOptions, InputSpec  # noqa: E402
from unframe.converters.frontends._torch import export as exp  # noqa: E402
from unframe.converters.registry import FRONTENDS  # noqa: E402
from unframe.errors import ConversionError, InputError, UsageError  # noqa: E402
from unframe.validate.onnxruntime import OnnxRuntimeRunner  # noqa: E402


def to_onnx(model: Any, samples: Any, static: bool = False, dynamic: Any = (),
            **options: Any) -> Any:
    fe = FRONTENDS.get("torch")
    opts = ConvertOptions(options=options)
    native = fe.load(model, opts)
    return native, fe.to_onnx(native, InputSpec(samples=samples, static=static,
                                                dynamic=list(dynamic)), opts)


def x4(batch: int = 2) -> Any:
    return torch.randn(batch, 4, generator=torch.Generator().manual_seed(3))


def test_data_dependent_control_flow_with_dynamo_forced() -> None:
    with pytest.raises(ConversionError) as info:
        to_onnx(tm.seeded(tm.DataDependent), x4(), exporter="dynamo")
    text = str(info.value)
    assert "\n" not in text
    assert "data-dependent control flow" in text
    assert "DataDependent" in text and "torch_models.py" in text and "y.sum() > 0" in text
    assert "--exporter torchscript" in info.value.hint


def test_data_dependent_control_flow_falls_back_to_torchscript() -> None:
    native, result = to_onnx(tm.seeded(tm.DataDependent), x4(), static=True)
    assert result.route == "torchscript"
    note = next(n for n in result.notes if "retried with the TorchScript exporter" in n)
    assert "data-dependent" in note and "branch the samples take" in note
    ref, ort = FRONTENDS.get("torch").runner(native, result), OnnxRuntimeRunner(result.model)
    feed = result.feeds[0]
    np.testing.assert_allclose(ort.run(feed)["output_0"], ref.run(feed)["output_0"], atol=1e-6)


def test_wrong_number_of_sample_inputs() -> None:
    with pytest.raises(InputError) as info:
        to_onnx(tm.make_two_inputs(), x4())
    assert "don't match TwoInputs.forward(x" in str(info.value)
    assert "missing a required argument: 'y'" in str(info.value)


def test_sample_inputs_of_the_wrong_shape() -> None:
    with pytest.raises(InputError) as info:
        to_onnx(tm.make_two_inputs(), (torch.ones(2, 5), torch.ones(2, 3)))
    assert "running TwoInputs on the sample inputs failed" in str(info.value)
    assert "shapes" in info.value.hint


def test_sample_dict_keys_that_are_not_parameters() -> None:
    # Keys that aren't parameter names are taken as one dict argument, which TwoInputs lacks.
    with pytest.raises(InputError, match="sample inputs don't match"):
        to_onnx(tm.make_two_inputs(), {"a": torch.ones(2, 4), "b": torch.ones(2, 3)})


def test_no_sample_inputs() -> None:
    with pytest.raises(UsageError, match="need example inputs"):
        to_onnx(tm.make_two_inputs(), None)


def test_unknown_exporter_and_bad_dynamic_axis() -> None:
    with pytest.raises(UsageError, match="unknown exporter"):
        to_onnx(tm.make_two_inputs(), (x4(), torch.ones(2, 3)), exporter="tflite")
    with pytest.raises(UsageError, match="has no input 'z'"):
        to_onnx(tm.make_two_inputs(), (x4(), torch.ones(2, 3)), dynamic=[("z", 1, None)])
    with pytest.raises(UsageError, match="only 2 axes"):
        to_onnx(tm.make_two_inputs(), (x4(), torch.ones(2, 3)), dynamic=[("x", 3, None)])


def test_output_names_of_the_wrong_length() -> None:
    with pytest.raises(UsageError, match="gives 2 names but the model has 1"):
        to_onnx(tm.make_two_inputs(), (x4(), torch.ones(2, 3)), output_names=["a", "b"])


def test_not_a_torch_object() -> None:
    with pytest.raises(UsageError, match="can't take a list"):
        FRONTENDS.get("torch").load([1, 2], ConvertOptions())


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_weights_past_the_threshold_go_to_external_data(exporter: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the threshold (1 GiB; lowered here so a small model takes the same path) the output's
    weights go to external data, written once, from which the result's model reads them after;
    a result kept in memory gets its own copy. Either way training on afterwards changes
    neither: the result is what was checked."""
    import unframe

    monkeypatch.setattr(io.external, "EXTERNAL_DATA_THRESHOLD", 1000)
    monkeypatch.setattr(io.external, "EXTERNAL_TENSOR_MIN_BYTES", 256)
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))
    x = x4()
    with torch.no_grad():
        expected = mlp(x).numpy()
    out = tmp_path / "out.onnx"
    written = unframe.convert(mlp, to="onnx", sample_inputs=x, output=out, exporter=exporter)
    kept = unframe.convert(mlp, to="onnx", sample_inputs=x, exporter=exporter)
    assert any("external data" in n for n in written.notes)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.onnx", "out.onnx.data"]
    for result in (written, kept):  # nothing read from the live parameters any more
        assert not any(io.borrowed(v.const_value) for v in result.model.graph.initializers.values())
    if exporter == "dynamo":  # (TorchScript's graph comes back from its file, weights copied)
        big = [v for v in written.model.graph.initializers.values() if v.const_value.nbytes > 256]
        assert big and all(isinstance(v.const_value, ir.ExternalTensor)
                           and Path(v.const_value.path) == out.with_name("out.onnx.data") for v in big)
        big = [v for v in kept.model.graph.initializers.values() if v.const_value.nbytes > 256]
        assert big and all(isinstance(v.const_value, ir.ExternalTensor) for v in big)
    with torch.no_grad():  # training goes on
        for p in mlp.parameters():
            p.add_(1.0)
    for model in (written.model, kept.model, out):
        runner = OnnxRuntimeRunner(model)
        got = runner.run({runner.input_specs()[0].name: x.numpy()})
        np.testing.assert_allclose(next(iter(got.values())), expected, atol=1e-5)


def test_a_result_kept_in_memory_does_not_follow_training() -> None:
    """torch's exporter hands back a graph whose weights are the live parameters; the result's
    model is the graph that was checked, whatever training does to the module afterwards."""
    import unframe

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    x = x4()
    with torch.no_grad():
        expected = mlp(x).numpy()
    result = unframe.convert(mlp, to="onnx", sample_inputs=x)
    with torch.no_grad():
        for p in mlp.parameters():
            p.mul_(-2.0)
    assert not np.allclose(mlp(x).detach().numpy(), expected)
    runner = OnnxRuntimeRunner(result.model)
    got = runner.run({runner.input_specs()[0].name: x.numpy()})
    np.testing.assert_allclose(next(iter(got.values())), expected, atol=1e-5)


def test_data_dependent_code_every_exporter_refused_is_exit_4() -> None:
    """Exit 4 (the model has what no exporter takes), not 9, once both exporters were tried; with
    one exporter left untried it is still a failure with that exporter as the hint."""
    failures = ["dynamo export of M: data-dependent control flow at m.py:3 (y.sum() > 0)",
                "torchscript export of M: unsupported"]
    both = exp.conversion_error(failures, True, ("dynamo", "torchscript"))
    assert both.exit_code == 4 and "data-dependent" in str(both) and "--static" in both.hint
    one = exp.conversion_error(failures[:1], True, ("dynamo",))
    assert isinstance(one, ConversionError) and one.exit_code == 9
    assert "--exporter torchscript" in one.hint
    not_data = exp.conversion_error(failures, False, ("dynamo", "torchscript"))
    assert isinstance(not_data, ConversionError)


def test_an_op_no_exporter_translates_is_exit_4_naming_it() -> None:
    """aten.cummax has no ONNX translation in either exporter: the model has what no route to
    ONNX takes (exit 4, a blocker per op), not a failure of the conversion (exit 9)."""
    import unframe
    from unframe.errors import UnsupportedError

    class CumMax(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cummax(x, 1).values * 2

    with pytest.raises(UnsupportedError) as err:
        unframe.convert(CumMax(), to="onnx", sample_inputs=torch.randn(2, 5))
    assert err.value.exit_code == 4 and "aten.cummax" in err.value.message
    assert [b.op for b in err.value.blockers] == ["aten.cummax"]
