"""Which models a batch works on: the entries of a ``manifest.toml`` or every model file found
under a folder.

A manifest looks like ``model_zoo/manifest.toml``::

    root = "built"                 # model paths are relative to this (relative to the manifest)
    [[model]]
    name = "resnet_tiny_op9"
    path = "torch/resnet_tiny_op9/model.onnx"
    framework = "torch"            # the framework that built it (informational for upgrades)
    builder = "torch_models.py:resnet_tiny"   # build/ script and function (for `zoo build`)
    opset = 9
    heavy = true                   # optional: `zoo build` skips it unless --heavy or --only names it

Each entry's output mirrors its path relative to the root under OUT_DIR.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from unframe.errors import InputError, UsageError

ONNX_SUFFIXES = (".onnx",)


@dataclass(frozen=True)
class ZooEntry:
    """One model of a batch. ``rel`` is its path under the source root, mirrored under OUT_DIR."""

    name: str
    path: Path
    rel: Path
    framework: str = "onnx"
    builder: str = ""
    opset: int | None = None
    about: str = ""
    heavy: bool = False

    @property
    def id(self) -> str:
        return self.rel.as_posix()


@dataclass
class ZooSource:
    """The models of a batch and the folder they live under (never written to)."""

    root: Path
    entries: list[ZooEntry] = field(default_factory=list)
    manifest: Path | None = None

    def describe(self) -> str:
        return str(self.manifest) if self.manifest else str(self.root)


def read_manifest(path: Path) -> ZooSource:
    """Parse a manifest; every entry's file is resolved (missing files are kept: the batch
    records them as failed and goes on)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError(f"{path}: no such manifest", "check the path") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a valid TOML manifest ({exc})", "fix the manifest syntax") from exc
    root = _root(path, data.get("root", "."))
    models = data.get("model", [])
    if not isinstance(models, list) or not models:
        raise InputError(f"{path}: no [[model]] entries", "add at least one [[model]] table with a path")
    entries = [_entry(path, root, i, m) for i, m in enumerate(models)]
    _check_unique(path, entries)
    return ZooSource(root=root, entries=entries, manifest=path.resolve())


def _root(manifest: Path, raw: Any) -> Path:
    if not isinstance(raw, str) or "\0" in raw:
        raise InputError(f"{manifest}: root must be a folder path, not {raw!r}", 'write root = "folder"')
    try:
        return (manifest.parent / raw).resolve()
    except (OSError, RuntimeError) as exc:  # a link loop, a name too long
        raise InputError(f"{manifest}: root {raw!r} can't be resolved ({exc})", "fix the root folder") from None


def _text(manifest: Path, index: int, key: str, raw: Any) -> str:
    if raw is None:
        return ""
    if not isinstance(raw, str) or "\0" in raw:
        raise InputError(f"{manifest}: model entry {index + 1} has a {key} that is not text ({raw!r})",
                         f'write {key} = "..."')
    return raw


def _flag(manifest: Path, index: int, key: str, raw: Any) -> bool:
    if not isinstance(raw, bool):
        raise InputError(f"{manifest}: model entry {index + 1} has a {key} that is not true or false "
                         f"({raw!r})", f"write {key} = true")
    return raw


def _opset(manifest: Path, index: int, raw: Any) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, str) and raw.strip().isdigit():
        raw = int(raw)
    if not isinstance(raw, int) or isinstance(raw, bool) or not 0 < raw < 1000:
        raise InputError(f"{manifest}: model entry {index + 1} has opset {raw!r}, not an opset number",
                         "write opset = 17")
    return raw


def _entry(manifest: Path, root: Path, index: int, raw: Any) -> ZooEntry:
    if not isinstance(raw, dict):
        raise InputError(f"{manifest}: model entry {index + 1} is not a table", "write it as [[model]]")
    name = _text(manifest, index, "name", raw.get("name"))
    framework = _text(manifest, index, "framework", raw.get("framework")) or "onnx"
    rel_text = _text(manifest, index, "path", raw.get("path")) or (f"{framework}/{name}/model.onnx" if name else "")
    if not rel_text:
        raise InputError(f"{manifest}: model entry {index + 1} has neither path nor name", "give it a path")
    rel = Path(str(rel_text))
    if rel.is_absolute() or ".." in rel.parts:
        raise InputError(f"{manifest}: model {name or index + 1} path {rel} leaves the root folder",
                         "use a path relative to the manifest root")
    return ZooEntry(name=name or rel.parent.name or rel.stem, path=root / rel, rel=rel, framework=framework,
                    builder=_text(manifest, index, "builder", raw.get("builder")),
                    opset=_opset(manifest, index, raw.get("opset")),
                    about=_text(manifest, index, "about", raw.get("about")),
                    heavy=_flag(manifest, index, "heavy", raw.get("heavy", False)))


def _check_unique(manifest: Path, entries: list[ZooEntry]) -> None:
    seen: set[str] = set()
    for e in entries:
        if e.id in seen:
            raise InputError(f"{manifest}: two entries point at {e.id}", "give each model its own path")
        seen.add(e.id)


def discover(folder: Path, suffixes: tuple[str, ...] = ONNX_SUFFIXES, *,
             exclude: tuple[Path, ...] = ()) -> ZooSource:
    """Every model file (by suffix) under ``folder``, sorted; hidden folders are skipped.
    Directory-shaped models (e.g. ``.mlpackage``, SavedModel) match by folder suffix."""
    root = folder.resolve()
    skip = tuple(p.resolve() for p in exclude)
    found: list[ZooEntry] = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or _inside_any(path, skip):
            continue
        if path.suffix.lower() in suffixes and (path.is_file() or path.is_dir()):
            if any(parent.suffix.lower() in suffixes for parent in rel.parents if str(parent) != "."):
                continue  # a file inside a directory-shaped model
            found.append(ZooEntry(name=rel.with_suffix("").as_posix(), path=path, rel=rel))
    return ZooSource(root=root, entries=found)


def _inside_any(path: Path, folders: tuple[Path, ...]) -> bool:
    return any(path == f or f in path.parents for f in folders)


def load_source(src: Path, suffixes: tuple[str, ...] = ONNX_SUFFIXES) -> ZooSource:
    """A manifest (``.toml``) or a folder to discover."""
    if not src.exists():
        raise InputError(f"{src}: no such folder or manifest", "pass a model folder or a manifest.toml")
    if src.is_file():
        if src.suffix.lower() != ".toml":
            raise UsageError(f"{src} is neither a folder nor a .toml manifest",
                             "pass a folder of models or a manifest.toml")
        source = read_manifest(src)
        if suffixes != ONNX_SUFFIXES:
            source.entries = [_native_sibling(e, suffixes) for e in source.entries]
        return source
    return discover(src, suffixes)


def _native_sibling(entry: ZooEntry, suffixes: tuple[str, ...]) -> ZooEntry:
    """With ``--from``, a manifest entry's native file beside its ONNX file (e.g. model.keras)."""
    for suffix in suffixes:
        candidate = entry.path.with_suffix(suffix)
        if candidate.exists():
            return dataclasses.replace(entry, path=candidate, rel=entry.rel.with_suffix(suffix))
    return dataclasses.replace(entry, path=entry.path.with_suffix(suffixes[0]),
                               rel=entry.rel.with_suffix(suffixes[0]))


def check_out_dir(source: ZooSource, out_dir: Path) -> Path:
    """Refuse an output folder inside (or equal to) the source tree: outputs must never land
    among the inputs, nor be discovered as inputs by a later run."""
    out = out_dir.resolve()
    root = source.root.resolve()
    if out == root or root in out.parents:
        raise UsageError(f"output folder {out_dir} is inside the source folder {source.root}",
                         "choose an OUT_DIR outside the models' folder; unframe never writes into the source tree")
    if out.exists() and not out.is_dir():
        raise UsageError(f"output {out_dir} exists and is not a folder", "choose another OUT_DIR")
    return out
