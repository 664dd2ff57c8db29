"""A third-party package registers a frontend through the ``unframe.frontends`` entry point."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

PLUGIN = Path(__file__).parent / "data" / "plugin_pkg"


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("site")
    src = tmp_path_factory.mktemp("plugin_src") / "plugin_pkg"
    shutil.copytree(PLUGIN, src)  # pip builds in the source folder: keep the repo untouched
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(target), str(src)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"installing the test plugin failed: {proc.stderr[-2000:]}")
    return target


def _run(args: list[str], site: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([sys.executable, "-m", "unframe.cli.main", *args], capture_output=True,
                          text=True, env=env, cwd=cwd)


def test_installed_plugin_frontend_is_discovered_and_converts(plugin_site: Path, tmp_path: Path):
    rng = np.random.default_rng(1)
    w, b = rng.standard_normal((5, 2)).astype(np.float32), rng.standard_normal(2).astype(np.float32)
    np.savez(tmp_path / "lin.npz", W=w, b=b)

    doctor = _run(["doctor", "--json"], plugin_site, tmp_path)
    assert doctor.returncode == 0, doctor.stderr
    names = {f["name"]: f for f in json.loads(doctor.stdout)["frontends"]}
    assert "linear-npz" in names
    assert "entry point" in names["linear-npz"]["origin"]

    proc = _run(["convert", "lin.npz", "--to", "onnx", "-o", "lin.onnx", "--json"], plugin_site, tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["parity"]["passed"] is True
    assert result["parity"]["stages"][0]["stage"] == "export"

    sess = ort.InferenceSession(str(tmp_path / "lin.onnx"))
    x = rng.standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], x @ w + b, rtol=1e-5, atol=1e-5)
    props = {p.key: p.value for p in onnx.load(tmp_path / "lin.onnx").metadata_props}
    assert props["unframe.exporter"] == "unframe-testplugin"


def test_plugin_not_visible_without_install(tmp_path: Path):
    proc = subprocess.run([sys.executable, "-m", "unframe.cli.main", "doctor", "--json"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "linear-npz" not in {f["name"] for f in json.loads(proc.stdout)["frontends"]}
