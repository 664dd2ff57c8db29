"""Loading an ONNX file: parsed without reading its external data (tensors stay lazy), then
checked before anything else reads it (``check_model``: text fields, external-data references and
tensor sizes, ``checks_data.py``; the graph, ``checks_graph.py``). The external data files a loaded
model reads are remembered, so that a write can tell when one changed underneath it.
"""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import onnx_ir as ir

from unframe import limits
from unframe.errors import InputError
from unframe.io.checks_data import check_external_data, check_tensors, check_text, refuse_external
from unframe.io.checks_graph import check_graph


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
        refuse_external(proto, where)
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
