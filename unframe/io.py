"""ONNX in and out, safely.

* ``load_model`` parses without reading external data (tensors stay lazy), refuses external-data
  locations that escape the model's folder (absolute, ``..``, or through a link), and checks the
  graph (cycles, inputs nothing produces, unknown domains, opsets newer than onnx knows).
* ``save_model`` writes to a temporary folder beside the destination and renames into place;
  an existing output is replaced only with ``force``; tensors over 2 GB go to external data.
* ``provenance`` builds the metadata recorded in every artifact.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir

from unframe.errors import InputError, OutputExistsError, UnsupportedError, UsageError
from unframe.opset import DEFAULT_DOMAINS, ML_DOMAIN, main_opset, newest_opset

# Serialized protobuf can't exceed 2 GiB; keep a margin for the graph itself.
EXTERNAL_DATA_THRESHOLD = 1_800_000_000
# With external data on, tensors smaller than this stay inline (shapes, axes, small biases).
EXTERNAL_TENSOR_MIN_BYTES = 1024
KNOWN_DOMAINS = {*DEFAULT_DOMAINS, ML_DOMAIN, "ai.onnx.preview.training", "com.microsoft",
                 "ai.onnx.training", "com.ms.internal.nhwc", "org.pytorch.aten", "pkg.onnxscript.torch_lib.common"}
PROVENANCE_PREFIX = "unframe."


# ---------------------------------------------------------------------------------- loading --
def check_readable_file(path: Path, what: str = "model") -> None:
    if not path.exists():
        raise InputError(f"{path}: no such file", "check the path")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, expected a {what} file", "pass the file itself")
    if path.stat().st_size == 0:
        raise InputError(f"{path}: the file is empty", "re-export or re-download the model")


def load_proto(path: Path) -> onnx.ModelProto:
    """Parse an ONNX file without its external data."""
    check_readable_file(path)
    try:
        proto = onnx.load(os.fspath(path), load_external_data=False)
    except Exception as exc:
        raise InputError(f"{path}: not a readable ONNX file ({_first_line(exc)})",
                         "the file may be truncated or not ONNX; re-export it") from exc
    if not proto.HasField("graph") or (not proto.graph.node and not proto.graph.output):
        raise InputError(f"{path}: not an ONNX model (no graph found)",
                         "the file may be truncated or not ONNX; re-export it")
    return proto


def load_model(path: str | os.PathLike[str]) -> ir.Model:
    """Load an ONNX file as an ``onnx_ir.Model``; external tensors stay lazy (not read)."""
    path = Path(path)
    proto = load_proto(path)
    check_external_data(proto, path)
    check_graph(proto, str(path))
    try:
        model = ir.serde.deserialize_model(proto)
    except Exception as exc:
        raise InputError(f"{path}: the graph can't be read ({_first_line(exc)})",
                         "re-export the model") from exc
    ir.external_data.set_base_dir(model.graph, path.parent.resolve())
    _LOADED_EXTERNAL_FILES.update(external_files_state(model))
    return model


# (size, mtime_ns) of each external data file when a model reading it was loaded: the write
# checks them, since its lazy tensors are read from these files only then
_LOADED_EXTERNAL_FILES: dict[str, tuple[int, int]] = {}


def external_files_state(model: ir.Model) -> dict[str, tuple[int, int]]:
    """(size, mtime_ns) of every file the model's external tensors are read from."""
    state: dict[str, tuple[int, int]] = {}
    for value in model.graph.initializers.values():
        tensor = value.const_value
        if isinstance(tensor, ir.ExternalTensor):
            file = os.path.join(tensor.base_dir, tensor.location)
            if file not in state and os.path.exists(file):
                stat = os.stat(file)
                state[file] = (stat.st_size, stat.st_mtime_ns)
    return state


def check_external_files_unchanged(model: ir.Model) -> None:
    """Refuse a model whose external data changed since it was loaded: its weights would be
    read half before and half after the change."""
    for file, now in external_files_state(model).items():
        then = _LOADED_EXTERNAL_FILES.get(file)
        if then is not None and then != now:
            raise InputError(f"{file} changed while converting (size or modification time differ "
                             "from when the model was loaded); nothing was written",
                             "convert again once nothing writes to it")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


# ----------------------------------------------------------------------- external data ------
def iter_tensors(proto: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every TensorProto in the model: initializers, Constant attributes, subgraphs, functions."""
    def graph_tensors(g: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
        yield from g.initializer
        for node in g.node:
            yield from node_tensors(node)

    def node_tensors(node: onnx.NodeProto) -> Iterator[onnx.TensorProto]:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("g"):
                yield from graph_tensors(a.g)
            for sub in a.graphs:
                yield from graph_tensors(sub)

    yield from graph_tensors(proto.graph)
    for f in proto.functions:
        for node in f.node:
            yield from node_tensors(node)


def external_files(proto: onnx.ModelProto) -> set[str]:
    files = set()
    for t in iter_tensors(proto):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            files.add({e.key: e.value for e in t.external_data}.get("location", ""))
    return files


def check_external_data(proto: onnx.ModelProto, path: Path) -> None:
    """Refuse external-data locations outside the model's folder and missing data files."""
    base = path.parent.resolve()
    for t in iter_tensors(proto):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        where = f"{path}: tensor {t.name!r} has external data"
        if not loc:
            raise InputError(f"{where} with no location", "re-export the model")
        if os.path.isabs(loc) or Path(loc).is_absolute() or loc.startswith(("/", "\\")):
            raise InputError(f"{where} at an absolute path ({loc})",
                             "external data must be a relative path inside the model's folder")
        if ".." in Path(loc).parts or ".." in loc.replace("\\", "/").split("/"):
            raise InputError(f"{where} outside the model's folder ({loc})",
                             "external data must be inside the model's folder; move it there")
        target = (base / loc).resolve()
        if base != target and base not in target.parents:
            raise InputError(f"{where} that resolves outside the model's folder ({loc} -> {target})",
                             "a link points out of the folder; copy the data file in instead")
        if not target.is_file():
            raise InputError(f"{where} in {loc}, which is missing",
                             "copy the data file next to the model")
        end = int(info.get("offset", 0) or 0) + int(info.get("length", 0) or 0)
        if end > target.stat().st_size:
            raise InputError(f"{where} past the end of {loc} (needs {end} bytes, file has "
                             f"{target.stat().st_size})", "the data file is truncated; re-export it")


# ------------------------------------------------------------------------- graph checks -----
def check_graph(proto: onnx.ModelProto, where: str) -> None:
    """Structural checks with one-line errors: opsets, domains, undefined inputs, cycles."""
    newest = newest_opset()
    opset = main_opset(proto)
    if opset is not None and opset > newest:
        raise UnsupportedError(
            f"{where}: opset {opset} is newer than the installed "
            f"onnx {onnx.__version__} knows (up to {newest})",
            "upgrade onnx (pip install -U onnx) or export at an older opset")
    local_fns = {(f.domain, f.name) for f in proto.functions}
    local_domains = {f.domain for f in proto.functions}
    unknown = sorted({n.op_type if not n.domain else f"{n.domain}::{n.op_type}"
                      for n in _all_nodes(proto.graph)
                      if n.domain not in KNOWN_DOMAINS and n.domain not in local_domains
                      and (n.domain, n.op_type) not in local_fns})
    if unknown:
        raise UnsupportedError(f"{where}: unknown op domain in {', '.join(unknown[:5])}",
                               "only ai.onnx, ai.onnx.ml and model-local functions are supported")
    _check_dataflow(proto.graph, where, set())


def _all_nodes(g: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in g.node:
        yield node
        for a in node.attribute:
            if a.HasField("g"):
                yield from _all_nodes(a.g)
            for sub in a.graphs:
                yield from _all_nodes(sub)


def _check_dataflow(g: onnx.GraphProto, where: str, outer: set[str]) -> None:
    """Every node input is produced somewhere; the graph has no cycle (unsorted is fine)."""
    available = set(outer) | {i.name for i in g.input} | {t.name for t in g.initializer}
    available |= {t.values.name for t in g.sparse_initializer}
    producers: dict[str, int] = {}
    for idx, node in enumerate(g.node):
        for o in node.output:
            if o:
                producers[o] = idx
    for node in g.node:
        for name in node.input:
            if name and name not in available and name not in producers:
                label = node.name or node.op_type
                raise InputError(f"{where}: node {label!r} ({node.op_type}) reads {name!r}, "
                                 "which nothing produces", "the graph is broken; re-export the model")
    order = _topological_order(g.node, producers, available)
    if order is None:
        raise InputError(f"{where}: the graph has a cycle", "the graph is broken; re-export the model")
    for node in g.node:  # subgraphs see everything of the outer scope
        for a in node.attribute:
            subs = ([a.g] if a.HasField("g") else []) + list(a.graphs)
            for sub in subs:
                _check_dataflow(sub, where, available | set(producers))


def _topological_order(nodes: Any, producers: dict[str, int], available: set[str]) -> list[int] | None:
    deps: list[set[int]] = []
    for node in nodes:
        deps.append({producers[i] for i in node.input if i and i in producers and i not in available})
    done: set[int] = set()
    order: list[int] = []
    remaining = set(range(len(deps)))
    while remaining:
        ready = [i for i in remaining if deps[i] <= done]
        if not ready:
            return None
        for i in sorted(ready):
            done.add(i)
            order.append(i)
            remaining.discard(i)
    return order


# ---------------------------------------------------------------------------------- saving --
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


def tensor_bytes(model: ir.Model) -> int:
    from unframe.validate.onnxruntime import _nbytes

    return _nbytes(model)


def write_onnx(model: ir.Model, path: Path, *, external_data: bool | None = None) -> list[Path]:
    """Write ``model`` at ``path`` (in a staging folder); weights go to ``<name>.data`` beside it
    when asked, by default when the model came with external data (its layout is kept) or is above
    the protobuf size limit. Lazy external tensors are streamed from their files, never all in
    memory."""
    has_ext = any(isinstance(v.const_value, ir.ExternalTensor) for v in model.graph.initializers.values())
    if external_data is None:
        external_data = has_ext or tensor_bytes(model) > EXTERNAL_DATA_THRESHOLD
    check_external_files_unchanged(model)
    if external_data:
        data_name = f"{path.name}.data"
        ir.save(model, path, external_data=data_name, size_threshold_bytes=EXTERNAL_TENSOR_MIN_BYTES)
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
        written = write_onnx(model, tmp / dest.name, external_data=external_data)
        return place(written, dest.parent if str(dest.parent) else Path("."), force=force)


# -------------------------------------------------------------------------- provenance -------
def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    if path.is_dir():
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            h.update(str(f.relative_to(path)).encode())
            h.update(_file_digest(f).encode())
        return h.hexdigest()
    return _file_digest(path)


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def stamp_onnx(model: ir.Model, provenance: dict[str, str]) -> None:
    for k, v in provenance.items():
        model.metadata_props[f"{PROVENANCE_PREFIX}{k}"] = v


def read_provenance(metadata_props: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in metadata_props.items():
        if k.startswith(PROVENANCE_PREFIX):
            key = k[len(PROVENANCE_PREFIX):]
            try:
                out[key] = json.loads(v)
            except (ValueError, TypeError):
                out[key] = v
    return out


# -------------------------------------------------------------------- weight-less protos ----
SMALL_INITIALIZER_BYTES = 1 << 16  # kept inline: Reshape targets, axes... what inference reads


def is_small_initializer(value: ir.Value) -> bool:
    tensor = value.const_value
    return tensor is not None and not isinstance(tensor, ir.ExternalTensor) \
        and tensor.nbytes <= SMALL_INITIALIZER_BYTES


@dataclass
class Detached:
    """A model's proto with its large main-graph initializers left out and declared as graph
    inputs of the same type and shape: what the checker and shape inference need, no weight read
    or copied. ``large`` are the values left out, ``added`` the names of the stand-in inputs."""

    proto: onnx.ModelProto
    large: list[ir.Value]
    added: set[str]


def detached_proto(model: ir.Model) -> Detached:
    """Before: initializers W (40 MB, external), b (8 bytes)     After: inputs x, W; initializer b"""
    initializers = model.graph.initializers
    everything = list(initializers.values())
    large = [v for v in everything if not is_small_initializer(v)]
    for value in large:
        initializers.pop(value.name)
    try:
        proto = ir.to_proto(model)
    finally:
        initializers.clear()
        for value in everything:
            initializers[value.name] = value
    declared = {i.name for i in proto.graph.input}
    added = set()
    for value in large:
        if value.name not in declared and value.type is not None:
            info = onnx.ValueInfoProto(name=value.name)
            info.type.CopyFrom(ir.serde.serialize_type(value.type))
            if value.shape is not None:
                ir.serde.serialize_shape_into(info.type, value.shape)
            proto.graph.input.append(info)
            added.add(value.name)
    return Detached(proto, large, added)


def light_proto(model: ir.Model) -> onnx.ModelProto:
    """The model as a proto whose large initializers are declared as graph inputs instead."""
    return detached_proto(model).proto
