"""Native readers of TF/Keras files, tried first in a child process (``unframe.sandbox``).

HDF5 (legacy .h5 files, the weights inside a .keras archive) and TFLite's interpreter are C/C++
libraries with a history of crashing on malformed files. Before unframe's own process opens a
file with them, a child opens it the same way: every HDF5 object visited and its data read (sizes
checked against the memory budget first), or the TFLite model built, allocated and invoked once
on zero inputs. A crash there is a typed error; a file the child survives is then loaded here.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

from unframe import limits, sandbox
from unframe.errors import InputError

SANDBOX = "tensorflow"
PROBE_TIMEOUT = 300.0
KERAS_WEIGHTS = "model.weights.h5"


def check_keras_file(path: Path) -> None:
    """A .keras archive (checked as an archive, then its weights) or a legacy .h5 file."""
    from unframe import archives

    if zipfile.is_zipfile(path):
        archives.check_zip(path, "Keras archive")
        with zipfile.ZipFile(path) as zf:
            if KERAS_WEIGHTS not in zf.namelist():
                return  # Keras says what is missing, in its own words
        _call(h5_probe, path, KERAS_WEIGHTS, what=f"HDF5 on the weights of {path.name}")
    else:
        _call(h5_probe, path, None, what=f"HDF5 on {path.name}")


def check_tflite_file(path: Path) -> None:
    _call(tflite_probe, path, what=f"TFLite's interpreter on {path.name}")


def _call(fn: Any, *args: Any, what: str) -> None:
    sandbox.call(SANDBOX, fn, *args, limits.max_memory(), what=what, timeout=PROBE_TIMEOUT,
                 crash_error=InputError, hint="the file is malformed; re-save the model")


# -------------------------------------------------------------------- in the child -------------
def h5_probe(path: Path, member: str | None, budget: int) -> None:
    """Open the HDF5 file (or the archive member), visit every object, read every attribute and
    every dataset whose size fits the budget (a bigger one is refused, as it would be here)."""
    import h5py

    with limits.memory_budget(budget):
        if member is None:
            source: Any = str(path)
        else:
            with zipfile.ZipFile(path) as zf:
                source = io.BytesIO(zf.read(member))
        try:
            with h5py.File(source, "r") as f:
                _visit(path, f)
        except (OSError, ValueError, KeyError, TypeError, RuntimeError):
            return  # HDF5 refused it cleanly: Keras will say so, in its own words


def _visit(path: Path, root: Any) -> None:
    import h5py

    stack = [root]
    while stack:
        node = stack.pop()
        for key in node.attrs:
            node.attrs[key]  # noqa: B018 - reading it is the probe
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


def tflite_probe(path: Path, budget: int) -> None:
    """Build, allocate and invoke the interpreter once on zero inputs."""
    import numpy as np

    from unframe.converters.frontends._tf.native import make_interpreter

    with limits.memory_budget(budget):
        interpreter = make_interpreter(path)
        for det in interpreter.get_input_details():
            shape = [max(int(d), 1) for d in det["shape"]]
            limits.check_array(shape, det["dtype"], f"TFLite input {det['name']}")
            interpreter.set_tensor(det["index"], np.zeros(shape, dtype=det["dtype"]))
        try:
            interpreter.invoke()
        except (RuntimeError, ValueError):
            pass  # an op refusing zeros is the parity check's business; a crash is the probe's
