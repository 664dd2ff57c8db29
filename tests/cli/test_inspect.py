"""``unframe inspect`` on every artifact kind, with real artifacts: an ONNX file, a CoreML package
made by unframe, a NeuralNetwork .mlmodel made with coremltools, a TensorRT engine and its sidecar."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import onnx
import pytest
from click.testing import CliRunner
from spine_utils import mlp_model

import unframe
from unframe.cli.inspect import provenance_from_metadata
from unframe.cli.main import cli


def _inspect_json(path: Path) -> dict[str, Any]:
    res = CliRunner().invoke(cli, ["inspect", str(path), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _inspect_text(path: Path) -> str:
    res = CliRunner().invoke(cli, ["inspect", str(path)])
    assert res.exit_code == 0, res.output
    return res.stdout


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def mlp_onnx(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), path)
    return path


# ------------------------------------------------------------------------------- provenance --
def test_provenance_from_metadata_reads_prefixed_and_bare_keys():
    prov = provenance_from_metadata({
        "unframe.source_sha256": "ab12", "route": '["load", "backend"]',
        "parity": '{"passed": false, "stages": []}', "unframe.io": '{"inputs": []}',
        "com.github.apple.coremltools.version": "9.0", "author_note": "[kept as text"})
    assert prov == {"source_sha256": "ab12", "route": ["load", "backend"],
                    "parity": {"passed": False, "stages": []}, "io": {"inputs": []}}
    # a prefixed key wins over the bare one; hex digests stay text even when all digits
    assert provenance_from_metadata({"unframe.source": "a", "source": "b", "unframe.version": "1234"}) \
        == {"source": "a", "version": "1234"}
    # someone else's bare "version"/"source" is not unframe's provenance
    assert provenance_from_metadata({"version": "3", "source": "camera"}) == {}


# ------------------------------------------------------------------------------------- onnx --
def test_onnx_has_the_common_keys(mlp_onnx: Path, tmp_path: Path):
    out = tmp_path / "out.onnx"
    unframe.convert(mlp_onnx, to="onnx", output=out)
    info = _inspect_json(out)
    assert info["kind"] == "onnx" and info["file_bytes"] == out.stat().st_size
    assert info["outputs"] == [{"name": "y", "shape": ["N", 3], "dtype": "float"}]
    assert info["provenance"]["source_sha256"] == _sha256(mlp_onnx)
    assert info["parity"] == info["provenance"]["parity"] and info["parity"]["passed"] is True


# ----------------------------------------------------------------------------------- coreml --
def test_mlpackage_made_by_unframe(mlp_onnx: Path, tmp_path: Path):
    pytest.importorskip("coremltools", reason="needs coremltools (the 'coreml' extra)")
    out = tmp_path / "m.mlpackage"
    unframe.convert(mlp_onnx, to="coreml", output=out)
    info = _inspect_json(out)
    assert info["kind"] == "mlpackage"
    assert info["file_bytes"] == sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    assert info["model_type"] == "mlProgram" and info["spec_version"] >= 7
    assert info["deployment_target"].startswith("iOS")
    [x] = info["inputs"]
    assert x["name"] == "x" and x["dtype"] == "float"
    assert len(x["shape"]) == 2 and x["shape"][1] == 4  # batch is flexible: "1..N" or an int
    assert [o["name"] for o in info["outputs"]] == ["y"] and info["outputs"][0]["dtype"] == "float"
    assert info["ops"].get("softmax") == 1 and info["ops"].get("relu") == 1
    assert info["provenance"]["source_sha256"] == _sha256(mlp_onnx)
    assert isinstance(info["provenance"]["route"], list)  # JSON-valued entries are decoded
    assert info["parity"]["passed"] is True
    assert [s["stage"] for s in info["parity"]["stages"]][-1] == "backend"
    assert not any(k.startswith("unframe.") or k == "source_sha256" for k in info["metadata"])
    text = _inspect_text(out)
    assert "provenance" in text and " x " in text and "mlProgram" in text and "softmax" in text


def _image_classifier(path: Path) -> None:
    """A NeuralNetwork classifier on an RGB image, written as .mlmodel with coremltools."""
    import numpy as np

    from unframe.converters.backends.coreml.mil_eval._ct import import_coremltools

    ct = import_coremltools()
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    b = NeuralNetworkBuilder([("image", datatypes.Array(3, 8, 8))], [("probs", datatypes.Array(2))],
                             mode="classifier")
    b.add_pooling("pool", 8, 8, 8, 8, "AVERAGE", "VALID", "image", "pooled", is_global=True)
    b.add_flatten("flat", 0, "pooled", "flat")
    b.add_inner_product("fc", W=np.ones((2, 3), np.float32), b=None, input_channels=3, output_channels=2,
                        has_bias=False, input_name="flat", output_name="logits")
    b.add_softmax("softmax", "logits", "probs")
    b.set_pre_processing_parameters(image_input_names=["image"], image_format="NCHW")
    b.set_class_labels(["cat", "dog"], predicted_feature_name="label", prediction_blob="probs")
    b.spec.description.metadata.author = "lab [cats]"
    b.spec.description.metadata.userDefined["dataset"] = "pets [v2]"
    ct.utils.save_spec(b.spec, str(path))


def test_mlmodel_image_classifier(tmp_path: Path):
    pytest.importorskip("coremltools", reason="needs coremltools (the 'coreml' extra)")
    path = tmp_path / "pets.mlmodel"
    _image_classifier(path)
    info = _inspect_json(path)
    assert info["kind"] == "mlmodel" and info["file_bytes"] == path.stat().st_size
    assert info["model_type"] == "neuralNetworkClassifier"
    assert [(i["name"], i["shape"], i["dtype"]) for i in info["inputs"]] == [("image", [1, 3, 8, 8], "image RGB")]
    assert {o["name"]: o["dtype"] for o in info["outputs"]} == {"probs": "dict string -> double",
                                                                "label": "string"}
    assert info["class_labels"] == ["cat", "dog"] and info["predicted_feature"] == "label"
    assert info["ops"] == {"flatten": 1, "innerProduct": 1, "pooling": 1, "softmax": 1}
    assert info["metadata"] == {"dataset": "pets [v2]"}
    assert info["provenance"] == {} and info["parity"] is None
    text = _inspect_text(path)
    # square brackets in user text are printed, not swallowed as rich markup
    assert "lab [cats]" in text and "pets [v2]" in text and "cat, dog" in text


# ----------------------------------------------------------------------------------- engine --
def test_engine_and_sidecar(mlp_onnx: Path, tmp_path: Path):
    from unframe.converters.backends.tensorrt import trtmodule

    trt = trtmodule.load_or_none()
    if trt is None:
        pytest.skip("tensorrt-rtx is not installed")
    engine = tmp_path / "m.engine"
    unframe.convert(mlp_onnx, to="tensorrt", output=engine)
    sidecar = tmp_path / "m.engine.json"
    assert sidecar.is_file()

    info = _inspect_json(engine)
    assert info["kind"] == "engine" and info["file_bytes"] == engine.stat().st_size > 0
    assert info["engine_sha256"] == _sha256(engine) and info["sha256_match"] is True
    assert info["sidecar_status"] == "ok"
    assert info["flavour"] == trt.__name__ and info["tensorrt_version"] == str(trt.__version__)
    assert info["precision"] == "fp32" and info["gpu"]
    assert [list(p) for p in info["profiles"]] == [["x"]]
    assert [i["name"] for i in info["inputs"]] == ["x"] and [o["name"] for o in info["outputs"]] == ["y"]
    assert info["inputs"][0]["dtype"] == "float" and info["inputs"][0]["shape"][1] == 4
    assert info["provenance"]["source_sha256"] == _sha256(mlp_onnx)
    assert isinstance(info["parity"], dict) and info["parity"]["stages"][-1]["stage"] == "backend"
    text = _inspect_text(engine)
    assert "matches the sidecar" in text and "provenance" in text and trt.__name__ in text

    # inspecting an engine never imports TensorRT (nor any other framework)
    probe = ("import sys\nfrom unframe.cli.inspect import describe\n"
             f"describe({str(engine)!r})\n"
             "print([m for m in ('tensorrt', 'tensorrt_rtx', 'coremltools', 'torch') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

    # different bytes: reported as a mismatch, not a crash
    engine.write_bytes(b"\0" * engine.stat().st_size)
    info = _inspect_json(engine)
    assert info["sha256_match"] is False and info["engine_sha256"] == _sha256(engine)
    assert info["sidecar_engine_sha256"] != info["engine_sha256"]
    assert "does NOT match" in _inspect_text(engine)

    # no sidecar: the size, and a note
    sidecar.unlink()
    info = _inspect_json(engine)
    assert info["sidecar_status"] == "missing" and info["file_bytes"] == engine.stat().st_size
    assert info["sha256_match"] is None and info["provenance"] == {} and info["inputs"] == []
    assert "missing" in _inspect_text(engine)


# ------------------------------------------------------------------------------ other kinds --
@pytest.mark.parametrize("name", ["x.txt", "folder", "gone.mlpackage"])
def test_unknown_or_missing_is_a_one_line_input_error(tmp_path: Path, name: str):
    if name == "x.txt":
        (tmp_path / name).write_text("hello")
    elif name == "folder":
        (tmp_path / name).mkdir()
    res = CliRunner().invoke(cli, ["inspect", str(tmp_path / name)])
    assert res.exit_code == 3
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and name in lines[0]
    if name != "gone.mlpackage":
        assert ".mlpackage" in lines[0] and ".engine" in lines[0]
