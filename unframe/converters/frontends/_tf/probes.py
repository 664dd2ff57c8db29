"""Native readers of TF/Keras files, in a child process (``unframe.sandbox``).

HDF5 (legacy .h5 files, the weights inside a .keras archive) and TFLite's interpreter are C/C++
libraries with a history of crashing on malformed files (fuzzing found TFLite's
``get_output_details`` segfaulting on a model its interpreter had built, allocated and run).

* HDF5: before Keras opens a file here, a child opens it the same way: every object visited and
  its data read (sizes checked against the memory budget first). A crash there is a typed error;
  a file the child survives is then loaded here.
* TFLite: this process never opens one. The child reads the model's signature and runs it (for
  parity) and hands back plain values.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

from unframe import limits, sandbox
from unframe.errors import InputError

SANDBOX = "tensorflow"
KERAS_WEIGHTS = "model.weights.h5"
BASE_SECONDS = 5.0  # a reader's time for any file; the fuzz harness shortens it (bench/fuzz)


def probe_timeout(path: Path) -> float:
    """Seconds a reader gets for a file once its library is imported: a few, plus a read at
    20 MB/s. HDF5 can loop forever on a malformed file; this stops it."""
    return BASE_SECONDS + path.stat().st_size / 20e6


def check_keras_file(path: Path) -> None:
    """A .keras archive (checked as an archive, then its weights) or a legacy .h5 file."""
    from unframe import archives

    if archives.is_zip(path):
        archives.check_zip(path, "Keras archive")
        with zipfile.ZipFile(path) as zf:
            if KERAS_WEIGHTS not in zf.namelist():
                return  # Keras says what is missing, in its own words
        _call(h5_probe, path, KERAS_WEIGHTS, what=f"HDF5 on the weights of {path.name}", preload=import_h5py)
    else:
        _call(h5_probe, path, None, what=f"HDF5 on {path.name}", preload=import_h5py)


def describe_tflite(path: Path) -> tuple[list[Any], list[str], dict[str, str]]:
    """(inputs, output names, tensor name -> signature key), read in the child."""
    return _call(tflite_in_child, path, what=f"TFLite's interpreter on {path.name}", preload=import_tensorflow)


def run_tflite(path: Path, arrays: dict[str, Any], names: dict[str, str]) -> list[Any]:
    """The model's outputs on ``arrays``, computed in the child."""
    left = limits.remaining()  # inside the parity time limit: the child gets what is left
    return _call(tflite_run_in_child, path, arrays, names, what=f"TFLite's interpreter on {path.name}",
                 preload=import_tensorflow, timeout=max(left, 0.1) if left is not None else None)


def _call(fn: Any, path: Path, *args: Any, what: str, preload: Any, timeout: float | None = -1.0) -> Any:
    # zygote: a process that reads many files (a zoo run, a fuzzer) imports TensorFlow once
    return sandbox.call(SANDBOX, fn, path, *args, limits.max_memory(), what=what, preload=preload, zygote=True,
                        timeout=probe_timeout(path) if timeout == -1.0 else timeout,
                        crash_error=InputError, hint="the file is malformed; re-save the model")


# -------------------------------------------------------------------- in the child -------------
def import_h5py() -> None:
    import h5py  # noqa: F401


def import_tensorflow() -> None:
    from unframe.converters.frontends._tf.common import quiet_tensorflow

    quiet_tensorflow()
    import tensorflow  # noqa: F401


# Attributes Keras (and lambda_layers) read by name. A lookup by name walks HDF5's attribute
# index, not its listing: fuzzing found a file whose listing fails cleanly while every lookup by
# name loops forever, in this process, after a probe that had only listed.
KERAS_H5_ATTRS = ("model_config", "training_config", "keras_version", "backend", "layer_names",
                  "layer_names0", "weight_names", "weight_names0")
KERAS_H5_GROUPS = ("model_weights", "optimizer_weights", "layers", "vars")


def h5_probe(path: Path, member: str | None, budget: int) -> None:
    """Open the HDF5 file (or the archive member), look up what Keras looks up by name, visit
    every object, read every attribute and every dataset whose size fits the budget (a bigger one
    is refused, as it would be here). Anything HDF5 can't read refuses the file: a valid Keras
    file reads whole."""
    import h5py

    with limits.memory_budget(budget):
        if member is None:
            source: Any = str(path)
        else:
            try:
                with zipfile.ZipFile(path) as zf:
                    source = io.BytesIO(zf.read(member))
            except Exception as exc:  # noqa: BLE001 - zipfile raises a dozen types on a corrupt member
                raise InputError(f"{path}: {member} in the archive is corrupt ({type(exc).__name__}: {exc})",
                                 "the file may be truncated; re-save it") from None
        try:
            with h5py.File(source, "r") as f:
                _by_name(f)
                _visit(path, f)
        except (OSError, ValueError, KeyError, TypeError, RuntimeError, MemoryError) as exc:
            # Refused here, not left to Keras: a read that fails in this child (out of its memory,
            # say) can first allocate gigabytes in the parent (fuzzing: a vlen string whose heap
            # entry is damaged read 4 GB over 11 s before HDF5 said so), or never return there.
            where = f"{member} in {path}" if member else str(path)
            raise InputError(f"{where}: HDF5 can't read it ({type(exc).__name__}: {str(exc)[:200]})",
                             "the file is damaged or truncated; re-save the model") from None


def _by_name(node: Any) -> None:
    """Keras' lookups by name on a group (a missing name is no error)."""
    import h5py

    for name in KERAS_H5_ATTRS:
        node.attrs.get(name)
    for name in KERAS_H5_GROUPS:
        child = node.get(name)
        if isinstance(child, h5py.Group):
            for attr in KERAS_H5_ATTRS:
                child.attrs.get(attr)


def _visit(path: Path, root: Any) -> None:
    import h5py

    stack = [root]
    while stack:
        node = stack.pop()
        for key in node.attrs:
            node.attrs[key]  # noqa: B018 - reading it is the probe
        if isinstance(node, h5py.Group):
            _by_name(node)
        if isinstance(node, h5py.Dataset):
            limits.check_array(node.shape or (), node.dtype if node.dtype.kind != "O" else "O",
                               f"{path.name}: HDF5 dataset {node.name}")
            node[()]
            continue
        for key in node:
            link = node.get(key, getlink=True)
            if isinstance(link, h5py.ExternalLink):  # would open another file on this machine
                raise InputError(f"{path}: HDF5 object {node.name}/{key} links to another file "
                                 f"({link.filename})", "a model file must hold its own data; re-save it")
            if isinstance(link, h5py.SoftLink):
                continue  # points inside the file: visited where it lives
            stack.append(node[key])


_interpreters: dict[str, Any] = {}  # in the child: one interpreter per file, reused by each run


def tflite_in_child(path: Path, budget: int) -> tuple[list[Any], list[str], dict[str, str]]:
    """(In the child.) Build and allocate the interpreter, read its signature, invoke it once on
    zero inputs (what parity will do, so that a crash happens here, before any work)."""
    import numpy as np

    from unframe.converters.frontends._tf.common import make_interpreter, tflite_signature

    with limits.memory_budget(budget):
        interpreter = make_interpreter(path)
        try:  # the getters follow the file's tensor indices and decode its tensor names
            signature = tflite_signature(interpreter)
            details = interpreter.get_input_details()
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: a tensor name in the TFLite model is not UTF-8 text ({exc.reason} at "
                             f"byte {exc.start})", "the file is malformed; re-convert the model") from None
        except (ValueError, TypeError) as exc:  # "Invalid tensor index 0 exceeds max tensor index 0";
            # a negative index the bindings refuse ("TensorName(): incompatible function arguments")
            raise InputError(f"{path}: the TFLite model's inputs and outputs can't be read "
                             f"({str(exc).splitlines()[0][:200]})",
                             "the file is malformed; re-convert the model") from None
        for det in details:
            shape = [1 if int(d) < 0 else int(d) for d in det["shape"]]  # a declared 0 stays 0
            limits.check_array(shape, det["dtype"], f"TFLite input {det['name']}")
            try:
                interpreter.set_tensor(det["index"], np.zeros(shape, dtype=det["dtype"]))
            except ValueError as exc:  # "Cannot set tensor: Dimension mismatch ..."
                raise InputError(f"{path}: the TFLite model's input {det['name']!r} doesn't take a tensor of its "
                                 f"own declared shape ({str(exc).splitlines()[0][:200]})",
                                 "the file is malformed; re-convert the model") from None
        try:
            interpreter.invoke()
            for det in interpreter.get_output_details():
                interpreter.get_tensor(det["index"])
        except (RuntimeError, ValueError):
            pass  # an op refusing zeros is the parity check's business; a crash is the probe's
        return signature


def tflite_run_in_child(path: Path, arrays: dict[str, Any], names: dict[str, str], budget: int) -> list[Any]:
    """(In the child.) Resize to the feed's shapes, run, return the outputs."""
    from unframe.converters.frontends._tf.common import make_interpreter

    with limits.memory_budget(budget):
        key = str(path)
        if key not in _interpreters:
            _interpreters[key] = make_interpreter(path)
        it = _interpreters[key]
        details = it.get_input_details()
        for det in details:
            value = arrays[names.get(det["name"], det["name"])]
            if tuple(det["shape"]) != value.shape:
                it.resize_tensor_input(det["index"], value.shape, strict=False)
        it.allocate_tensors()
        for det in details:
            value = arrays[names.get(det["name"], det["name"])]
            it.set_tensor(det["index"], value.astype(det["dtype"], copy=False))
        it.invoke()
        return [it.get_tensor(det["index"]).copy() for det in it.get_output_details()]
