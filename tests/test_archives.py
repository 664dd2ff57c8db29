"""Archives and model folders (unframe/archives.py) are checked before any library opens them,
and the native readers that can crash (HDF5, TFLite, coremltools' package reader) open a
foreign file in a child process first."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from spine_utils import snapshot

import unframe
from unframe import archives, limits
from unframe.cli.main import cli
from unframe.errors import InputError, ResourceLimitError


def _zip(path: Path, entries: list[tuple[str, bytes]], *, link: str | None = None) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            zf.writestr(name, data)
        if link is not None:  # a symbolic-link entry, as `zip --symlinks` writes one
            info = zipfile.ZipInfo(link)
            info.external_attr = (0o120777 << 16)
            zf.writestr(info, "/etc/passwd")
    return path


@pytest.mark.parametrize(("entries", "link", "words"), [
    ([("../evil.py", b"x")], None, "'../evil.py' points outside the archive"),
    ([("/etc/cron.d/x", b"x")], None, "points outside the archive"),
    ([("a/../../x", b"x")], None, "points outside the archive"),
    ([("config.json", b"{}"), ("config.json", b"{}")], None, "two entries named 'config.json'"),
    ([("config.json", b"{}")], "weights", "entry 'weights' is a link"),
])
def test_zip_entries_must_stay_inside_once(tmp_path: Path, entries, link, words):
    with pytest.warns(UserWarning) if len({n for n, _ in entries}) < len(entries) else _nothing():
        path = _zip(tmp_path / "m.zip", entries, link=link)
    with pytest.raises(InputError, match=words.replace("(", r"\(").replace(")", r"\)")):
        archives.check_zip(path)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_zip_bomb_ratio_and_total_size(tmp_path: Path):
    zeros = bytes(8 << 20)  # 8 MiB of zeros deflate to ~8 KiB
    bomb = _zip(tmp_path / "bomb.zip", [("w.bin", zeros)])
    info = zipfile.ZipFile(bomb).infolist()[0]
    assert info.file_size > archives.MAX_RATIO * info.compress_size  # the premise of the test
    with pytest.raises(ResourceLimitError, match="inflates .* times .*a zip bomb"):
        archives.check_zip(bomb)
    noisy = np.random.default_rng(0).integers(0, 256, 4 << 20, dtype=np.uint8).tobytes()
    plain = _zip(tmp_path / "plain.zip", [("w.bin", noisy)])
    archives.check_zip(plain)  # weights don't compress: fine
    with limits.memory_budget(1 << 20), pytest.raises(ResourceLimitError, match="inflated would take 4.0 MiB"):
        archives.check_zip(plain)


def test_folder_links_hard_links_and_special_files(tmp_path: Path):
    outside = tmp_path / "secret.bin"
    outside.write_bytes(b"secret")
    pkg = tmp_path / "m.mlpackage"
    (pkg / "Data").mkdir(parents=True)
    (pkg / "Data" / "a.bin").write_bytes(b"a")
    os.symlink(pkg / "Data" / "a.bin", pkg / "Data" / "inside-link.bin")
    archives.check_folder(pkg)  # a link that stays inside is fine
    os.symlink(outside, pkg / "Data" / "out.bin")
    with pytest.raises(InputError, match="Data/out.bin in the model folder links outside it"):
        archives.check_folder(pkg)
    (pkg / "Data" / "out.bin").unlink()
    os.link(outside, pkg / "Data" / "hard.bin")
    with pytest.raises(InputError, match="hard.bin in the model folder has 2 hard links"):
        archives.check_folder(pkg)
    (pkg / "Data" / "hard.bin").unlink()
    os.mkfifo(pkg / "Data" / "pipe")
    with pytest.raises(InputError, match="pipe in the model folder is not a regular file"):
        archives.check_folder(pkg)


# -------------------------------------------------------------------------- the loaders ----------
def test_torch_archive_with_an_escaping_entry(tmp_path: Path):
    from unframe.converters.frontends._torch.sources import detect_kind

    path = _zip(tmp_path / "m.pt2", [("m/archive_format", b"pt2"), ("m/../../evil", b"x")])
    with pytest.raises(InputError, match="torch archive entry 'm/../../evil' points outside"):
        detect_kind(path)


def test_keras_archive_checked_before_keras_opens_it(tmp_path: Path):
    src = _zip(tmp_path / "m.keras", [("config.json", b"{}"), ("model.weights.h5", bytes(16 << 20))])
    out = tmp_path / "out"
    out.mkdir()
    before = snapshot(tmp_path)
    result = CliRunner().invoke(cli, ["convert", str(src), "-o", str(out / "m.onnx")])
    assert result.exit_code == 3, result.output
    assert "a zip bomb?" in result.stderr and "Traceback" not in result.output
    assert snapshot(tmp_path) == before


def test_hdf5_external_link_is_refused_in_the_child(tmp_path: Path):
    h5py = pytest.importorskip("h5py", reason="needs h5py (the 'tf' extra)")
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["w"] = np.arange(4.0)
    with h5py.File(tmp_path / "m.h5", "w") as f:
        f.attrs["model_config"] = "{}"
        f["weights"] = h5py.ExternalLink(str(tmp_path / "other.h5"), "/w")
    with pytest.raises(InputError, match="links to another file"):
        unframe.load(tmp_path / "m.h5", from_="tf")


def test_foreign_core_ml_package_with_broken_weights(tmp_path: Path):
    """The weights of a package unframe wrote, truncated: the MIL evaluator says so (coremltools
    reads the blob in a child first)."""
    pytest.importorskip("coremltools", reason="needs coremltools (the 'coreml' extra)")
    from spine_utils import mlp_model

    from unframe.converters.backends.coreml.mil_eval import MILRunner

    pkg = tmp_path / "m.mlpackage"
    unframe.convert(mlp_model(batch=1), to="coreml", output=pkg, precision="fp32")
    blobs = list(pkg.rglob("weight.bin"))
    assert blobs, "the package keeps its weights in a blob file"
    blobs[0].write_bytes(blobs[0].read_bytes()[:100])
    with pytest.raises(InputError, match="m.mlpackage"):
        MILRunner(pkg)


def test_model_folder_with_a_link_out_is_refused_by_inspect(tmp_path: Path):
    pkg = tmp_path / "m.mlpackage"
    pkg.mkdir()
    (pkg / "Manifest.json").write_text("{}")
    os.symlink("/etc/passwd", pkg / "model.mlmodel")
    result = CliRunner().invoke(cli, ["inspect", str(pkg)])
    assert result.exit_code == 3 and "links outside it" in result.stderr, result.output

