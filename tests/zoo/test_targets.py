"""`zoo upgrade --to onnx,tensorrt`: several targets per model through the same pipeline as
`unframe convert`, a folder per model, one provenance format, and --json."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner

from tests.zoo.conftest import clip_op10, relu_add_op9
from unframe.cli.main import cli
from unframe.converters.registry import BACKENDS

pytestmark = pytest.mark.skipif(not BACKENDS.get("tensorrt").available(),
                                reason="needs tensorrt-rtx (the tensorrt extra) to build engines")


def test_zoo_to_several_targets_writes_a_folder_per_model(tmp_path: Path) -> None:
    src = tmp_path / "src"
    relu_add_op9(src / "relu.onnx")
    clip_op10(src / "sub" / "clip.onnx")
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["zoo", "upgrade", str(src), "--opset", "17", "-o", str(out),
                                   "--to", "onnx,tensorrt", "--json", "--timeout", "300"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert {r["id"]: r["status"] for r in report["rows"]} == {"relu.onnx": "ok", "sub/clip.onnx": "ok"}
    assert report["to"] == "onnx,tensorrt"
    for rel, stem in (("relu", "relu"), ("sub/clip", "clip")):
        folder = out / rel
        assert sorted(p.name for p in folder.iterdir()) == [f"{stem}.engine", f"{stem}.engine.json",
                                                            f"{stem}.onnx"]
        model = onnx.load(folder / f"{stem}.onnx")
        assert {o.domain: o.version for o in model.opset_import}[""] == 17
        props = {p.key: p.value for p in model.metadata_props}
        sidecar = json.loads((folder / f"{stem}.engine.json").read_text())["provenance"]
        source = src / f"{rel}.onnx"
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        # one provenance format for both artifacts, the same as `unframe convert` writes
        assert props["unframe.source_sha256"] == sidecar["source_sha256"] == digest
        assert set(sidecar) == {k.removeprefix("unframe.") for k in props if k.startswith("unframe.")}
        x = np.random.default_rng(0).standard_normal((3, 4 if stem == "relu" else 5)).astype(np.float32)
        a = ort.InferenceSession(str(source)).run(None, {"x": x})[0]
        b = ort.InferenceSession(str(folder / f"{stem}.onnx")).run(None, {"x": x})[0]
        np.testing.assert_allclose(a, b, rtol=1e-6)
        assert np.abs(a).max() > 0.1
