"""ExecuTorch's Python runtime (``executorch.runtime``) as a parity runner.

The runner is fed named numpy arrays and returns named numpy outputs. A program's method takes
the flattened user inputs in order, tensors and the constants torch.export baked in alike (an
``int`` argument is an input of the method too), so the runner keeps the leaf layout the
conversion recorded (``leaves``: ``{"input": name}`` or ``{"value": constant}``). Dynamic dims
are bounded: ExecuTorch plans memory for the largest shape, and a feed past a bound is refused
here with the bound named, not by the runtime (which logs a line and returns error 0x10).

A program unframe did not just write is checked before it is loaded here: its header
(``pte.read_header``), then one load in a sandboxed child (``probe_program``), since a bad file
can abort the process. Importing ``executorch.runtime`` imports torch (the runtime links
libtorch): it happens on the first load, never at module import.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from unframe import quiet as native_logs
from unframe.converters.backends.executorch import pte
from unframe.errors import InputError, UsageError
from unframe.validate.runner import Runner, TensorSpec

METHOD = "forward"
SANDBOX = "executorch"
PROBE_TIMEOUT = 300.0  # the child's import of torch and ExecuTorch takes 5-15 s on a busy box
# c10's ScalarType codes, as MethodMeta's TensorInfo.dtype() gives them
SCALAR_TYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
                7: "float64", 11: "bool", 15: "bfloat16"}
# loggers that speak on the import of executorch/torchao (torchao's CUDA kernels it can't load
# on a CPU build, torch's pytree deprecation) and while lowering
NOISY_LOGGERS = ("torchao", "torch.utils._pytree", "executorch", "torch.export", "torch._export",
                 "torch._dynamo", "torch.fx.experimental.symbolic_shapes")


@contextlib.contextmanager
def quiet() -> Iterator[io.StringIO]:
    """ExecuTorch's chatter kept off the user's terminal: its C++ log lines (cpuinfo at the
    runtime's start, a kernel's failed check: they go through Python's ``sys.stderr``), native
    output on fd 2, Python warnings, the loggers above and anything printed. Yields the buffer
    the log lines went to (``failure_lines`` reads it). ``--debug`` lets it all through."""
    log = io.StringIO()
    if native_logs.debug_enabled():
        yield log
        return
    loggers = [logging.getLogger(n) for n in NOISY_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(log), native_logs.quiet_native_logs():
            warnings.simplefilter("ignore")
            yield log
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


@contextlib.contextmanager
def run_log() -> Iterator[io.StringIO]:
    """Around a method's execution: only Python's ``sys.stderr`` (where the runtime writes a
    failed check's lines) is caught, which costs microseconds; ``quiet`` also moves fd 2 to a
    temporary file, about 0.3 ms a call (measured on the tiny CNN: 0.43 ms against 0.09 ms)."""
    log = io.StringIO()
    if native_logs.debug_enabled():
        yield log
        return
    with contextlib.redirect_stderr(log):
        yield log


# the runtime's log lines that say why a method failed (the exception says only "error 0x12")
_WHY = ("Check failed", "KernelCall failed", "Attempted to resize", "Missing operator", "failed")


def failure_lines(log: io.StringIO, limit: int = 2) -> str:
    """The first runtime log lines explaining a failure, without their ``[file.cpp:line]``."""
    found = []
    for line in log.getvalue().splitlines():
        text = line.split("] ", 1)[-1].strip() if line.startswith("[") else line.strip()
        if text and any(w in text for w in _WHY) and text not in found:
            found.append(text.rstrip(": "))
    return "; ".join(found[:limit])


def runtime() -> Any:
    """ExecuTorch's runtime singleton (imported quietly on first use)."""
    with quiet():
        from executorch.runtime import Runtime

        return Runtime.get()


def runtime_version() -> str:
    from unframe.distributions import dist_version

    return dist_version("executorch") or "?"


# ------------------------------------------------------------------------------ the runner ----
class ExecuTorchRunner(Runner):
    """One method of a program, loaded from ``path``. ``io`` is the sidecar's record (inputs,
    outputs, leaves, bounds); without one, the method's own metadata names the I/O
    (``input_0``..., ``output_0``...). ``vouched``: unframe wrote the file in this process, so
    the header check and the sandboxed probe are skipped."""

    def __init__(self, path: Path, io_record: Mapping[str, Any] | None = None, *,
                 vouched: bool = False) -> None:
        self.path = Path(path)
        if not vouched:
            pte.read_header(self.path)
            meta = probe_in_child(self.path)
            io_record = io_record or record_from_meta(meta)
        with quiet():
            program = runtime().load_program(self.path)
            method_name = str((io_record or {}).get("method") or METHOD)
            if method_name not in program.method_names:
                raise InputError(f"{self.path}: the program has no method {method_name!r}",
                                 f"its methods: {', '.join(sorted(program.method_names))}")
            self._method = program.load_method(method_name)
        self._program = program  # the method's memory lives as long as the program
        if io_record is None:
            io_record = record_from_meta(meta_dict(self._method.metadata))
        self.io = dict(io_record)
        self.name = f"executorch {runtime_version()} ({self.io.get('delegate') or 'portable'})"

    def input_specs(self) -> list[TensorSpec]:
        return [TensorSpec(t["name"], tuple(t["shape"]), t["dtype"]) for t in self.io["inputs"]]

    def output_names(self) -> list[str]:
        return [t["name"] for t in self.io["outputs"]]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        values = self._method_inputs(feeds)
        with run_log() as log:
            try:
                outs = self._method.execute(values)
            except RuntimeError as exc:
                why = failure_lines(log)
                raise RuntimeError(f"ExecuTorch could not run {self.path.name}: {exc}"
                                   + (f" ({why})" if why else "")) from exc
        tensors = [o for o in outs if isinstance(o, torch.Tensor)]
        names = self.output_names()
        if len(tensors) != len(names):
            raise RuntimeError(f"the program returned {len(tensors)} tensors for {len(names)} outputs")
        return {n: _numpy(t) for n, t in zip(names, tensors, strict=True)}

    def _method_inputs(self, feeds: Mapping[str, np.ndarray]) -> list[Any]:
        import torch

        specs = {t["name"]: t for t in self.io["inputs"]}
        values: list[Any] = []
        for leaf in self.io.get("leaves") or [{"input": n} for n in specs]:
            if "input" not in leaf:
                values.append(leaf.get("value"))
                continue
            name = leaf["input"]
            if name not in feeds:
                raise UsageError(f"no feed for input {name!r}", f"inputs: {', '.join(specs)}")
            array = np.asarray(feeds[name])
            self._check_shape(specs[name], array.shape)
            array = np.ascontiguousarray(array.astype(specs[name]["dtype"], copy=False))
            values.append(torch.from_numpy(array.copy()))  # the method may write its input
        return values

    def _check_shape(self, spec: Mapping[str, Any], shape: Sequence[int]) -> None:
        bounds = self.io.get("bounds") or {}
        declared = spec["shape"]
        if len(declared) != len(shape):
            raise UsageError(f"input {spec['name']!r} has rank {len(shape)}; the program takes "
                             f"rank {len(declared)} ({_shape_text(declared)})")
        for axis, (want, got) in enumerate(zip(declared, shape, strict=True)):
            lo, hi = bounds.get(want, (None, None)) if isinstance(want, str) else (want, want)
            if lo is not None and not lo <= int(got) <= hi:
                allowed = f"{lo}..{hi}" if lo != hi else str(lo)
                raise UsageError(f"input {spec['name']!r} axis {axis} is {got}; the program takes "
                                 f"{allowed} there ({_shape_text(declared)})",
                                 "convert again with --shapes giving the sizes it must take")


def _shape_text(shape: Sequence[Any]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _numpy(t: Any) -> np.ndarray:
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    return t.numpy().copy()  # the runtime reuses its output buffers on the next call


# ------------------------------------------------------------------- foreign files, probed ----
def probe_program(path: str) -> dict[str, Any]:
    """In a sandboxed child: load the program and its methods, and return their metadata as
    plain values (``meta_dict``). A file that crashes the runtime kills the child, not us."""
    with quiet():
        program = runtime().load_program(Path(path))
        methods = {}
        for name in sorted(program.method_names):
            methods[name] = meta_dict(program.load_method(name).metadata)
    return {"methods": methods}


def probe_in_child(path: Path) -> dict[str, Any]:
    from unframe import sandbox

    try:
        result: dict[str, Any] = sandbox.call(
            SANDBOX, probe_program, str(path), what=f"ExecuTorch loading {path.name}",
            timeout=PROBE_TIMEOUT, crash_error=InputError,
            hint="the file is not a program this ExecuTorch can load: convert the torch model again")
    except sandbox.SandboxedFailure as exc:
        raise InputError(f"{path}: ExecuTorch can't load it ({exc})",
                         "convert the torch model again") from exc
    return result


def meta_dict(meta: Any) -> dict[str, Any]:
    """A MethodMeta as plain values: each input and output's dtype and (upper-bound) sizes;
    a non-tensor input is recorded as such (MethodMeta refuses to describe it)."""
    def tensors(count: int, get: Any) -> list[dict[str, Any]]:
        out = []
        for i in range(count):
            try:
                info = get(i)
            except (IndexError, RuntimeError):
                out.append({"tensor": False})
                continue
            out.append({"tensor": True, "dtype": SCALAR_TYPES.get(int(info.dtype()), str(info.dtype())),
                        "sizes": [int(d) for d in info.sizes()]})
        return out

    return {"name": meta.name(), "inputs": tensors(meta.num_inputs(), meta.input_tensor_meta),
            "outputs": tensors(meta.num_outputs(), meta.output_tensor_meta)}


def record_from_meta(probed: Mapping[str, Any]) -> dict[str, Any]:
    """An I/O record for a program with no sidecar, from its method's metadata: sizes are the
    upper bounds the memory plan holds, so they are given as fixed."""
    meta = probed["methods"].get(METHOD) if "methods" in probed else probed
    if meta is None:
        raise InputError(f"the program has no {METHOD!r} method and no unframe sidecar naming "
                         "another", "convert the torch model again with unframe")
    if not all(t["tensor"] for t in meta["inputs"]):
        raise InputError("the program takes non-tensor inputs and has no unframe sidecar "
                         "recording their values", "keep the .pte.json beside the program")
    inputs = [{"name": f"input_{i}", "dtype": t["dtype"], "shape": t["sizes"]}
              for i, t in enumerate(meta["inputs"])]
    outputs = [{"name": f"output_{i}", "dtype": t.get("dtype", "?"), "shape": t.get("sizes", [])}
               for i, t in enumerate(meta["outputs"])]
    return {"method": meta["name"], "inputs": inputs, "outputs": outputs,
            "leaves": [{"input": t["name"]} for t in inputs], "bounds": {}}


def runner_for_file(path: Path | str) -> ExecuTorchRunner:
    """A runner of a ``.pte`` from outside this process: its header checked and its load tried
    in a child first; the sidecar beside it (when unframe wrote one) names the I/O."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file", "check the path")
    return ExecuTorchRunner(path, pte.read_sidecar(path))
