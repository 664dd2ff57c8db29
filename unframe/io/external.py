"""Weights in flight: how big they are, when they go to external data, and the files other
programs read them from.

* ``tensor_bytes`` counts a model's weights from dims and dtypes (nothing read); past
  ``EXTERNAL_DATA_THRESHOLD`` an output keeps them in external data.
* ``snapshot_weights`` and ``adopt_external_weights``: a live model's weights copied to a folder of
  unframe's own (``private_dir``) and read from there.
* ``tool_file``: a file of the model for another program to read by path; a check's large float
  weights are stand-ins (``STAND_IN_BYTES``), never read.
* ``detached_proto`` / ``light_proto``: the graph without its large weights, for what reads only
  shapes (shape inference, the checker).

The sizes here are read when a function runs: a test that changes one sets it on this module
(``unframe.io`` reads them from here too).
"""

from __future__ import annotations

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
    lie, neither read nor copied here; when they all live in one folder of the user's that unframe
    may write, past ``SHARED_HOME_BYTES``, a hidden graph file is written beside them for the
    block (``_shared_home``); otherwise they are streamed into a private copy (a user's file is
    never linked: onnx's and onnx-ir's loaders refuse a data file with several links, the user's
    own included while a link lasts). ``stand_ins``: float weights of
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
    prefix = "tool-"
    if home is None and (home := _shared_home(model)) is not None:
        prefix = BESIDE_USER_DATA  # hidden: a zoo's discovery of that folder skips it
    if home is None:
        with tempfile.TemporaryDirectory(prefix="unframe-tool-") as tmp:
            path = Path(tmp) / "model.onnx"
            ir.save(model, path, external_data="model.onnx.data", size_threshold_bytes=EXTERNAL_TENSOR_MIN_BYTES)
            yield path
        return
    path = home / f"{prefix}{uuid.uuid4().hex[:12]}.onnx"
    data = path.with_name(path.name + ".data")
    try:
        _save_beside(model, path, data)
        yield path
    finally:
        path.unlink(missing_ok=True)
        data.unlink(missing_ok=True)


BESIDE_USER_DATA = ".unframe-tool-"  # a tool file's name prefix in a user's folder (``_shared_home``)


def in_user_folder(path: Path | str) -> bool:
    """Whether a tool file lies in a user's folder (beside their data): whoever holds it removes it
    as soon as the program has read it, not when the conversion ends."""
    return Path(path).name.startswith(BESIDE_USER_DATA)


# Past this, a user's external data is read where it lies by a tool file written beside it (below
# it is copied: a copy costs less than touching the user's folder is worth).
SHARED_HOME_BYTES = 64 << 20


def _shared_home(model: ir.Model) -> Path | None:
    """The user's folder every external tensor of ``model`` lives in, when it holds at least
    ``SHARED_HOME_BYTES`` of them and unframe may write there: a tool file of a few kilobytes
    written beside the data (hidden, removed after) reads it where it lies, where a private copy
    would double the disk and the time (onnxruntime resolves a linked data file to its target and
    refuses one outside the model's folder; a hard link makes onnx's loaders refuse the file). The
    data file itself is never written."""
    tensors = [t for graph in model.graphs() for v in graph.initializers.values()
               if isinstance(t := v.const_value, ir.ExternalTensor)]
    homes = {Path(t.base_dir).resolve() for t in tensors}
    if len(homes) != 1 or sum(t.nbytes for t in tensors) < SHARED_HOME_BYTES:
        return None
    home = homes.pop()
    probe = home / f".unframe-probe-{uuid.uuid4().hex[:12]}"
    try:
        probe.touch(exist_ok=False)
    except OSError:  # read-only, or not ours to write: the private copy
        return None
    probe.unlink(missing_ok=True)
    return home


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
