"""Tensor data checked before any reader touches it: text fields that must be text, external-data
references that must stay inside the model's folder (no absolute path, no ``..``, no link out),
ranges that must lie inside their file without overlapping, and every tensor's bytes against its
dims x dtype (``limits``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnx

from unframe import limits
from unframe.errors import InputError


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


def check_text(proto: onnx.ModelProto, where: str) -> None:
    """Every string field holds UTF-8 text. The protobuf parser lets invalid UTF-8 through as
    ``bytes``; names, op types and locations must be text before anything compares or opens them."""
    stack: list[Any] = [proto]
    while stack:
        msg = stack.pop()
        for field, value in msg.ListFields():
            kind = _FIELD_KINDS.get(field)
            if kind is None:
                kind = _FIELD_KINDS[field] = _field_kind(field)
            if kind == "message":
                stack.append(value)
            elif kind == "messages":
                stack.extend(value)
            elif kind == "string":
                if not isinstance(value, str):
                    _not_text(where, field, value)
            elif kind == "strings":
                for text in value:
                    if not isinstance(text, str):
                        _not_text(where, field, text)


_FIELD_KINDS: dict[Any, str] = {}


def _field_kind(field: Any) -> str:
    from google.protobuf.descriptor import FieldDescriptor

    many = _repeated(field)
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return "skip" if field.message_type.GetOptions().map_entry else ("messages" if many else "message")
    if field.type == FieldDescriptor.TYPE_STRING:
        return "strings" if many else "string"
    return "skip"


def _not_text(where: str, field: Any, value: Any) -> None:
    raise InputError(f"{where}: {field.containing_type.name}.{field.name} holds {bytes(value)[:40]!r}, "
                     "which is not UTF-8 text", "the file is corrupt; re-export the model")


def _repeated(field: Any) -> bool:
    repeated = getattr(field, "is_repeated", None)  # protobuf >= 6; older ones have label
    return bool(repeated) if repeated is not None else field.label == field.LABEL_REPEATED


def iter_sparse(proto: onnx.ModelProto) -> Iterator[onnx.SparseTensorProto]:
    """Every SparseTensorProto: sparse initializers and sparse attributes, subgraphs included."""
    graphs = [proto.graph]
    nodes: list[onnx.NodeProto] = [n for f in proto.functions for n in f.node]
    while graphs or nodes:
        if graphs:
            g = graphs.pop()
            yield from g.sparse_initializer
            nodes.extend(g.node)
            continue
        node = nodes.pop()
        for a in node.attribute:
            if a.HasField("sparse_tensor"):
                yield a.sparse_tensor
            yield from a.sparse_tensors
            if a.HasField("g"):
                graphs.append(a.g)
            graphs.extend(a.graphs)


def check_external_data(proto: onnx.ModelProto, path: Path) -> None:
    """Refuse external data that could read anything but the model's own data files: locations
    outside the model's folder (absolute, ``..``, through a link anywhere on the way, a hard
    link), files that aren't regular files, ranges past the end of a file or that don't match the
    tensor's dims, two tensors claiming overlapping bytes, sparse tensors with external data."""
    where = str(path)
    try:
        base = path.parent.resolve()
    except OSError as exc:
        raise InputError(f"{path}: the model's folder can't be resolved ({exc.strerror})", "check the path") from None
    ranges: dict[Path, list[tuple[int, int, str]]] = {}
    for t in iter_tensors(proto):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        loc, target, offset, length, size = _external_file(t, path, base)
        start, end = limits.check_external_length(t, where, offset, length, size, loc)
        if end > start:
            ranges.setdefault(target, []).append((start, end, t.name))
    for sparse in iter_sparse(proto):
        for part in (sparse.values, sparse.indices):
            if part.data_location == onnx.TensorProto.EXTERNAL:
                raise InputError(f"{path}: sparse tensor {sparse.values.name!r} keeps data in external "
                                 "data", "sparse tensors must be stored inline; re-export the model")
    _check_overlaps(ranges, path)


def refuse_external(proto: onnx.ModelProto, where: str) -> None:
    """An in-memory model has no folder its external data could be checked against."""
    for t in iter_tensors(proto):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            raise InputError(f"{where}: tensor {t.name!r} has external data, but the model was given "
                             "without its file", "pass the model's path, so its data is read from its folder")
    for sparse in iter_sparse(proto):
        if onnx.TensorProto.EXTERNAL in (sparse.values.data_location, sparse.indices.data_location):
            raise InputError(f"{where}: sparse tensor {sparse.values.name!r} keeps data in external data",
                             "sparse tensors must be stored inline; re-export the model")


def _external_file(t: onnx.TensorProto, path: Path, base: Path) -> tuple[str, Path, int, int | None, int]:
    """(location, file, offset, length or None, file size) of one external tensor, refusing
    any location that could lead out of the folder or to something other than a data file."""
    where = f"{path}: tensor {t.name!r} has external data"
    info: dict[str, str] = {}
    for e in t.external_data:
        if e.key in info:
            raise InputError(f"{where} with two {e.key!r} entries", "re-export the model")
        info[e.key] = e.value
    loc = info.get("location", "")
    if not loc:
        raise InputError(f"{where} with no location", "re-export the model")
    if "\0" in loc:
        raise InputError(f"{where} at a location unframe won't read ({loc!r})",
                         "external data must be a plain relative path inside the model's folder")
    if os.path.isabs(loc) or Path(loc).is_absolute() or loc.startswith(("/", "\\")):
        raise InputError(f"{where} at an absolute path ({loc})",
                         "external data must be a relative path inside the model's folder")
    parts = Path(loc).parts
    if ".." in parts or ".." in loc.replace("\\", "/").split("/"):
        raise InputError(f"{where} outside the model's folder ({loc})",
                         "external data must be inside the model's folder; move it there")
    target = _walk_without_links(base, parts, where, loc)
    offset = _nonnegative(info.get("offset"), "offset", where)
    length = _nonnegative(info.get("length"), "length", where) if info.get("length") not in (None, "") else None
    return loc, target, offset or 0, length, target.stat().st_size


def _walk_without_links(base: Path, parts: tuple[str, ...], where: str, loc: str) -> Path:
    """``base / parts``, refusing a symbolic link at any step (a parent folder included), a file
    with other hard links (one may live outside the folder) and anything but a regular file."""
    import stat

    current = base
    for i, part in enumerate(parts):
        current = current / part
        try:
            st = current.lstat()
        except FileNotFoundError:
            raise InputError(f"{where} in {loc}, which is missing", "copy the data file next to the model") from None
        except OSError as exc:
            raise InputError(f"{where} in {loc}, which can't be read ({exc.strerror})",
                             "check the data file") from None
        if stat.S_ISLNK(st.st_mode):
            raise InputError(f"{where} through a link: {'/'.join(parts[: i + 1])}",
                             "links can lead out of the model's folder; copy the data file in instead")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{where} in {loc}, which is not a regular file", "external data must be a data file")
    if st.st_nlink > 1:
        raise InputError(f"{where} in {loc}, which has {st.st_nlink} hard links",
                         "a hard link can expose a file from outside the folder; copy the data file in instead")
    resolved = current.resolve()
    if base != resolved and base not in resolved.parents:  # belt and braces after the walk
        raise InputError(f"{where} that resolves outside the model's folder ({loc} -> {resolved})",
                         "a link points out of the folder; copy the data file in instead")
    return current


def _nonnegative(text: str | None, key: str, where: str) -> int:
    if text in (None, ""):
        return 0
    try:
        value = int(str(text).strip())
    except ValueError:
        raise InputError(f"{where} with a bad {key} {text!r}", "re-export the model") from None
    if value < 0:
        raise InputError(f"{where} with a negative {key} ({value})", "re-export the model")
    return value


def _check_overlaps(ranges: dict[Path, list[tuple[int, int, str]]], path: Path) -> None:
    """Two tensors reading the same bytes: a crafted file could make one small data file feed
    any number of tensors (each a full copy in memory)."""
    for target, spans in ranges.items():
        spans.sort()
        reach, owner = -1, ""
        for start, end, name in spans:
            if start < reach:
                raise InputError(f"{path}: tensors {owner!r} and {name!r} claim overlapping bytes of "
                                 f"{target.name}", "each tensor needs its own range; re-export the model")
            if end > reach:
                reach, owner = end, name


def check_tensors(proto: onnx.ModelProto, where: str) -> None:
    """Every inline tensor's data matches its dims x dtype, sparse tensors included (external
    ones are checked with their files)."""
    for t in iter_tensors(proto):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            limits.check_inline_tensor(t, where)
    for sparse in iter_sparse(proto):
        limits.check_sparse(sparse, where)
