from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper
from spine_utils import mlp_model, snapshot

import unframe
from unframe import io
from unframe.cli.main import cli
from unframe.converters.base import ExportResult, Frontend
from unframe.converters.registry import FRONTENDS
from unframe.errors import ParityError
from unframe.validate.runner import Runner


def test_convert_object_in_memory_returns_model_and_report():
    result = unframe.convert(mlp_model(), to="onnx")
    assert isinstance(result.artifact.model, ir.Model)
    assert result.path is None and result.written == []
    assert result.route.frontend == "onnx" and result.route.backend == "onnx"
    assert result.report  # truthy: no stage failed
    assert json.loads(result.report.to_json())["passed"] is True


def test_convert_file_writes_provenance(mlp_path: Path, tmp_path: Path):
    out = tmp_path / "out.onnx"
    result = unframe.convert(mlp_path, output=out)
    assert result.written == [out]
    props = {p.key: p.value for p in onnx.load(out).metadata_props}
    assert props["unframe.source_sha256"] == hashlib.sha256(mlp_path.read_bytes()).hexdigest()
    assert json.loads(props["unframe.tools"])["onnxruntime"] == ort.__version__
    assert json.loads(props["unframe.opset_path"]) == ["13"]
    assert json.loads(props["unframe.parity"])["passed"] is True
    # the written graph computes what the source does
    x = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
    a = ort.InferenceSession(str(mlp_path)).run(None, {"x": x})[0]
    b = ort.InferenceSession(str(out)).run(None, {"x": x})[0]
    np.testing.assert_array_equal(a, b)


def test_inspect_shows_provenance_and_ops(mlp_path: Path, tmp_path: Path):
    out = tmp_path / "out.onnx"
    unframe.convert(mlp_path, output=out)
    res = CliRunner().invoke(cli, ["inspect", str(out), "--json"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["ops"] == {"Add": 1, "MatMul": 1, "Relu": 1, "Softmax": 1}
    assert info["inputs"] == [{"name": "x", "shape": ["N", 4], "dtype": "float"}]
    assert info["initializer_bytes"] == (12 + 3) * 4
    assert info["provenance"]["source"] == str(mlp_path)
    human = CliRunner().invoke(cli, ["inspect", str(out)])
    assert "provenance" in human.output and "MatMul" in human.output


def test_explain_plans_without_writing(mlp_path: Path, tmp_path: Path):
    before = snapshot(tmp_path)
    res = CliRunner().invoke(cli, ["convert", str(mlp_path), "--opset", "17", "-o", str(tmp_path / "o.onnx"),
                                   "--explain", "--json"])
    assert res.exit_code == 0, res.output
    route = json.loads(res.stdout)
    assert route["opset_path"] == [13, 17]
    assert [s["name"] for s in route["stages"]] == ["load", "opset", "parity", "backend", "stamp", "write"]
    assert snapshot(tmp_path) == before


def test_large_models_get_external_data(mlp_path: Path, tmp_path: Path, monkeypatch):
    """Above the protobuf limit weights go to a .data file beside the model (threshold lowered
    here so the test needn't allocate 2 GB; the code path is the same)."""
    monkeypatch.setattr(io.external, "EXTERNAL_DATA_THRESHOLD", 10)
    monkeypatch.setattr(io.external, "EXTERNAL_TENSOR_MIN_BYTES", 0)
    out = tmp_path / "big.onnx"
    unframe.convert(mlp_path, output=out)
    assert (tmp_path / "big.onnx.data").is_file()
    assert io.external_files(onnx.load(out, load_external_data=False)) == {"big.onnx.data"}
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(ort.InferenceSession(str(out)).run(None, {"x": x})[0],
                               ort.InferenceSession(str(mlp_path)).run(None, {"x": x})[0])


def test_save_is_atomic_and_respects_force(tmp_path: Path):
    model = ir.serde.deserialize_model(mlp_model())
    out = tmp_path / "m.onnx"
    unframe.save(model, out)
    with pytest.raises(unframe.errors.OutputExistsError):
        unframe.save(model, out)
    unframe.save(model, out, force=True)
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]  # no temp files left behind
    assert unframe.load(out).graph.node(0).op_type == "MatMul"


class _BuggyFrontend(Frontend):
    """An exporter with a bug (Relu where the source computes LeakyRelu): the export parity
    stage must catch it and nothing may be written."""

    name = "buggy-test"
    suffixes = (".buggy",)

    def load(self, source, opts):
        return Path(source).read_text()

    def to_onnx(self, native, spec, opts):
        g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
        proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        proto.ir_version = 8
        return ExportResult(model=ir.serde.deserialize_model(proto), tool="buggy",
                            feeds=[{"x": np.array([-1.0, 0.5, 2.0], np.float32)}])

    def runner(self, native, export):
        class Leaky(Runner):
            name = "leaky source"

            def run(self, feeds):
                x = feeds["x"]
                return {"y": np.where(x > 0, x, 0.1 * x)}

        return Leaky()


@pytest.fixture
def buggy_frontend():
    FRONTENDS.register("buggy-test", _BuggyFrontend())
    yield
    FRONTENDS.unregister("buggy-test")


def test_parity_failure_writes_nothing(buggy_frontend, tmp_path: Path):
    src = tmp_path / "m.buggy"
    src.write_text("model")
    before = snapshot(tmp_path)
    with pytest.raises(ParityError) as info:
        unframe.convert(src, output=tmp_path / "out.onnx")
    assert info.value.report.first_failure.stage == "export"
    assert "1 of 3 elements differ" in str(info.value)
    assert snapshot(tmp_path) == before
    res = CliRunner().invoke(cli, ["convert", str(src), "-o", str(tmp_path / "out.onnx")])
    assert res.exit_code == 5 and res.stderr.startswith("error: parity failed at the export stage")
    # an explicit, looser tolerance is the user's call
    ok = unframe.convert(src, output=tmp_path / "out.onnx", atol=0.2)
    assert ok.report and (tmp_path / "out.onnx").is_file()


def test_missing_extra_error_names_the_extra(monkeypatch):
    from unframe.errors import MissingExtraError

    class NeedsNothingThere(_BuggyFrontend):
        requires = ("a_module_that_is_not_installed",)
        extra = "imaginary"

    fe = NeedsNothingThere()
    with pytest.raises(MissingExtraError) as info:
        fe.ensure_available()
    assert "pip install 'unframe[imaginary]'" in str(info.value) and info.value.exit_code == 8


def test_check_cli_lists_blockers_for_onnx(tmp_path: Path):
    # a graph whose declared output type contradicts the op: strict shape inference refuses it
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.INT64, [3])])
    p = tmp_path / "bad_types.onnx"
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, p)
    res = CliRunner().invoke(cli, ["check", str(p), "--to", "onnx", "--json"])
    assert res.exit_code == 4
    blockers = json.loads(res.stdout)["blockers"]
    assert any("shape inference" in b["reason"] for b in blockers)


def test_check_ok_model(mlp_path: Path):
    res = CliRunner().invoke(cli, ["check", str(mlp_path), "--to", "onnx"])
    assert res.exit_code == 0 and "ok:" in res.output
