"""The pipeline as users meet it: several targets in one call, checked options, the Python
result, progress and quiet output, per-target pre-flight, and the bad inputs of a multi-target
call. Real runtimes throughout: onnxruntime, coremltools + the MIL evaluator, tensorrt-rtx."""

from __future__ import annotations

import json
import os
import sys
import time
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
from unframe import api
from unframe import pipeline as pl
from unframe.cli.main import cli, error_line
from unframe.converters.registry import BACKENDS
from unframe.errors import UnsupportedError, UsageError
from unframe.opset import main_opset
from unframe.route import parse_targets

sys.path.insert(0, str(Path(__file__).parent / "converters" / "frontends"))  # torch_models, tf_models

HAVE_COREML = BACKENDS.get("coreml").available()
HAVE_TRT = BACKENDS.get("tensorrt").available()
needs_coreml = pytest.mark.skipif(not HAVE_COREML, reason="needs coremltools (the coreml extra)")
needs_trt = pytest.mark.skipif(not HAVE_TRT, reason="needs tensorrt-rtx (the tensorrt extra)")


def _det_model(path: Path) -> Path:
    """y = det(x) + sum(x): onnxruntime runs Det; Core ML has no translator for it."""
    nodes = [helper.make_node("Det", ["x"], ["d"]), helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Add", ["d", "s"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


# --------------------------------------------------------------------------- several targets --
@needs_coreml
@needs_trt
def test_torch_to_three_targets_exports_once(tmp_path: Path, monkeypatch) -> None:
    torch = pytest.importorskip("torch", reason="needs torch")
    pytest.importorskip("onnxscript", reason="needs onnxscript")
    import torch_models as tm

    from unframe.converters.frontends.torch import TorchFrontend

    model = tm.make_cnn()
    x = tm.cnn_sample(2)
    with torch.no_grad():
        ref = model(x)[0].numpy()  # the logits
    assert np.abs(ref).max() > 0.1, "a model with outputs of order 1, so parity proves something"
    src = tmp_path / "cnn.pt2"
    torch.export.save(torch.export.export(model, (x,)), src)
    calls = []
    real = TorchFrontend.to_onnx
    monkeypatch.setattr(TorchFrontend, "to_onnx", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))

    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["convert", str(src), "--to", "onnx,coreml,tensorrt", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert len(calls) == 1, "the three targets share one export"
    assert sorted(p.name for p in out.iterdir()) == ["cnn.engine", "cnn.engine.json", "cnn.mlpackage", "cnn.onnx"]
    sess = ort.InferenceSession(str(out / "cnn.onnx"))
    got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-3)
    sidecar = json.loads((out / "cnn.engine.json").read_text())
    assert json.loads(sidecar["provenance"]["opset_path"])[-1] == "21"
    assert "export: torch exporter" in json.loads(sidecar["provenance"]["route"])
    # one report lists every artifact, with the CoreML stage checked by the MIL evaluator
    assert "coreml:" in res.output and "MIL evaluator" in res.output and "wrote" in res.output


@needs_coreml
def test_keras_to_onnx_and_coreml_in_one_call(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow", reason="needs tensorflow")
    import tf_models

    model = tf_models.small_cnn(seed=3)
    src = tmp_path / "cnn.keras"
    model.save(src)
    x = np.random.default_rng(0).random((2, *model.inputs[0].shape[1:])).astype(np.float32)
    ref = np.asarray(model(x))
    assert np.abs(ref).max() > 0.05
    result = unframe.convert(src, to=["onnx", "coreml"], output=tmp_path / "out")
    assert isinstance(result, api.MultiResult) and result and set(result.results) == {"onnx", "coreml"}
    onnx_out = result["onnx"].written[0]
    sess = ort.InferenceSession(str(onnx_out))
    got = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-3)
    coreml = result["coreml"]
    stages = [s.stage for s in coreml.report.stages]
    assert stages[0] == "export" and stages[-1] == "backend"
    assert coreml.report.stages[-1].status == "passed" and "MIL" in coreml.report.stages[-1].candidate
    assert int(json.loads(_prop(onnx_out, "opset_path"))[-1]) == main_opset(ir.load(onnx_out))


def _prop(path: Path, key: str) -> str:
    return {p.key: p.value for p in onnx.load(path).metadata_props}[f"unframe.{key}"]


def test_to_all_is_every_backend_usable_here(monkeypatch) -> None:
    usable = [n for n, be in BACKENDS.items() if be.available()]
    assert parse_targets("all") == usable
    coreml = BACKENDS.get("coreml")
    monkeypatch.setattr(type(coreml), "missing", lambda self: ["coremltools"])
    assert "coreml" not in parse_targets("all")
    assert parse_targets("onnx, trt") == ["onnx", "tensorrt"]  # aliases and spaces


def test_one_target_failing_leaves_the_others_written(tmp_path: Path) -> None:
    src = _det_model(tmp_path / "det.onnx")
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["convert", str(src), "--to", "onnx,coreml", "-o", str(out)])
    assert res.exit_code == 4, res.output  # the failed stage's code: unsupported
    assert "coreml" in res.stderr and "Det" in res.stderr
    assert [p.name for p in out.iterdir()] == ["det.onnx"], "the ONNX target is written, nothing half-made"
    x = np.random.default_rng(1).standard_normal((3, 3)).astype(np.float32)
    got = ort.InferenceSession(str(out / "det.onnx")).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, np.linalg.det(x) + x.sum(), rtol=1e-4)
    with pytest.raises(api.PartialFailure) as info:
        unframe.convert(src, to="onnx,coreml", output=tmp_path / "again")
    assert set(info.value.result.results) == {"onnx"} and set(info.value.result.errors) == {"coreml"}
    assert info.value.exit_code == UnsupportedError.exit_code


def test_multi_target_bad_input(tmp_path: Path, mlp_path: Path) -> None:
    before = snapshot(tmp_path)
    bad = CliRunner().invoke(cli, ["convert", str(mlp_path), "--to", "onnx,corml", "-o", str(tmp_path / "o")])
    assert bad.exit_code == 2 and "unknown target 'corml'" in bad.stderr and "coreml" in bad.stderr
    file_out = tmp_path / "taken.onnx"
    file_out.write_bytes(b"x")
    as_file = CliRunner().invoke(cli, ["convert", str(mlp_path), "--to", "onnx,tensorrt", "-o", str(file_out)])
    assert as_file.exit_code == 2 and "is a file" in as_file.stderr
    file_out.unlink()
    assert snapshot(tmp_path) == before


def test_explain_lists_the_shared_prefix_and_each_branch(mlp_path: Path, tmp_path: Path) -> None:
    before = snapshot(tmp_path)
    res = CliRunner().invoke(cli, ["convert", str(mlp_path), "--to", "onnx,tensorrt", "--opset", "17",
                                   "-o", str(tmp_path / "out"), "--explain", "--json"])
    assert res.exit_code == 0, res.output
    route = json.loads(res.stdout)
    assert route["targets"] == ["onnx", "tensorrt"]
    assert route["branches"]["onnx"]["opset_path"] == [13, 17]
    assert route["branches"]["tensorrt"]["opset_path"] == [13, 21]
    assert [s["name"] for s in route["branches"]["onnx"]["stages"]] == ["opset", "parity", "backend", "stamp",
                                                                       "write"]
    assert snapshot(tmp_path) == before, "explaining writes nothing, not even the output folder"
    zoo = CliRunner().invoke(cli, ["zoo", "upgrade", str(tmp_path), "--opset", "17", "-o", str(tmp_path / "z"),
                                   "--to", "onnx,corml"])
    assert zoo.exit_code == 2 and "unknown target 'corml'" in zoo.stderr


# --------------------------------------------------------------------------- options ----------
def test_an_option_no_stage_reads_is_a_usage_error(mlp_path: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError) as typo:
        unframe.convert(mlp_path, to="coreml", precison="fp16", output=tmp_path / "m.mlpackage")
    assert "precison" in str(typo.value) and "did you mean 'precision'" in str(typo.value)
    with pytest.raises(UsageError) as elsewhere:
        unframe.convert(mlp_path, to="onnx", image_input="x", output=tmp_path / "m.onnx")
    assert "no stage of this route" in str(elsewhere.value)
    res = CliRunner().invoke(cli, ["convert", str(mlp_path), "--image-input", "x", "-o", str(tmp_path / "m.onnx")])
    assert res.exit_code == 2
    assert list(tmp_path.iterdir()) == [mlp_path]


def test_validate_false_needs_no_parity_inputs(tmp_path: Path) -> None:
    """A sequence input can't be drawn as a feed; with validation off nothing needs one."""
    seq = helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, ["n"])
    nodes = [helper.make_node("SequenceAt", ["seq", "i"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]
    g = helper.make_graph(nodes, "g", [seq, helper.make_tensor_value_info("i", TensorProto.INT64, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    src = tmp_path / "seq.onnx"
    onnx.save(m, src)
    with pytest.raises(Exception):  # noqa: B017 - with validation on, feeds are needed and can't be drawn
        unframe.convert_opset(src, 15, output=tmp_path / "v.onnx")
    res = unframe.convert_opset(src, 15, output=tmp_path / "seq15.onnx", validate=False)
    assert res.report.stages == [] and main_opset(res.model) == 15
    sess = ort.InferenceSession(str(tmp_path / "seq15.onnx"))
    a, b = np.ones((2,), np.float32), -np.ones((2,), np.float32)
    np.testing.assert_array_equal(sess.run(None, {"seq": [a, b], "i": np.array(1)})[0], [0, 0])


# --------------------------------------------------------------------------- the result -------
def test_python_result_reads_like_the_cli(mlp_path: Path, tmp_path: Path) -> None:
    result = unframe.convert(mlp_path, opset=17)
    assert isinstance(result.model, ir.Model) and main_opset(result.model) == 17
    text = str(result.report)
    assert "parity opset: passed" in text and "output scale" in text
    assert str(result.route).startswith("route onnx -> onnx") and "opset 13 -> 17" in str(result.route)
    out = tmp_path / "saved.onnx"
    assert result.save(out) == [out]
    x = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
    np.testing.assert_allclose(ort.InferenceSession(str(out)).run(None, {"x": x})[0],
                               ort.InferenceSession(str(mlp_path)).run(None, {"x": x})[0], rtol=1e-6)
    assert _prop(out, "opset_path") == '["13", "17"]'
    with pytest.raises(unframe.errors.OutputExistsError):
        result.save(out)


def test_written_files_carry_no_dead_initializers(tmp_path: Path) -> None:
    m = mlp_model()
    m.graph.initializer.append(onnx.numpy_helper.from_array(np.ones((64,), np.float32), "dead"))
    m.graph.node.append(helper.make_node("Neg", ["x"], ["unused"]))
    src = tmp_path / "dead.onnx"
    onnx.save(m, src)
    unframe.convert(src, opset=17, output=tmp_path / "clean.onnx")
    clean = onnx.load(tmp_path / "clean.onnx")
    assert "dead" not in {i.name for i in clean.graph.initializer}
    assert "Neg" not in {n.op_type for n in clean.graph.node}
    assert len(clean.graph.initializer) == len(m.graph.initializer) - 1


def test_recorded_opset_path_is_the_written_files(tmp_path: Path) -> None:
    """scikit-learn models are exported at the opset skl2onnx chooses; provenance says that one."""
    pytest.importorskip("sklearn", reason="needs scikit-learn")
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 4)).astype(np.float32)
    est = LogisticRegression().fit(X, (X[:, 0] > 0).astype(int))
    out = tmp_path / "lr.onnx"
    unframe.convert(est, sample_inputs=X[:8], output=out)
    written = onnx.load(out)
    path = json.loads(_prop(out, "opset_path"))
    assert int(path[-1]) == {o.domain: o.version for o in written.opset_import}[""]


# --------------------------------------------------------------------------- check ------------
def test_check_to_all_lists_each_target(tmp_path: Path) -> None:
    src = _det_model(tmp_path / "det.onnx")
    res = CliRunner().invoke(cli, ["check", str(src), "--to", "all", "--json"])
    assert res.exit_code == 4
    data = json.loads(res.stdout)
    per = data["targets"]
    reachable = {n for n in parse_targets("all") if BACKENDS.get(n).reachable_from("onnx")}
    assert set(per) == reachable  # no route reaches LiteRT or ExecuTorch from an ONNX file
    skipped = sorted(set(parse_targets("all")) - reachable)
    if skipped:
        assert any(n.startswith("all: ") and all(s in n for s in skipped) for n in data["notes"])
    assert per["onnx"]["ok"] is True
    if "coreml" in per:
        assert per["coreml"]["ok"] is False and any(b["op"] == "Det" for b in per["coreml"]["blockers"])
    human = CliRunner().invoke(cli, ["check", str(src), "--to", "all"])
    assert "pre-flight per target" in human.stdout and "ok: onnx can take" in human.stdout


# --------------------------------------------------------------------------- talking ----------
def test_errors_stay_one_short_line(tmp_path: Path) -> None:
    long_path = tmp_path / ("m" * 400 + ".onnx")
    res = CliRunner().invoke(cli, ["convert", str(long_path)])
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 3 and len(lines) == 1 and len(lines[0]) < 330
    assert "--debug shows the whole message" in lines[0]
    debug = CliRunner().invoke(cli, ["convert", str(long_path), "--debug"])
    assert str(long_path) in debug.stderr
    short = UsageError("bad", "do this")
    assert error_line(short) == "bad (do this)"


def test_json_output_is_only_json(mlp_path: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["convert", str(mlp_path), "--opset", "17", "-o", str(tmp_path / "o.onnx"),
                                   "--json"])
    assert res.exit_code == 0
    data = json.loads(res.stdout)
    assert data["parity"]["passed"] is True and data["written"] == [str(tmp_path / "o.onnx")]
    assert isinstance(pl.Observer(), pl.Observer)


def test_spinner_shows_for_slow_stages_on_a_terminal_only(monkeypatch) -> None:
    import pty

    from unframe.cli import progress

    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as tty:
        monkeypatch.setattr("sys.stderr", tty)
        observer = progress.observer_for(as_json=False)
        assert isinstance(observer, progress.TerminalProgress)
        assert type(progress.observer_for(as_json=True)) is pl.Observer

        class Slow(pl.Stage):
            kind = "backend"

        with observer.stage(Slow("quick tool")):
            pass
        with observer.stage(Slow("slow tool")):
            time.sleep(progress.DELAY + 0.6)
        observer.close()
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert b"slow tool" in seen and b"quick tool" not in seen
    # on a pipe (CliRunner, CI) there is no spinner at all
    assert type(progress.observer_for(as_json=False)) is pl.Observer


def test_work_after_a_failed_parity_is_bounded_by_the_parity_time_limit():
    """The rounding measurement and the keep-list planner are part of a parity check: past
    --parity-timeout they are given up with a note (the failure they would explain stands),
    not left to run; within it their result comes back."""
    from types import SimpleNamespace

    flow = SimpleNamespace(settings=pl.Settings(options={"parity_timeout": 0.3}), notes=[])

    def slow() -> str:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # Python code, where the watchdog's exception lands
            sum(range(1000))
        return "finished"

    started = time.monotonic()
    assert pl.in_parity_time(flow, "planning which nodes to keep in float32", slow) is None
    assert time.monotonic() - started < 2
    assert flow.notes and "stopped at the parity time limit (0.3 s)" in flow.notes[0]
    assert pl.in_parity_time(flow, "measuring", lambda: "quick") == "quick"
    assert len(flow.notes) == 1
