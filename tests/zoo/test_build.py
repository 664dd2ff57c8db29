"""`zoo build`: the manifest's scripts build real models whose saved framework outputs match what
onnxruntime computes on the built ONNX file; a framework that isn't installed is skipped."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from unframe.errors import UsageError
from unframe.zoo.build import ALREADY, BUILT, SKIPPED, build_zoo, load_builder
from unframe.zoo.manifest import read_manifest

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "model_zoo" / "manifest.toml"


def test_manifest_lists_at_least_20_models_across_frameworks() -> None:
    source = read_manifest(MANIFEST)
    assert len(source.entries) >= 20
    assert {e.framework for e in source.entries} >= {"torch", "keras", "sklearn"}
    assert {e.opset for e in source.entries} >= {9, 10, 11, 12, 13}
    for e in source.entries:  # the scripts import no framework at module level
        assert callable(load_builder(e, ROOT / "model_zoo" / "build")), e.builder


def test_architecture_set_has_40_or_more_buildable_entries() -> None:
    """The public-architecture set has its own manifest (building it takes an hour or more)."""
    source = read_manifest(ROOT / "model_zoo" / "architectures.toml")
    light = [e for e in source.entries if not e.heavy]
    assert len(light) >= 40 and len({e.name for e in source.entries}) == len(source.entries)
    for e in source.entries:
        assert callable(load_builder(e, ROOT / "model_zoo" / "build")), e.builder


def test_heavy_entries_build_only_when_asked(tmp_path: Path) -> None:
    source = read_manifest(ROOT / "model_zoo" / "architectures.toml")
    heavy = [e for e in source.entries if e.heavy]
    assert heavy and len(heavy) < len(source.entries)
    manifest = tmp_path / "manifest.toml"
    shutil.copytree(ROOT / "model_zoo" / "build", tmp_path / "build")
    manifest.write_text('root = "built"\n[[model]]\nname = "m"\nframework = "caffe"\nheavy = true\n'
                        'builder = "torch_models.py:resnet_tiny"\nopset = 9\n')
    [skipped] = build_zoo(manifest)
    assert skipped.status == SKIPPED and "--heavy" in skipped.reason
    for asked in (build_zoo(manifest, heavy=True), build_zoo(manifest, only=("m",))):
        assert "caffe is not installed" in asked[0].reason  # past the heavy gate, to the framework check


def test_build_sklearn_models_and_check_saved_outputs(tmp_path: Path) -> None:
    pytest.importorskip("skl2onnx", reason="needs scikit-learn and skl2onnx")
    names = ("sk_scaler_logreg_op9", "sk_gradient_boosting_op13")
    outcomes = build_zoo(MANIFEST, out_dir=tmp_path, only=names)
    assert [o.status for o in outcomes] == [BUILT, BUILT], [o.reason for o in outcomes]
    for o in outcomes:
        folder = o.path.parent
        with np.load(folder / "inputs.npz") as i, np.load(folder / "outputs.npz") as out:
            feeds, expected = {k: i[k] for k in i.files}, {k: out[k] for k in out.files}
        sess = ort.InferenceSession(str(o.path), providers=["CPUExecutionProvider"])
        assert sess.get_modelmeta() is not None
        got = dict(zip([x.name for x in sess.get_outputs()], sess.run(None, feeds), strict=True))
        assert set(got) == set(expected)
        for k in expected:
            np.testing.assert_allclose(got[k], expected[k], rtol=1e-4, atol=1e-5)
    assert [o.status for o in build_zoo(MANIFEST, out_dir=tmp_path, only=names[:1])] == [ALREADY]
    assert not list(tmp_path.rglob(".unframe-tmp-*"))


def test_missing_framework_is_skipped_and_unknown_names_refused(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.toml"
    shutil.copytree(ROOT / "model_zoo" / "build", tmp_path / "build")
    manifest.write_text('root = "built"\n[[model]]\nname = "m"\nframework = "caffe"\n'
                        'builder = "torch_models.py:resnet_tiny"\nopset = 9\n')
    [outcome] = build_zoo(manifest)
    assert outcome.status == SKIPPED and "caffe is not installed" in outcome.reason
    assert not (tmp_path / "built").exists()
    with pytest.raises(UsageError, match="--only nope"):
        build_zoo(manifest, only=("nope",))
