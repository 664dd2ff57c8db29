"""ONNX in and out, safely.

* ``load_model`` parses without reading external data (tensors stay lazy), refuses external-data
  locations that escape the model's folder (absolute, ``..``, or through a link), and checks the
  graph (cycles, inputs nothing produces, unknown domains, opsets newer than onnx knows).
* ``save_model`` writes to a temporary folder beside the destination and renames into place;
  an existing output is replaced only with ``force``; tensors over 2 GB go to external data.
* ``provenance`` builds the metadata recorded in every artifact.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from unframe import limits
from unframe.errors import InputError, OutputExistsError, UnsupportedError, UsageError
from unframe.opset import DEFAULT_DOMAINS, ML_DOMAIN, main_opset, newest_opset

# Weights past this go to external data by default (an output, the torch frontend's export):
# protobuf can't serialize past 2 GiB, and a serialized model is a second copy of its weights in
# memory. 1 GiB leaves room for a stage that adds weights (TensorRT's preparation transposes a tied
# 1 GB embedding), and matches what a user's tools open without trouble.
EXTERNAL_DATA_THRESHOLD = 1 << 30
# A model written for another program to read by path (a parser, a runtime in a child process)
# keeps its weights in external data past this: serializing them would only copy them in memory.
TOOL_INLINE_BYTES = 64 << 20
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
        raise InputError(f"{path}: not a readable ONNX file ({first_line(exc)})",
                         "the file may be truncated or not ONNX; re-export it") from exc
    if not proto.HasField("graph") or (not proto.graph.node and not proto.graph.output):
        raise InputError(f"{path}: not an ONNX model (no graph found)",
                         "the file may be truncated or not ONNX; re-export it")
    return proto


def load_model(path: str | os.PathLike[str]) -> ir.Model:
    """Load an ONNX file as an ``onnx_ir.Model``; external tensors stay lazy (not read)."""
    path = Path(path)
    proto = load_proto(path)
    check_model(proto, str(path), path)
    model = deserialize(proto, str(path))
    ir.external_data.set_base_dir(model.graph, path.parent.resolve())
    _LOADED_EXTERNAL_FILES.update(external_files_state(model))
    return model


def deserialize(proto: onnx.ModelProto, where: str) -> ir.Model:
    """The checked proto as an ``onnx_ir.Model``, its graphs and functions topologically sorted
    (ONNX files may list nodes in any order; every pass after this one expects producers first)."""
    try:
        model = ir.serde.deserialize_model(proto)
        model.graph.sort()
        for function in model.functions.values():
            function.sort()
    except Exception as exc:  # noqa: BLE001 - onnx-ir's refusal of a graph the checks let through
        raise InputError(f"{where}: the graph can't be read ({first_line(exc)})", "re-export the model") from exc
    return model


def check_model(proto: onnx.ModelProto, where: str, path: Path | None = None) -> None:
    """Every check a model gets before anything reads its weights or runs it: nesting depth
    first (the walkers after it recurse), external data (``path``: the file the model came from;
    an in-memory model may have none), every tensor's bytes against its dims, the graph."""
    limits.check_nesting(proto, where)
    check_text(proto, where)
    if path is not None:
        check_external_data(proto, path)
    else:
        _refuse_external(proto, where)
    check_tensors(proto, where)
    check_graph(proto, where)


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


def first_line(exc: BaseException) -> str:
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


def _refuse_external(proto: onnx.ModelProto, where: str) -> None:
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


# ------------------------------------------------------------------------- graph checks -----
def check_graph(proto: onnx.ModelProto, where: str) -> None:
    """Structural checks with one-line errors: opsets, domains, undefined inputs, cycles."""
    for o in [*proto.opset_import, *(o for f in proto.functions for o in f.opset_import)]:
        if not 0 < o.version < 1 << 31:
            raise InputError(f"{where}: imports opset {o.version} of {o.domain or 'ai.onnx'}, which no "
                             "version of ONNX has", "the model is broken; re-export it")
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
    if proto.graph.sparse_initializer:
        names = ", ".join(repr(t.values.name) for t in proto.graph.sparse_initializer[:3])
        raise UnsupportedError(f"{where}: sparse initializers ({names}) are not supported",
                               "store them dense (onnx.numpy_helper) and re-export")
    _check_inputs(proto.graph, where)
    _check_schemas(proto, where, local_fns)
    _check_type_attributes(proto, where)
    _check_device_configurations(proto, where)
    _check_dataflow(proto, where)


def _check_device_configurations(proto: onnx.ModelProto, where: str) -> None:
    """Multi-device placement (IR 11): every configuration has a name and every node's entry
    names one (onnx-ir reads a missing one as nothing and then can't write the model back)."""
    names = {c.name for c in proto.configuration}
    if "" in names:
        raise InputError(f"{where}: a device configuration has no name", "the model is broken; re-export it")
    nodes = [*_all_nodes(proto.graph), *(n for f in proto.functions for n in f.node)]
    for node in nodes:
        for config in node.device_configurations:
            if config.configuration_id not in names:
                raise InputError(f"{where}: {_label(node)} is placed on device configuration "
                                 f"{config.configuration_id!r}, which the model doesn't define",
                                 "the model is broken; re-export it")


# ai.onnx attributes whose integer value is a TensorProto data type (Cast's "to", the Random*
# and EyeLike "dtype", the window functions' "output_datatype")
TYPE_ATTRIBUTES = frozenset({"to", "dtype", "output_datatype"})


def _check_type_attributes(proto: onnx.ModelProto, where: str) -> None:
    """A data-type attribute holds a data type ONNX defines: the checker lets any integer
    through, and every consumer (shape inference, the CoreML and TensorRT translators) would
    fail on it untyped."""
    nodes = [*_all_nodes(proto.graph), *(n for f in proto.functions for n in f.node)]
    for node in nodes:
        if node.domain not in ("", "ai.onnx"):
            continue
        for a in node.attribute:
            if a.name in TYPE_ATTRIBUTES and a.type == onnx.AttributeProto.INT and not _is_data_type(a.i):
                raise InputError(f"{where}: {node.op_type} node {node.name or '(unnamed)'!r} has "
                                 f"{a.name}={a.i}, which is not an ONNX data type",
                                 "the model is broken or written by a newer onnx; re-export it")


def _is_data_type(code: int) -> bool:
    if code == 0:  # UNDEFINED
        return False
    try:
        ir.DataType(code)
    except (ValueError, TypeError):
        return False
    return True


def _check_inputs(graph: onnx.GraphProto, where: str) -> None:
    """Graph inputs have a type a runtime knows and no negative dimension: parity inputs are made
    from them."""
    known = set(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED}
    for v in graph.input:
        which = v.type.WhichOneof("value")
        if which is None:
            raise InputError(f"{where}: input {v.name!r} has no type", "the model is broken; re-export it")
        if which != "tensor_type":
            continue
        t = v.type.tensor_type
        if t.elem_type not in known:
            raise InputError(f"{where}: input {v.name!r} has element type {t.elem_type}, which ONNX doesn't define",
                             "the model is broken; re-export it")
        if any(d.HasField("dim_value") and d.dim_value < 0 for d in t.shape.dim):
            raise InputError(f"{where}: input {v.name!r} has a negative dimension", "the model is broken; re-export it")


def _all_nodes(g: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in g.node:
        yield node
        for a in node.attribute:
            if a.HasField("g"):
                yield from _all_nodes(a.g)
            for sub in a.graphs:
                yield from _all_nodes(sub)


# AttributeProto fields that must be set for each attribute type
_ATTR_FIELD = {onnx.AttributeProto.GRAPH: "g", onnx.AttributeProto.TENSOR: "t",
               onnx.AttributeProto.SPARSE_TENSOR: "sparse_tensor", onnx.AttributeProto.TYPE_PROTO: "tp"}


def _check_schemas(proto: onnx.ModelProto, where: str, local_fns: set[tuple[str, str]]) -> None:
    """Every ai.onnx / ai.onnx.ml node exists at the opset the model imports and matches its
    schema: input and output counts, attribute names, types and required attributes. What
    reads a node after loading (passes, translators, runtimes) relies on this."""
    imports = _imports(proto.opset_import)
    for node in _all_nodes(proto.graph):
        _check_node(node, imports, where, local_fns)
    for f in proto.functions:
        f_imports = _imports(f.opset_import)
        for node in f.node:
            _check_node(node, f_imports, where, local_fns, in_function=True)
    _check_function_calls(proto, where)


def _check_function_calls(proto: onnx.ModelProto, where: str) -> None:
    """A call of a model-local function may omit an input (empty or past the end) only where
    the body doesn't need it: inlined, ``Max(a, b, "")`` is what crashed onnxruntime before."""
    from unframe.opset import FALLBACK_OPSET, norm_domain

    functions = {(f.domain, f.name): f for f in proto.functions}
    callers = [*_all_nodes(proto.graph), *(n for f in proto.functions for n in f.node)]
    for call in callers:
        f = functions.get((call.domain, call.op_type))
        if f is None:
            continue
        omitted = {name for k, name in enumerate(f.input) if k >= len(call.input) or not call.input[k]}
        if not omitted:
            continue
        imports = _imports(f.opset_import)
        for body in f.node:
            domain = norm_domain(body.domain)
            if domain not in ("", ML_DOMAIN) or (body.domain, body.op_type) in functions:
                continue
            sig = _signature(body.op_type, imports.get(domain, FALLBACK_OPSET), domain)
            if sig is None:
                continue
            needed = set(sig.required_inputs)
            if sig.variadic_from is not None:
                needed |= set(range(sig.variadic_from, len(body.input)))
            bad = [body.input[i] for i in sorted(needed) if i < len(body.input) and body.input[i] in omitted]
            if bad:
                raise InputError(f"{where}: {_label(call)} calls function {f.name!r} without its input "
                                 f"{bad[0]!r}, which the function's {body.op_type} needs",
                                 "the model is broken; re-export it")


def _imports(opset_import: Any) -> dict[str, int]:
    from unframe.opset import norm_domain

    return {norm_domain(o.domain): o.version for o in opset_import}


def _check_node(node: onnx.NodeProto, imports: dict[str, int], where: str,
                local_fns: set[tuple[str, str]], in_function: bool = False) -> None:
    from unframe.opset import FALLBACK_OPSET, norm_domain

    for a in node.attribute:  # in every domain: onnx-ir reads a missing one as an empty value
        field = _ATTR_FIELD.get(a.type)
        if field and not a.HasField(field) and not (in_function and a.ref_attr_name):
            raise InputError(f"{where}: {_label(node)} has attribute {a.name!r} without its value",
                             "the model is broken; re-export it")
    domain = norm_domain(node.domain)
    if domain not in ("", ML_DOMAIN) or (node.domain, node.op_type) in local_fns:
        return
    version = imports.get(domain, FALLBACK_OPSET if domain == "" else None)
    if version is None:
        raise InputError(f"{where}: {_label(node)} is in {domain}, which the model doesn't import",
                         "the model is broken; re-export it")
    sig = _signature(node.op_type, version, domain)
    if sig is None:
        raise InputError(f"{where}: {_label(node)} doesn't exist in {domain or 'ai.onnx'} opset {version}",
                         "the model is broken or uses another opset; re-export it")
    given = len(node.input)  # omitted optional inputs are "" and count: min_input includes them
    if not sig.min_input <= given <= sig.max_input:
        raise InputError(f"{where}: {_label(node)} has {given} inputs; opset {version} takes "
                         f"{_arity(sig.min_input, sig.max_input)}", "the model is broken; re-export it")
    empty = [i for i in sig.required_inputs if i < given and not node.input[i]]
    if sig.variadic_from is not None:  # (onnxruntime crashes on Max(a, b, ""))
        empty += [i for i in range(sig.variadic_from, given) if not node.input[i]]
    if empty:
        raise InputError(f"{where}: {_label(node)} leaves its required input {empty[0]} empty",
                         "the model is broken; re-export it")
    outs = len(node.output)
    if not sig.min_output <= outs <= sig.max_output:
        raise InputError(f"{where}: {_label(node)} has {outs} outputs; opset {version} gives "
                         f"{_arity(sig.min_output, sig.max_output)}", "the model is broken; re-export it")
    _check_attributes(node, sig, where, in_function)


def _label(node: onnx.NodeProto) -> str:
    return f"node {node.name or node.op_type!r} ({node.op_type})"


@dataclass(frozen=True)
class _Signature:
    """What the node checks read of an op's schema (the pybind schema object is slow to ask)."""

    min_input: int
    max_input: int
    min_output: int
    max_output: int
    attributes: dict[str, tuple[int, str, bool]]  # name -> (AttributeProto type, type name, required)
    required_inputs: tuple[int, ...] = ()  # positions that may not be left empty ("")
    variadic_from: int | None = None  # a variadic last input: none of its entries may be empty


@functools.lru_cache(maxsize=4096)
def _signature(op: str, version: int, domain: str) -> _Signature | None:
    try:
        schema = onnx.defs.get_schema(op, version, domain)
    except onnx.defs.SchemaError:
        return None
    attrs = {name: (int(a.type), a.type.name, bool(a.required)) for name, a in schema.attributes.items()}
    option = onnx.defs.OpSchema.FormalParameterOption
    required = tuple(i for i, p in enumerate(schema.inputs) if p.option == option.Single)
    variadic = next((i for i, p in enumerate(schema.inputs) if p.option == option.Variadic), None)
    return _Signature(schema.min_input, schema.max_input, schema.min_output, schema.max_output, attrs,
                      required, variadic)


def _arity(low: int, high: int) -> str:
    return str(low) if low == high else f"{low} to {high}" if high < 2**30 else f"at least {low}"


def _check_attributes(node: onnx.NodeProto, sig: _Signature, where: str, in_function: bool) -> None:
    seen: set[str] = set()
    for a in node.attribute:
        spec = sig.attributes.get(a.name)
        if spec is None:
            raise InputError(f"{where}: {_label(node)} has an attribute {a.name!r} its schema doesn't define",
                             "the model is broken; re-export it")
        if a.name in seen:
            raise InputError(f"{where}: {_label(node)} sets attribute {a.name!r} twice",
                             "the model is broken; re-export it")
        seen.add(a.name)
        if in_function and a.ref_attr_name:
            continue  # bound to the caller's attribute when the function is called
        if a.type != spec[0]:
            given = onnx.AttributeProto.AttributeType.Name(a.type) \
                if a.type in onnx.AttributeProto.AttributeType.values() else str(a.type)
            raise InputError(f"{where}: {_label(node)} has attribute {a.name!r} of type {given}, expected "
                             f"{spec[1]}", "the model is broken; re-export it")
    missing = [name for name, spec in sig.attributes.items() if spec[2] and name not in seen]
    if missing:
        raise InputError(f"{where}: {_label(node)} lacks the required attribute {missing[0]!r}",
                         "the model is broken; re-export it")
    if node.op_type == "Einsum" and not (in_function and any(a.ref_attr_name for a in node.attribute)):
        _check_einsum(node, where)
    _check_head_counts(node, where)
    _check_split(node, where)
    _check_axis(node, where)


# attention head counts: onnxruntime reads them as 32-bit ints and divides by them (Attention with
# kv_num_heads = 2**32 killed the process with SIGFPE, found by the opset campaign)
_HEAD_COUNTS = ("num_heads", "q_num_heads", "kv_num_heads")


def _check_head_counts(node: onnx.NodeProto, where: str) -> None:
    for a in node.attribute:
        if a.name in _HEAD_COUNTS and a.type == onnx.AttributeProto.INT and not a.ref_attr_name \
                and not 0 <= a.i < 2**31:
            raise InputError(f"{where}: {_label(node)} has {a.name}={a.i}, which no model has",
                             "the model is broken; re-export it")
    heads = {a.name: a.i for a in node.attribute if a.name in _HEAD_COUNTS and a.type == onnx.AttributeProto.INT}
    q, kv = heads.get("q_num_heads", 0), heads.get("kv_num_heads", 0)
    if bool(q) != bool(kv):  # onnxruntime divides one by the other (kv_num_heads = 0: SIGFPE)
        raise InputError(f"{where}: {_label(node)} has q_num_heads={q} but kv_num_heads={kv}: "
                         "3-D attention needs both", "the model is broken; re-export it")
    if q and kv and q % kv:
        raise InputError(f"{where}: {_label(node)} has q_num_heads={q}, not a multiple of kv_num_heads={kv}",
                         "the model is broken; re-export it")


def _check_axis(node: onnx.NodeProto, where: str) -> None:
    """An ``axis`` past 32 bits names no axis of any tensor; onnx's shape inference overflows on
    one (LayerNormalization with axis = 2^63 - 1 and its Mean output segfaulted the process,
    found by the opset campaign)."""
    for a in node.attribute:
        if a.name == "axis" and a.type == onnx.AttributeProto.INT and not a.ref_attr_name \
                and not -(2**31) <= a.i < 2**31:
            raise InputError(f"{where}: {_label(node)} has axis={a.i}, which no tensor has",
                             "the model is broken; re-export it")


def _check_split(node: onnx.NodeProto, where: str) -> None:
    """Split's num_outputs must count its outputs: onnx's shape inference indexes past its
    vector otherwise and aborts the process (found by the opset campaign: num_outputs=3, four
    outputs)."""
    if node.op_type != "Split" or node.domain not in ("", "ai.onnx"):
        return
    given = next((a for a in node.attribute if a.name == "num_outputs" and not a.ref_attr_name), None)
    if given is not None and given.type == onnx.AttributeProto.INT and given.i != len(node.output):
        raise InputError(f"{where}: {_label(node)} has num_outputs={given.i} but {len(node.output)} outputs",
                         "the model is broken; re-export it")


# Einsum's notation: comma-separated terms of letters and at most one ellipsis each, then
# optionally "->" and the output's term; spaces anywhere. onnx's shape inference loops forever on
# some strings outside it ("%s%n", found by the check campaign), so nothing else reaches it.
_EINSUM_TERM = r"[A-Za-z ]*(?:\.\.\.[A-Za-z ]*)?"  # one reading of any string: no backtracking
_EINSUM = re.compile(rf"{_EINSUM_TERM}(?:,{_EINSUM_TERM})*(?:->{_EINSUM_TERM})?")


def _check_einsum(node: onnx.NodeProto, where: str) -> None:
    equation = next((a.s for a in node.attribute if a.name == "equation"), b"")
    text = equation.decode("utf-8", "replace")
    if not _EINSUM.fullmatch(text):
        raise InputError(f"{where}: {_label(node)} has equation {text[:60]!r}, which is not Einsum "
                         "notation (letters, ',', '...' and one '->')", "the model is broken; re-export it")


def _check_dataflow(proto: onnx.ModelProto, where: str) -> None:
    """Every node input and every output is produced somewhere, once; no graph or function body
    has a cycle (unsorted is fine). Subgraphs see their outer scope; function bodies only their
    inputs."""
    stack: list[tuple[Any, set[str], frozenset[str], list[str]]] = []
    g = proto.graph
    local = {i.name for i in g.input} | {t.name for t in g.initializer}
    stack.append((g.node, local | {t.values.name for t in g.sparse_initializer}, frozenset(),
                  [o.name for o in g.output]))
    for f in proto.functions:
        stack.append((f.node, set(f.input), frozenset(), list(f.output)))
    while stack:  # explicit: subgraph depth is bounded by check_nesting, but stay iterative
        nodes, local, scope, outputs = stack.pop()
        available = set(scope) | local
        producers = _producers(nodes, where, local)
        for node in nodes:
            for name in node.input:
                if name and name not in available and name not in producers:
                    label = node.name or node.op_type
                    raise InputError(f"{where}: node {label!r} ({node.op_type}) reads {name!r}, "
                                     "which nothing produces", "the graph is broken; re-export the model")
        for name in outputs:
            if not name or (name not in available and name not in producers):
                raise InputError(f"{where}: output {name!r} is not produced by any node, input or initializer",
                                 "the graph is broken; re-export the model")
        if not _acyclic(nodes, producers, available):
            raise InputError(f"{where}: the graph has a cycle", "the graph is broken; re-export the model")
        inner = frozenset(available | set(producers))
        for index, node in enumerate(nodes):
            subgraphs = [sub for a in node.attribute for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs)]
            if not subgraphs:
                continue
            # a subgraph sees the values computed before its node, not the node's own outputs
            # nor anything computed from them (a hidden cycle no runtime can order)
            seen = inner - _downstream(nodes, index, producers)
            for sub in subgraphs:
                sub_local = {i.name for i in sub.input} | {t.name for t in sub.initializer}
                stack.append((sub.node, sub_local | {t.values.name for t in sub.sparse_initializer}, seen,
                              [o.name for o in sub.output]))


def _downstream(nodes: Any, start: int, producers: dict[str, int]) -> set[str]:
    """The values node ``start`` produces and every value computed from them in ``nodes``."""
    readers: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        for name in node.input:
            readers.setdefault(name, []).append(i)
    out: set[str] = set()
    todo, done = [start], {start}
    while todo:
        node = nodes[todo.pop()]
        for name in node.output:
            if name and producers.get(name) is not None:
                out.add(name)
                for reader in readers.get(name, ()):
                    if reader not in done:
                        done.add(reader)
                        todo.append(reader)
    return out


def _producers(nodes: Any, where: str, defined: set[str]) -> dict[str, int]:
    """Which node writes each value; a second writer (or a node writing over one of the graph's
    inputs or initializers) is a broken graph that every runtime would read differently."""
    producers: dict[str, int] = {}
    for idx, node in enumerate(nodes):
        for o in node.output:
            if not o:
                continue
            if o in producers or o in defined:
                label = node.name or node.op_type
                raise InputError(f"{where}: node {label!r} ({node.op_type}) writes {o!r}, which is "
                                 "already defined", "each value must have one producer; re-export the model")
            producers[o] = idx
    return producers


def _acyclic(nodes: Any, producers: dict[str, int], available: set[str]) -> bool:
    """Kahn's algorithm: linear in nodes and edges, so a hostile graph can't make it quadratic."""
    users: list[list[int]] = [[] for _ in range(len(nodes))]
    pending = [0] * len(nodes)
    for idx, node in enumerate(nodes):
        deps = {producers[i] for i in node.input if i and i in producers and i not in available}
        pending[idx] = len(deps)
        for d in deps:
            users[d].append(idx)
    ready = [i for i, n in enumerate(pending) if n == 0]
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        for u in users[i]:
            pending[u] -= 1
            if pending[u] == 0:
                ready.append(u)
    return done == len(nodes)


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


def all_initializers(model: ir.Model) -> list[ir.Value]:
    """The initializers of the main graph and of every subgraph (If/Loop/Scan bodies)."""
    out: list[ir.Value] = list(model.graph.initializers.values())
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                out.extend(attr.value.initializers.values())
            elif attr.type == ir.AttributeType.GRAPHS:
                for g in attr.value:
                    out.extend(g.initializers.values())
    return out


def tensor_bytes(model: ir.Model) -> int:
    """The bytes of every initializer's data, subgraphs included (from the dims and dtype: no
    tensor is read)."""
    total = 0
    for v in all_initializers(model):
        t = v.const_value
        if t is None:
            continue
        try:
            itemsize = max(t.dtype.itemsize, 1)
        except TypeError:  # STRING tensors have no fixed width; they are never large weights
            itemsize = 1
        total += int(np.prod(t.shape.numpy(), dtype=np.int64)) * itemsize
    return total


def has_external_tensors(model: ir.Model) -> bool:
    """Whether any initializer (subgraphs included) is a lazy external tensor."""
    return any(isinstance(v.const_value, ir.ExternalTensor)
               for graph in model.graphs() for v in graph.initializers.values())


def needs_external_data(model: ir.Model, threshold: int | None = None) -> bool:
    """External data for a model that came with it (its layout kept, its weights never read
    whole) or whose weights are past ``threshold`` bytes (``EXTERNAL_DATA_THRESHOLD``)."""
    limit = EXTERNAL_DATA_THRESHOLD if threshold is None else threshold
    return has_external_tensors(model) or tensor_bytes(model) > limit


def borrowed(tensor: Any) -> bool:
    """A tensor whose bytes belong to another library's live object (torch's exporter wraps the
    model's parameters: they change when training goes on)."""
    return tensor is not None and not type(tensor).__module__.startswith("onnx_ir")


def adopt_external_weights(model: ir.Model, path: Path) -> None:
    """Point ``model``'s borrowed initializers at their copies in ``path``, a file just written
    from it: large ones are read from its external data from now on, as ``onnx_ir.load(path)``
    would read them, small ones are its inline copies (a model exported from live torch
    parameters then follows the file, not the parameters)."""
    written = ir.load(path)
    for mine, theirs in zip(model.graphs(), written.graphs(), strict=False):
        for name, value in mine.initializers.items():
            other = theirs.initializers.get(name)
            if borrowed(value.const_value) and other is not None and other.const_value is not None:
                value.const_value = other.const_value  # small ones as the file's inline copies


def snapshot_weights(model: ir.Model) -> tempfile.TemporaryDirectory[str] | None:
    """A model whose weights are borrowed (an export's live parameters) gets its own copy of
    them, which later training can't change: in memory, or past ``EXTERNAL_DATA_THRESHOLD``
    written to a private folder and read from there. The folder (to keep while the model is
    used), or None."""
    values = [v for g in model.graphs() for v in g.initializers.values() if borrowed(v.const_value)]
    if not values:
        return None
    if tensor_bytes(model) <= EXTERNAL_DATA_THRESHOLD:
        for value in values:
            tensor = value.const_value
            value.const_value = ir.Tensor(tensor.numpy().copy(), dtype=tensor.dtype, name=tensor.name)
        return None
    workdir = private_dir("unframe-weights-")
    path = Path(workdir.name) / "model.onnx"
    ir.save(model, path, external_data="model.onnx.data", size_threshold_bytes=EXTERNAL_TENSOR_MIN_BYTES)
    adopt_external_weights(model, path)
    return workdir


_PRIVATE_DIRS: set[Path] = set()  # folders unframe made for its own files (see private_dir)


def private_dir(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A temporary folder for unframe's own files (an export's external data): a tool file for a
    model whose weights live there is written beside them (``tool_file``)."""
    tmp = tempfile.TemporaryDirectory(prefix=prefix)
    _PRIVATE_DIRS.add(Path(tmp.name).resolve())
    return tmp


@contextmanager
def tool_file(model: ir.Model, *, stand_ins: bool = False) -> Iterator[Path]:
    """A file of ``model`` for another program to read by path (TensorRT's parser, onnxruntime
    or onnx's reference evaluator in a child), removed after the block. The model is never
    serialized whole in memory nor near protobuf's 2 GiB (a prepared copy of a 1.5 GB model with
    a tied embedding transposed went past it): past ``TOOL_INLINE_BYTES`` the weights go to
    external data. When every external tensor lives in one folder of unframe's own
    (``private_dir``: the torch export's), the file is written there and reads them where they
    lie, neither read nor copied here; otherwise they are streamed into a private copy (a user's
    file is never linked: onnx's and onnx-ir's loaders refuse a data file with several links,
    the user's own included while a link lasts). ``stand_ins``: float weights of
    ``STAND_IN_BYTES`` or more are zeros of their shape and type, in a sparse file (for a verdict
    on what a program takes, which no weight's values decide: nothing of them is read or
    written). The model is left as it was."""
    if stand_ins:
        with tempfile.TemporaryDirectory(prefix="unframe-tool-") as tmp:
            yield _save_with_stand_ins(model, Path(tmp) / "model.onnx")
        return
    if not needs_external_data(model, TOOL_INLINE_BYTES):
        with tempfile.TemporaryDirectory(prefix="unframe-tool-") as tmp:
            path = Path(tmp) / "model.onnx"
            ir.save(model, path)
            yield path
        return
    home = _private_home(model)
    if home is None:
        with tempfile.TemporaryDirectory(prefix="unframe-tool-") as tmp:
            path = Path(tmp) / "model.onnx"
            ir.save(model, path, external_data="model.onnx.data", size_threshold_bytes=EXTERNAL_TENSOR_MIN_BYTES)
            yield path
        return
    path = home / f"tool-{uuid.uuid4().hex[:12]}.onnx"
    data = path.with_name(path.name + ".data")
    try:
        _save_beside(model, path, data)
        yield path
    finally:
        path.unlink(missing_ok=True)
        data.unlink(missing_ok=True)


# A check (``check --to coreml``'s dry translation, TensorRT's parser verdict) takes float weights
# this large as stand-ins of their shape and type: no verdict on what converts reads their values.
STAND_IN_BYTES = 16 << 20
_FLOATS = frozenset({ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE})


def stands_in(tensor: Any) -> bool:
    """Whether a check takes ``tensor`` as a stand-in (a float weight of ``STAND_IN_BYTES`` or more)."""
    return tensor.dtype in _FLOATS and tensor.nbytes >= STAND_IN_BYTES


def _save_with_stand_ins(model: ir.Model, path: Path) -> Path:
    """``model`` at ``path``, its large float weights pointing at one sparse file of zeros and
    other weights past the inline size in ``<name>.data``; its tensors put back after."""
    zeros, data = path.with_name(path.name + ".zeros"), path.with_name(path.name + ".data")
    swapped: list[tuple[ir.Value, Any]] = []
    fresh: list[ir.Value] = []
    offset = 0
    try:
        for graph in model.graphs():
            for value in graph.initializers.values():
                tensor = value.const_value
                if tensor is None:
                    continue
                if stands_in(tensor):
                    swapped.append((value, tensor))
                    value.const_value = ir.ExternalTensor(
                        zeros.name, offset, tensor.nbytes, tensor.dtype, shape=tensor.shape,
                        name=tensor.name, base_dir=path.parent)
                    offset += -(-tensor.nbytes // 4096) * 4096
                elif tensor.nbytes > EXTERNAL_TENSOR_MIN_BYTES:
                    fresh.append(value)
        with zeros.open("wb") as f:
            f.truncate(offset)  # holes: no disk, and reads of zeros
        if fresh:
            tensors = [v.const_value for v in fresh]
            external = ir.external_data.convert_tensors_to_external(tensors, path.parent, data.name)
            for value, tensor, out in zip(fresh, tensors, external, strict=True):
                swapped.append((value, tensor))
                value.const_value = out
        ir.save(model, path)
    finally:
        for value, tensor in reversed(swapped):
            value.const_value = tensor
    return path


def _private_home(model: ir.Model) -> Path | None:
    """The one private folder every external tensor of ``model`` lives in, else None."""
    homes = {Path(t.base_dir).resolve() for graph in model.graphs() for v in graph.initializers.values()
             if isinstance(t := v.const_value, ir.ExternalTensor)}
    if len(homes) != 1:
        return None
    home = homes.pop()
    return home if home in _PRIVATE_DIRS else None


def _save_beside(model: ir.Model, path: Path, data: Path) -> None:
    """``model`` at ``path`` in its external tensors' folder: they keep their references; other
    large tensors go to ``data``; the model's tensors are put back after."""
    fresh = [v for graph in model.graphs() for v in graph.initializers.values()
             if v.const_value is not None and not isinstance(v.const_value, ir.ExternalTensor)
             and v.const_value.nbytes > EXTERNAL_TENSOR_MIN_BYTES]
    kept = [v.const_value for v in fresh]
    try:
        if fresh:
            external = ir.external_data.convert_tensors_to_external(kept, path.parent, data.name)
            for value, tensor in zip(fresh, external, strict=True):
                value.const_value = tensor
        ir.save(model, path)  # every large tensor is external now: the file holds the graph
    finally:
        for value, tensor in zip(fresh, kept, strict=True):
            value.const_value = tensor


def write_onnx(model: ir.Model, path: Path, *, external_data: bool | None = None,
               final_dir: Path | None = None) -> list[Path]:
    """Write ``model`` at ``path`` (in a staging folder); weights go to ``<name>.data`` beside it
    when asked, by default when the model came with external data (its layout is kept) or is above
    the protobuf size limit. Lazy external tensors are streamed from their files, never all in
    memory. ``final_dir``: the folder the output is placed in; when every large weight is an
    unchanged external tensor whose file is already there (an opset conversion written beside
    its source), the output references those files as they are instead of copying them (see
    ``shared_external_files``)."""
    has_ext = has_external_tensors(model)
    if external_data is None:
        external_data = needs_external_data(model)
    check_external_files_unchanged(model)
    if external_data and final_dir is not None and shared_external_files(model, final_dir):
        ir.save(model, path)  # external tensors keep their location, offset and length
        check_external_files_unchanged(model)
        return [path]
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
            elif tensor is not None and tensor.nbytes > EXTERNAL_TENSOR_MIN_BYTES:
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
