"""The torch frontend through the pipeline: ``unframe.convert`` and ``unframe convert``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch")
pytest.importorskip("onnxscript", reason="needs onnxscript (torch.onnx dynamo exporter)")

import torch_models as tm  # noqa: E402
from click.testing import CliRunner  # noqa: E402

import unframe  # noqa: E402
from unframe.cli.main import cli  # noqa: E402
from unframe.validate.onnxruntime import OnnxRuntimeRunner  # noqa: E402

HERE = Path(__file__).parent


def pair(batch: int = 2) -> tuple[Any, Any]:
    gen = torch.Generator().manual_seed(21)
    return torch.randn(batch, 4, generator=gen), torch.randn(batch, 3, generator=gen)


def test_convert_api_with_parity_at_two_batch_sizes(tmp_path: Path) -> None:
    model = tm.make_two_inputs()
    out = tmp_path / "two.onnx"
    result = unframe.convert(model, to="onnx", sample_inputs=pair(), output=out)
    assert result.report, result.report.to_dict()
    torch_stage = result.report.stages[0]
    assert torch_stage.status == "passed" and "torch" in torch_stage.reference
    assert torch_stage.cases == 2
    assert result.export is not None and result.export.route == "dynamo"
    assert "dynamo" in json.dumps(result.provenance)
    ort = OnnxRuntimeRunner(out)
    x, y = pair(5)
    got = ort.run({"x": x.numpy(), "y": y.numpy()})["output_0"]
    np.testing.assert_allclose(got, model(x, y).detach().numpy(), atol=1e-5)


def test_convert_api_to_an_older_opset(tmp_path: Path) -> None:
    out = tmp_path / "old.onnx"
    result = unframe.convert(tm.make_two_inputs(), to="onnx", sample_inputs=pair(), output=out,
                             opset=17, exporter="dynamo")
    assert result.report, result.report.to_dict()
    assert result.export is not None and result.export.opset == 18
    assert unframe.load(out).opset_imports[""] == 17


def test_cli_converts_a_pt2(tmp_path: Path) -> None:
    src = tmp_path / "model.pt2"
    torch.export.save(torch.export.export(tm.make_two_inputs(), pair()), src)
    out = tmp_path / "model.onnx"
    res = CliRunner().invoke(cli, ["convert", str(src), "--to", "onnx", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert out.is_file()
    assert "parity" in res.output and "passed" in res.output


def test_cli_refuses_a_pickle_without_trust(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    src = tmp_path / "whole.pt"
    torch.save(tm.make_two_inputs(), src)
    res = CliRunner().invoke(cli, ["convert", str(src), "--to", "onnx", "-o", str(tmp_path / "o.onnx")])
    assert res.exit_code == 6, res.output
    assert "--trust" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "o.onnx").exists()


def test_cli_factory_reference_with_inputs_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    out = tmp_path / "f.onnx"
    args = ["convert", "torch_models:make_two_inputs", "--trust", "--inputs",
            "x:2x4:float32,y:2x3:float32", "--exporter", "torchscript", "--to", "onnx", "-o", str(out)]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert "torchscript" in res.output or out.is_file()
    model = unframe.load(out)
    assert [v.name for v in model.graph.inputs] == ["x", "y"]
