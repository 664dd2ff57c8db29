"""A batch over a small generated zoo: upgrades, a corrupt file, an impossible downgrade, the
report files, and the guarantees about the source tree and OUT_DIR."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.zoo.conftest import EXPECTED, TARGET, tree_digest
from unframe.errors import InputError, OutputExistsError, UsageError
from unframe.zoo.runner import UpgradeOptions, upgrade_zoo


def _run(src: Path, out: Path, **kw: object) -> dict:
    opts = UpgradeOptions(opset=TARGET, out_dir=out, progress=False, timeout=120, **kw)  # type: ignore[arg-type]
    return upgrade_zoo(src, opts).report


def _ort(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _feeds(path: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(123)
    model = onnx.load(str(path))
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value if d.HasField("dim_value") else 3 for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def test_batch_upgrades_refuses_and_fails_per_model(small_zoo: Path, tmp_path: Path) -> None:
    before = tree_digest(small_zoo)
    out = tmp_path / "out"
    page = tmp_path / "out" / "report.html"
    report = _run(small_zoo, out, workers=2, report=page)

    statuses = {r["id"]: r["status"] for r in report["rows"]}
    assert statuses == EXPECTED
    assert [r["id"] for r in report["rows"]] == sorted(EXPECTED)  # source order, not finish order
    rows = {r["id"]: r for r in report["rows"]}
    assert "corrupt.onnx" in rows["corrupt.onnx"]["reason"]
    assert "BitwiseAnd" in rows["new/bitwise_op18.onnx"]["reason"]
    assert any(b["op"] == "BitwiseAnd" for b in rows["new/bitwise_op18.onnx"]["blockers"])
    assert rows["cnn/relu_op9.onnx"]["inputs"] == "saved"
    assert rows["nlp/split_op11.onnx"]["inputs"] == "generated"
    assert rows["reduce_op12.onnx"]["source_opset"] == 12
    assert report["totals"] == {**report["totals"], "models": 7, "ok": 5, "refused": 1, "failed": 1}

    # Outputs mirror the tree, are at the target opset, and compute what the originals compute.
    for rel, status in EXPECTED.items():
        dest = out / rel
        assert dest.exists() == (status == "ok"), rel
        if status != "ok":
            continue
        upgraded = onnx.load(str(dest))
        assert {o.domain: o.version for o in upgraded.opset_import}[""] == TARGET
        onnx.checker.check_model(upgraded, full_check=True)
        feeds = _feeds(small_zoo / rel)
        for a, b in zip(_ort(small_zoo / rel, feeds), _ort(dest, feeds), strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
        assert rows[rel]["parity"]["status"] == "passed" and rows[rel]["parity"]["cases"] >= 1

    assert tree_digest(small_zoo) == before  # the source tree is never touched
    saved = json.loads((out / "report.json").read_text())
    assert saved["rows"] == report["rows"]
    html = page.read_text()
    for rel in EXPECTED:
        assert rel in html
    assert "5 ok, 1 refused, 1 failed" in html


def test_markdown_report_and_rerun_needs_resume_or_force(small_zoo: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    md = tmp_path / "report.md"
    _run(small_zoo, out, report=md, workers=2)
    text = md.read_text()
    assert text.count("\n| ") == len(EXPECTED) + 1  # header + one row per model
    assert "| new/bitwise_op18.onnx | 18 | refused |" in text
    with pytest.raises(OutputExistsError):
        _run(small_zoo, out)
    again = _run(small_zoo, out, force=True, workers=2)
    assert {r["id"]: r["status"] for r in again["rows"]} == EXPECTED


def test_out_dir_inside_source_is_refused_before_any_work(small_zoo: Path) -> None:
    before = tree_digest(small_zoo)
    with pytest.raises(UsageError, match="inside the source folder"):
        _run(small_zoo, small_zoo / "upgraded")
    with pytest.raises(UsageError, match="inside the source folder"):
        _run(small_zoo, small_zoo)
    assert not (small_zoo / "upgraded").exists()
    assert tree_digest(small_zoo) == before


def test_manifest_entry_pointing_at_missing_file(small_zoo: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "zoo.toml"
    manifest.write_text(f'root = "{small_zoo.as_posix()}"\n'
                        '[[model]]\nname = "relu"\npath = "cnn/relu_op9.onnx"\n'
                        '[[model]]\nname = "gone"\npath = "missing/model.onnx"\n'
                        '[[model]]\nname = "split"\npath = "nlp/split_op11.onnx"\n')
    report = _run(manifest, tmp_path / "out")
    rows = {r["name"]: r for r in report["rows"]}
    assert [r["name"] for r in report["rows"]] == ["relu", "gone", "split"]
    assert rows["relu"]["status"] == rows["split"]["status"] == "ok"
    assert rows["gone"]["status"] == "failed" and "no such file" in rows["gone"]["reason"]
    assert (tmp_path / "out" / "nlp" / "split_op11.onnx").exists()


def test_manifest_with_nothing_built_is_a_clear_error(tmp_path: Path) -> None:
    manifest = tmp_path / "zoo.toml"
    manifest.write_text('root = "built"\n[[model]]\nname = "a"\npath = "a/model.onnx"\n')
    with pytest.raises(InputError, match="unframe zoo build"):
        _run(manifest, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_bad_opset_is_refused_before_any_work(small_zoo: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--opset 99"):
        upgrade_zoo(small_zoo, UpgradeOptions(opset=99, out_dir=tmp_path / "out", progress=False))
    assert not (tmp_path / "out").exists()


def test_from_another_format_goes_through_the_frontend(tmp_path: Path) -> None:
    pytest.importorskip("skops", reason="needs scikit-learn and skops")
    import skops.io
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 3)).astype(np.float32)
    model = LogisticRegression().fit(x, (x[:, 0] > 0).astype(np.int64))
    src = tmp_path / "src"
    (src / "lin").mkdir(parents=True)
    skops.io.dump(model, src / "lin" / "model.skops")
    np.savez(src / "lin" / "inputs.npz", X=x[:5])
    out = tmp_path / "out"
    report = upgrade_zoo(src, UpgradeOptions(opset=15, out_dir=out, source_format="sklearn", progress=False,
                                             timeout=300)).report
    [row] = report["rows"]
    assert row["status"] == "ok", row["reason"]
    assert row["output"] == "lin/model.onnx"
    onnx_model = onnx.load(str(out / "lin" / "model.onnx"))
    assert {o.domain: o.version for o in onnx_model.opset_import}[""] == 15
    sess = ort.InferenceSession(str(out / "lin" / "model.onnx"), providers=["CPUExecutionProvider"])
    probs = [v for v in sess.run(None, {sess.get_inputs()[0].name: x[:5]}) if v.ndim == 2][0]
    np.testing.assert_allclose(probs, model.predict_proba(x[:5]), rtol=1e-4, atol=1e-5)


def test_debug_shows_each_failed_models_traceback_and_plain_runs_keep_it_out(small_zoo: Path,
                                                                             tmp_path: Path) -> None:
    import subprocess
    import sys

    def upgrade(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "unframe.cli.main", "zoo", "upgrade", str(small_zoo),
                               "--opset", str(TARGET), "-o", str(out), "--no-progress", *extra],
                              capture_output=True, text=True, timeout=300)

    plain = upgrade(tmp_path / "plain")
    assert plain.returncode == 9  # the corrupt model fails
    assert "Traceback" not in plain.stderr
    assert all("traceback" not in r for r in json.loads((tmp_path / "plain" / "report.json").read_text())["rows"])
    shown = upgrade(tmp_path / "debug", "--debug")
    assert shown.returncode == 9
    failed = [r["id"] for r in json.loads((tmp_path / "debug" / "report.json").read_text())["rows"]
              if r["status"] == "failed"]
    assert failed
    for model_id in failed:
        assert f"{model_id}:\nTraceback" in shown.stderr, shown.stderr[-3000:]
