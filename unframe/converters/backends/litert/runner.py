"""The .tflite artifact on ai-edge-litert's interpreter (XNNPACK, its default delegate), fed and
read by the source's input and output names (the artifact's ``unframe.io`` record).

A .tflite unframe just converted runs in this process. One it did not write (a file from
outside) runs in a child process (``unframe.sandbox``), as the TF frontend runs a .tflite
source: TFLite's native code has crashed on malformed files, and a crash there is a one-line
``InputError`` here. The child loads ai-edge-litert only (0.2 s), never TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from unframe import limits, sandbox
from unframe.distributions import dist_version
from unframe.errors import InputError
from unframe.validate.runner import Runner, TensorSpec

SANDBOX = "litert"
BASE_SECONDS = 5.0  # a child's time to build the interpreter, plus a read at 20 MB/s


class Session:
    """One interpreter and its I/O map. Inputs are cast to the interpreter's dtypes (litert-torch
    narrows int64 to int32) and resized to each feed's shape (dynamic axes); outputs come back in
    the source's dtypes."""

    def __init__(self, content: bytes, io: Mapping[str, Any] | None, threads: int | None = None) -> None:
        from ai_edge_litert.interpreter import Interpreter

        from unframe.quiet import quiet_native_logs

        with quiet_native_logs():  # "INFO: Created TensorFlow Lite XNNPACK delegate for CPU."
            self.it = Interpreter(model_content=content, num_threads=threads)
            self.it.allocate_tensors()
        self.inputs = {d["name"]: d for d in self.it.get_input_details()}
        self.outputs = {d["name"]: d for d in self.it.get_output_details()}
        self.io = dict(io) if io is not None else derived_io(self.it)
        for entry in [*self.io["inputs"], *self.io["outputs"]]:
            if entry["tensor"] not in self.inputs and entry["tensor"] not in self.outputs:
                raise InputError(f"the I/O record names tensor {entry['tensor']!r}, which the model "
                                 "does not have as an input or output", "convert the model again")
        self.shapes = {name: tuple(d["shape"]) for name, d in self.inputs.items()}

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        from unframe.quiet import quiet_native_logs

        arrays = {}
        for entry in self.io["inputs"]:
            det = self.inputs[entry["tensor"]]
            value = np.asarray(feeds[entry["name"]])
            if _quantized(det) and value.dtype.kind == "f":
                value = _quantize(value, det)
            arrays[det["index"]] = np.ascontiguousarray(value.astype(det["dtype"], copy=False))
        changed = {name: arrays[det["index"]].shape for name, det in self.inputs.items()
                   if arrays[det["index"]].shape != self.shapes[name]}
        if changed:  # resizing logs an "ERROR:" line about a deprecated XNNPACK flag: captured
            with quiet_native_logs():
                for name, shape in changed.items():
                    self.it.resize_tensor_input(self.inputs[name]["index"], list(shape), strict=False)
                    self.shapes[name] = shape
                self.it.allocate_tensors()
        for index, value in arrays.items():
            self.it.set_tensor(index, value)
        self.it.invoke()
        out = {}
        for entry in self.io["outputs"]:
            det = self.outputs[entry["tensor"]]
            value = self.it.get_tensor(det["index"]).copy()
            dtype = entry.get("dtype")
            if _quantized(det) and dtype and np.dtype(dtype).kind == "f":
                scale, zero = det["quantization"]
                value = (value.astype(np.float32) - zero) * np.float32(scale)
            out[entry["name"]] = value if not dtype or value.dtype == np.dtype(dtype) else value.astype(dtype)
        return out

    def specs(self) -> list[TensorSpec]:
        specs = []
        for entry in self.io["inputs"]:
            det = self.inputs[entry["tensor"]]
            shape = tuple(None if int(d) < 0 else int(d) for d in det["shape_signature"])
            specs.append(TensorSpec(entry["name"], shape, entry.get("dtype") or np.dtype(det["dtype"]).name))
        return specs


def _quantized(det: Mapping[str, Any]) -> bool:
    """An integer tensor with one scale (a quantized model's int8 input or output, as
    litert-torch's PT2E conversion writes them): the float values it stands for are
    ``(q - zero_point) * scale``."""
    scale, _ = det.get("quantization", (0.0, 0))
    return np.dtype(det["dtype"]).kind in "iu" and bool(scale)


def _quantize(value: np.ndarray, det: Mapping[str, Any]) -> np.ndarray:
    scale, zero = det["quantization"]
    info = np.iinfo(det["dtype"])
    return np.clip(np.round(value / scale) + zero, info.min, info.max).astype(det["dtype"])


def derived_io(it: Any) -> dict[str, Any]:
    """A file unframe did not write: its one signature's keys name the I/O, else tensor names."""
    names: dict[str, str] = {}
    signatures = it.get_signature_list()
    if len(signatures) == 1:
        runner = it.get_signature_runner(next(iter(signatures)))
        for details in (runner.get_input_details(), runner.get_output_details()):
            names.update({det["name"]: key for key, det in details.items()})

    def entry(det: dict[str, Any]) -> dict[str, Any]:
        return {"name": names.get(det["name"], det["name"]), "tensor": det["name"],
                "dtype": np.dtype(det["dtype"]).name}

    return {"inputs": [entry(d) for d in it.get_input_details()],
            "outputs": [entry(d) for d in it.get_output_details()]}


def runtime_name() -> str:
    return f"ai-edge-litert {dist_version('ai-edge-litert') or '?'} interpreter (XNNPACK)"


class LiteRTRunner(Runner):
    """``content``: the bytes convert() made (run here). ``path`` alone: a file from outside
    (run in a child)."""

    def __init__(self, io: Mapping[str, Any] | None, *, content: bytes | None = None,
                 path: Path | None = None, threads: int | None = None) -> None:
        if content is None and path is None:
            raise ValueError("LiteRTRunner needs the model's bytes or its path")
        self.name = runtime_name() + ("" if content is not None else " in a child process")
        self._content, self._path, self._io, self._threads = content, path, io, threads
        self._session: Session | None = None
        self._specs: list[TensorSpec] | None = None

    def _here(self) -> Session:
        if self._session is None:
            assert self._content is not None
            self._session = Session(self._content, self._io, self._threads)
        return self._session

    def input_specs(self) -> list[TensorSpec]:
        if self._content is not None:
            return self._here().specs()
        if self._specs is None:
            self._specs = _call(describe_in_child, self._path, self._io)
        return list(self._specs)

    def output_names(self) -> list[str] | None:
        if self._io is not None:
            return [e["name"] for e in self._io["outputs"]]
        if self._content is not None:
            return [e["name"] for e in self._here().io["outputs"]]
        return None

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._content is not None:
            return self._here().run(feeds)
        left = limits.remaining()  # inside parity's time limit the child gets what is left
        arrays = {k: np.asarray(v) for k, v in feeds.items()}
        return _call(run_in_child, self._path, self._io, arrays,  # type: ignore[no-any-return]
                     timeout=max(left, 0.1) if left is not None else None)

    def close(self) -> None:
        self._session = None


def _call(fn: Any, path: Path | None, *args: Any, timeout: float | None = -1.0) -> Any:
    assert path is not None
    seconds = BASE_SECONDS + path.stat().st_size / 20e6
    return sandbox.call(SANDBOX, fn, path, *args, limits.max_memory(), what=f"LiteRT's interpreter on {path.name}",
                        preload=import_litert, zygote=True, timeout=seconds if timeout == -1.0 else timeout,
                        crash_error=InputError, hint="the file is malformed; convert the model again")


# -------------------------------------------------------------------- in the child -------------
def import_litert() -> None:
    import ai_edge_litert.interpreter  # noqa: F401


_sessions: dict[str, Session] = {}  # in the child: one interpreter per file, reused by each run


def _child_session(path: Path, io: Mapping[str, Any] | None) -> Session:
    key = str(path)
    if key not in _sessions:
        try:
            _sessions[key] = Session(path.read_bytes(), io)
        except InputError:
            raise
        except Exception as exc:  # "The model is not a valid Flatbuffer buffer", unreadable details
            raise InputError(f"{path}: LiteRT can't load it ({str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__})",
                             "the file is damaged or not a TFLite model; convert the model again") from None
    return _sessions[key]


def describe_in_child(path: Path, io: Mapping[str, Any] | None, budget: int) -> list[TensorSpec]:
    """(In the child.) Load the model and invoke it once on zeros at its declared shapes, so that
    a crash happens here, before parity's work; return its input specs."""
    with limits.memory_budget(budget):
        session = _child_session(path, io)
        specs = session.specs()
        zeros = {}
        for spec, entry in zip(specs, session.io["inputs"], strict=True):
            det = session.inputs[entry["tensor"]]
            shape = [1 if d is None else d for d in spec.shape or ()]
            limits.check_array(shape, det["dtype"], f"TFLite input {spec.name}")
            zeros[spec.name] = np.zeros(shape, dtype=det["dtype"])
        try:
            session.run(zeros)
        except (RuntimeError, ValueError):
            pass  # an op refusing zeros is parity's business; a crash is the probe's
        return specs


def run_in_child(path: Path, io: Mapping[str, Any] | None, arrays: dict[str, np.ndarray], budget: int
                 ) -> dict[str, np.ndarray]:
    with limits.memory_budget(budget):
        return _child_session(path, io).run(arrays)
