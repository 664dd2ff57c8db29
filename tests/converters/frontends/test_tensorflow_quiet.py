"""``unframe convert`` of a Keras model, run as a user runs it (a fresh process): TensorFlow's,
absl's and tf2onnx's log lines never reach stderr, which holds only unframe's own lines;
``--debug`` lets them through."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("tensorflow", reason="needs the tf extra (tensorflow)")
pytest.importorskip("tf2onnx", reason="needs the tf extra (tf2onnx)")

import tf_models  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
OWN_PREFIXES = ("error:", "warning:", "  - ", "  ... and ")  # what unframe itself writes


@pytest.fixture(scope="module")
def cnn_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tf_quiet") / "cnn.keras"
    tf_models.small_cnn(0).save(path)
    return path


def _convert(src: Path, out: Path, *extra: str, tf_level: str | None = None
             ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    if tf_level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = tf_level
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run(
        [sys.executable, "-m", "unframe.cli.main", "convert", str(src), "--to", "onnx",
         "-o", str(out), *extra],
        capture_output=True, text=True, env=env, cwd=out.parent, timeout=300)


def _foreign_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith(OWN_PREFIXES)]


@pytest.mark.parametrize("tf_level", [None, "0"], ids=["default-env", "tf-verbose-env"])
def test_convert_stderr_is_empty(cnn_file: Path, tmp_path: Path, tf_level: str | None) -> None:
    """Without TF_CPP_MIN_LOG_LEVEL, and even with TensorFlow asked to log everything (which
    only the fd 2 capture can hide), a successful conversion writes nothing on stderr."""
    out = tmp_path / "cnn.onnx"
    run = _convert(cnn_file, out, tf_level=tf_level)
    assert run.returncode == 0, run.stderr
    assert run.stderr == "", run.stderr
    assert "parity export: passed" in run.stdout and f"wrote {out}" in run.stdout
    assert out.is_file()


def test_failure_shows_only_the_error_line(cnn_file: Path, tmp_path: Path) -> None:
    """A file Keras fails on after TensorFlow was imported: one unframe line, no TF noise."""
    cut = tmp_path / "cut.keras"
    with zipfile.ZipFile(cnn_file) as src, zipfile.ZipFile(cut, "w") as dst:
        dst.writestr("config.json", src.read("config.json"))  # no weights
        dst.writestr("metadata.json", src.read("metadata.json"))
    run = _convert(cut, tmp_path / "cut.onnx", tf_level="0")
    assert run.returncode == 3, run.stderr
    assert _foreign_lines(run.stderr) == [], run.stderr
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {cut}: not a readable Keras model")


def test_debug_still_converts(cnn_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "cnn.onnx"
    run = _convert(cnn_file, out, "--debug", tf_level="0")
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    assert f"wrote {out}" in run.stdout and out.is_file()
