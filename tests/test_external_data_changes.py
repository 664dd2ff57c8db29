"""External data files that change while converting: refused (exit 3), nothing written, and
the same file left alone by a conversion that doesn't touch it."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import unframe
from unframe import pipeline as pl
from unframe.errors import InputError


def _model_with_external_data(folder: Path) -> Path:
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "m.onnx"
    onnx.save(model, path, save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    return path


@pytest.mark.parametrize("change", ["rewritten", "touched"])
def test_external_data_changed_during_conversion_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    src = tmp_path / "in"
    src.mkdir()
    path = _model_with_external_data(src)
    data = src / "m.onnx.data"
    real_run = pl.ParityStage.run

    def meanwhile(self: pl.ParityStage, flow: pl.Flow) -> None:
        real_run(self, flow)
        if change == "rewritten":  # another process re-saves the weights in place
            with data.open("r+b") as f:
                f.write(b"\0" * 16)
        else:  # same bytes, a newer modification time: can't tell what was read
            stat = data.stat()
            os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))

    monkeypatch.setattr(pl.ParityStage, "run", meanwhile)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(InputError, match="changed while converting") as err:
        unframe.convert(path, to="onnx", opset=21, output=out / "m21.onnx")
    assert err.value.exit_code == 3
    assert list(out.iterdir()) == []  # no output, no data file, no staging folder


def test_unchanged_external_data_converts_and_stays_as_it_was(tmp_path: Path) -> None:
    path = _model_with_external_data(tmp_path)
    data = tmp_path / "m.onnx.data"
    before = (data.read_bytes(), data.stat().st_mtime_ns)
    result = unframe.convert(path, to="onnx", opset=21, output=tmp_path / "m21.onnx")
    assert result.report and (tmp_path / "m21.onnx").is_file()
    assert (data.read_bytes(), data.stat().st_mtime_ns) == before
    scale = result.report.stages[-1].outputs[0].scale
    assert scale > 1, scale  # outputs of order 1+: the parity the write followed means something
