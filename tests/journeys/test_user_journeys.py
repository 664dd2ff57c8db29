"""The three ways people use unframe, run exactly as they run them: the installed ``unframe``
command (or a training script) in a subprocess, on models the project's own scripts build
(``unframe zoo build`` of model_zoo/manifest.toml). Each test fails if any model fails.

1. ``unframe convert model.keras --from tf --to coreml`` (and ``--to all``);
2. a training script calling ``unframe.convert()`` with a Lightning or a Keras callback;
3. ``unframe zoo build`` then ``unframe zoo upgrade -j 2``, killed with SIGKILL mid-run and
   finished with ``--resume``, and the same upgrade on a Dask LocalCluster.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from unframe.zoo.journal import journal_path, read_journal

UNFRAME = Path(sys.executable).with_name("unframe")  # the console script `make` installed
SCRIPTS = Path(__file__).parent / "scripts"
OPSET = 21

pytestmark = pytest.mark.slow


def unframe(*args: str | Path, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    assert UNFRAME.exists(), f"{UNFRAME} is missing: `make test` installs the package with its command"
    return subprocess.run([str(UNFRAME), *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result


def build_zoo(where: Path, *only: str) -> Path:
    built = where / "built"
    picks = [a for name in only for a in ("--only", name)]
    ok(unframe("zoo", "build", "-o", built, *picks, cwd=where))
    return built


def onnx_matches_saved_outputs(model: Path, folder: Path, atol: float = 1e-4) -> None:
    """An independent check of a written file: onnxruntime on the saved inputs gives the
    framework's saved outputs."""
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    with np.load(folder / "inputs.npz") as i, np.load(folder / "outputs.npz") as o:
        got = session.run(None, {k: i[k] for k in i.files})
        names = [x.name for x in session.get_outputs()]
        for name, value in zip(names, got, strict=True):
            want = o[name]
            scale = max(1.0, float(np.abs(want).max()))
            assert np.allclose(value, want, atol=atol * scale, rtol=1e-3), f"{model}: output {name}"


# ------------------------------------------------------------------------ 1. the CLI ------------
def test_cli_converts_the_zoos_keras_models_to_coreml_and_to_every_target(tmp_path: Path) -> None:
    built = build_zoo(tmp_path, "keras_small_cnn_op11", "keras_lstm_op13")
    for name in ("keras_small_cnn_op11", "keras_lstm_op13"):
        source = built / "keras" / name / "model.keras"
        package = tmp_path / f"{name}.mlpackage"
        ok(unframe("convert", source, "--from", "tf", "--to", "coreml", "-o", package, cwd=tmp_path))
        shown = json.loads(ok(unframe("inspect", package, "--json", cwd=tmp_path)).stdout)
        stages = shown["provenance"]["parity"]["stages"]
        assert [s["stage"] for s in stages] == ["export", "opset", "backend"]
        assert all(s["status"] == "passed" for s in stages), stages
        assert shown["provenance"]["parity"]["passed"]

        folder = tmp_path / f"{name}_all"
        run = ok(unframe("convert", source, "--from", "tf", "--to", "all", "-o", folder, cwd=tmp_path))
        for suffix in ("onnx", "mlpackage", "engine"):
            assert (folder / f"model.{suffix}").exists(), run.stdout
        onnx_matches_saved_outputs(folder / "model.onnx", source.parent)


# ------------------------------------------------------------------- 2. a training script -------
def _train(script: str, *args: Path, cwd: Path) -> dict:
    run = subprocess.run([sys.executable, str(SCRIPTS / script), *map(str, args)], cwd=cwd,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"{script}: exit {run.returncode}\n{run.stderr[-4000:]}"
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["outcomes"], "the callback converted nothing"
    failed = [o for o in summary["outcomes"] if not o["ok"]]
    assert not failed, failed
    assert summary["final_passed"], summary["final_stages"]
    return summary


def _final_matches_the_trained_model(out: Path) -> None:
    session = ort.InferenceSession(str(out / "final.onnx"), providers=["CPUExecutionProvider"])
    with np.load(out / "final_io.npz") as io:
        (got,) = session.run(None, {session.get_inputs()[0].name: io["x"]})
        assert np.abs(io["y"]).max() > 1e-3, "the trained model's outputs are ~0: parity proves nothing"
        np.testing.assert_allclose(got, io["y"], atol=1e-4, rtol=1e-3)


def test_a_lightning_training_script_converts_every_epoch_and_at_the_end(tmp_path: Path) -> None:
    pytest.importorskip("lightning", reason="the lightning extra is not installed")
    summary = _train("train_lightning.py", tmp_path / "run", cwd=tmp_path)
    # epochs here take milliseconds, so a later epoch's job supersedes a pending one; the last
    # epoch's is always converted
    assert summary["outcomes"][-1]["tag"].startswith("epoch=1-")
    for outcome in summary["outcomes"]:
        assert set(outcome["targets"]) == {"onnx", "coreml"}
        for target in outcome["targets"].values():
            assert Path(target["path"]).exists()
    _final_matches_the_trained_model(tmp_path / "run")


def test_a_keras_training_script_on_the_zoos_model_converts_every_epoch(tmp_path: Path) -> None:
    built = build_zoo(tmp_path, "keras_small_cnn_op11")
    out = tmp_path / "run"
    summary = _train("train_keras.py", built / "keras" / "keras_small_cnn_op11" / "model.keras", out,
                     cwd=tmp_path)
    assert summary["outcomes"][-1]["tag"].startswith("epoch=1-")
    for outcome in summary["outcomes"]:
        target = outcome["targets"]["onnx"]
        assert target["passed"] and Path(target["path"]).exists()
    _final_matches_the_trained_model(out)


# --------------------------------------------------------------------------- 3. the zoo ---------
def _done(out: Path) -> int:
    path = journal_path(out)
    return len(read_journal(path).done) if path.exists() else 0


def _all_ok(out: Path, built: Path, models: int) -> dict:
    report = json.loads((out / "report.json").read_text())
    failed = [(r["id"], r["reason"]) for r in report["rows"] if r["status"] != "ok"]
    assert not failed, failed
    assert report["totals"]["ok"] == models
    for row in report["rows"]:
        # every built model has its framework's outputs beside it: the "vs framework" column
        assert row["inputs"] == "saved" and row["framework_parity"] is not None, row
        assert row["framework_parity"]["status"] == "passed", row
        written = out / row["output"]
        opsets = {o.domain: o.version for o in onnx.load(str(written), load_external_data=False).opset_import}
        assert opsets.get("", opsets.get("ai.onnx")) == OPSET, opsets
        onnx_matches_saved_outputs(written, (built / row["id"]).parent)
    return report


def test_zoo_build_then_upgrade_killed_resumed_and_on_dask(tmp_path: Path) -> None:
    built = build_zoo(tmp_path)
    models = len(list(built.rglob("model.onnx")))
    assert models >= 20

    out = tmp_path / "upgraded"
    cmd = [str(UNFRAME), "zoo", "upgrade", str(built), "--opset", str(OPSET), "-o", str(out), "-j", "2",
           "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    while _done(out) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the run and its workers, at once
    proc.wait()
    assert 3 <= _done(out) < models, "the run was not killed mid-way"
    assert not (out / "report.json").exists()

    ok(unframe("zoo", "upgrade", built, "--opset", OPSET, "-o", out, "-j", "2", "--resume", "--no-progress",
               cwd=tmp_path))
    _all_ok(out, built, models)

    on_dask = tmp_path / "dask"
    ok(unframe("zoo", "upgrade", built, "--opset", OPSET, "-o", on_dask, "-j", "2", "--executor", "dask",
               "--no-progress", cwd=tmp_path))
    report = _all_ok(on_dask, built, models)
    assert "dask" in json.dumps(report["executor"]).lower()
