"""Saving: an output is written in a staging folder beside the destination and renamed into place;
an existing one is replaced only with ``force``, an input never. Weights past the threshold go to
external data (``external.py``), and a model whose external data changed since it was loaded is
refused rather than written with other weights.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import onnx
import onnx_ir as ir

from unframe.errors import OutputExistsError, UsageError
from unframe.io import external
from unframe.io.load import check_external_files_unchanged


def check_output_path(path: Path, *, force: bool, inputs: tuple[Path, ...] = ()) -> None:
    """Refuse before any work: a missing output folder, an existing output without force, or an
    output that would overwrite an input."""
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        raise UsageError(f"output folder {parent} does not exist", "create it first")
    if not parent.is_dir():
        raise UsageError(f"output folder {parent} is not a folder", "choose another output path")
    resolved = path.resolve()
    for src in inputs:
        if src is not None and src.exists() and src.resolve() == resolved:
            raise UsageError(f"output {path} is the input file", "unframe never overwrites an input; choose another path")
    if path.exists() and not force:
        raise OutputExistsError(f"output {path} already exists", "pass --force to replace it")


@contextmanager
def staging_dir(dest: Path) -> Iterator[Path]:
    """A fresh folder beside ``dest`` (same filesystem, so renames are atomic); removed on exit."""
    parent = dest.parent if str(dest.parent) else Path(".")
    tmp = Path(tempfile.mkdtemp(prefix=".unframe-tmp-", dir=parent))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def place(staged: list[Path], dest_dir: Path, *, force: bool, protect: tuple[Path, ...] = ()) -> list[Path]:
    """Move staged files/folders into ``dest_dir`` by rename. Existing entries are replaced only
    with ``force`` (the old one is moved aside first, then removed), and never an input."""
    placed = []
    protected = {p.resolve() for p in protect if p is not None}
    for item in staged:
        final = dest_dir / item.name
        if final.resolve() in protected:
            raise UsageError(f"writing {final} would overwrite an input", "choose another output path")
        if final.exists() or final.is_symlink():
            if not force:
                raise OutputExistsError(f"output {final} already exists", "pass --force to replace it")
            aside = dest_dir / f".unframe-old-{uuid.uuid4().hex[:8]}-{item.name}"
            os.replace(final, aside)
            os.replace(item, final)
            _remove(aside)
        else:
            os.replace(item, final)
        placed.append(final)
    return placed


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def write_onnx(model: ir.Model, path: Path, *, external_data: bool | None = None,
               final_dir: Path | None = None) -> list[Path]:
    """Write ``model`` at ``path`` (in a staging folder); weights go to ``<name>.data`` beside it
    when asked, by default when the model came with external data (its layout is kept) or is above
    the protobuf size limit. Lazy external tensors are streamed from their files, never all in
    memory. ``final_dir``: the folder the output is placed in; when every large weight is an
    unchanged external tensor whose file is already there (an opset conversion written beside
    its source), the output references those files as they are instead of copying them (see
    ``shared_external_files``)."""
    has_ext = external.has_external_tensors(model)
    if external_data is None:
        external_data = external.needs_external_data(model)
    check_external_files_unchanged(model)
    if external_data and final_dir is not None and shared_external_files(model, final_dir):
        ir.save(model, path)  # external tensors keep their location, offset and length
        check_external_files_unchanged(model)
        return [path]
    if external_data:
        data_name = f"{path.name}.data"
        ir.save(model, path, external_data=data_name, size_threshold_bytes=external.EXTERNAL_TENSOR_MIN_BYTES)
        check_external_files_unchanged(model)  # read while writing: the staged copy is dropped
        return [path, path.parent / data_name]
    if has_ext:
        # Small enough to inline: read the weights into the protobuf.
        proto = ir.to_proto(model)
        from onnx.external_data_helper import load_external_data_for_model

        base = _base_dir(model)
        if base:
            load_external_data_for_model(proto, base)
        check_external_files_unchanged(model)  # read just now: the staged copy is dropped
        onnx.save(proto, path)
    else:
        ir.save(model, path)
    return [path]


def shared_external_files(model: ir.Model, final_dir: Path) -> list[str]:
    """The external data files (locations) an output placed in ``final_dir`` can share with its
    source instead of copying them: only when every initializer (subgraphs included) above the
    inline size is an external tensor of a file in that folder, by a plain relative location.
    Then the data is read by nothing and written by nothing (a 4.7 GB file is not copied at disk
    speed); the output depends on the file as the source does, which the result's notes say.
    [] when anything else is needed (new or changed large tensors, files in another folder)."""
    folder = final_dir.resolve()
    locations: set[str] = set()
    for graph in model.graphs():
        for value in graph.initializers.values():
            tensor = value.const_value
            if isinstance(tensor, ir.ExternalTensor):
                location = Path(tensor.location)
                if (tensor.base_dir is None or Path(tensor.base_dir).resolve() != folder
                        or location.is_absolute() or ".." in location.parts):
                    return []
                locations.add(tensor.location)
            elif tensor is not None and tensor.nbytes > external.EXTERNAL_TENSOR_MIN_BYTES:
                return []
    return sorted(locations)


def _base_dir(model: ir.Model) -> str | None:
    for v in model.graph.initializers.values():
        if isinstance(v.const_value, ir.ExternalTensor):
            return os.fspath(v.const_value.base_dir)
    return None


def save_model(model: ir.Model, path: str | os.PathLike[str], *, force: bool = False,
               external_data: bool | None = None) -> list[Path]:
    """Atomically save an ONNX model. Public as ``unframe.save``."""
    dest = Path(path)
    check_output_path(dest, force=force)
    with staging_dir(dest) as tmp:
        written = write_onnx(model, tmp / dest.name, external_data=external_data,
                             final_dir=dest.parent if str(dest.parent) else Path("."))
        return place(written, dest.parent if str(dest.parent) else Path("."), force=force)
