"""Which TensorRT is installed (``tensorrt`` or ``tensorrt_rtx``), a logger that keeps messages,
and GPU detection through the CUDA driver.

The two modules share their Python API. ``tensorrt`` wins when both import, since it is the one
that makes engines for every NVIDIA GPU; ``tensorrt_rtx`` installs from PyPI and builds on a
CPU-only machine.

GPU detection never touches TensorRT: creating a runtime object without a CUDA driver makes the
lean runtime segfault, so ``cuda_device()`` asks libcuda (``cuInit``, ``cuDeviceGetCount``) first.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import importlib
import importlib.util
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import Any

FLAVOURS = ("tensorrt", "tensorrt_rtx")
DISTRIBUTIONS = {
    "tensorrt": ("tensorrt", "tensorrt-cu12", "tensorrt-cu13", "tensorrt-lean"),
    "tensorrt_rtx": ("tensorrt-rtx-cu12", "tensorrt-rtx-cu13", "tensorrt-rtx"),
}


def installed_flavour() -> str | None:
    """The module name that would be used, found without importing it."""
    for name in FLAVOURS:
        if importlib.util.find_spec(name) is not None:
            return name
    return None


@dataclass
class Printed:
    """Lines the parser's C++ side printed to stderr (e.g. ``Unsupported ONNX data type: STRING
    (8)``), filled in when :func:`stderr_lines` exits."""

    lines: list[str] = field(default_factory=list)


@contextlib.contextmanager
def stderr_lines() -> Iterator[Printed]:
    """Capture what native code writes to file descriptor 2 (the parser prints some refusals
    there, past any logger): kept for the report instead of reaching the terminal."""
    printed = Printed()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to redirect
        yield printed
        return
    with tempfile.TemporaryFile(mode="w+b") as sink:
        sys.stderr.flush()
        os.dup2(sink.fileno(), 2)
        try:
            yield printed
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode("utf-8", "replace")
            printed.lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]


@functools.cache
def load_or_none() -> ModuleType | None:
    """The TensorRT module, or None. An import that fails (a broken wheel) counts as absent."""
    for name in FLAVOURS:
        if importlib.util.find_spec(name) is None:
            continue
        try:
            return importlib.import_module(name)
        except Exception:  # e.g. missing shared libraries: try the other flavour
            continue
    return None


def distribution_versions(flavour: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for dist in DISTRIBUTIONS.get(flavour, ()):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def strongly_typed_flags(trt: ModuleType) -> int:
    """Network creation flags for a strongly typed network (the only kind TensorRT 11 and
    TensorRT-RTX build): precision comes from the graph's types, not builder flags."""
    flag = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    return 0 if flag is None else 1 << int(flag)


def make_logger(trt: ModuleType) -> Any:
    return CollectingLogger(trt)


def CollectingLogger(trt: ModuleType) -> Any:  # noqa: N802 - a factory posing as the class
    """A ``trt.ILogger`` that keeps warnings and errors instead of printing them."""

    class _Collecting(trt.ILogger):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.messages: list[tuple[str, str]] = []

        def log(self, severity: Any, msg: str) -> None:
            level = str(severity).rsplit(".", 1)[-1]
            if level in ("INTERNAL_ERROR", "ERROR", "WARNING"):
                self.messages.append((level, " ".join(str(msg).split())))

        def errors(self) -> list[str]:
            return [m for lvl, m in self.messages if lvl in ("INTERNAL_ERROR", "ERROR")]

    return _Collecting()


@dataclass(frozen=True)
class CudaDevice:
    count: int
    name: str
    compute_capability: str


# TensorRT-RTX builds an engine for a list of compute capabilities; without one set (unframe sets
# none) it is portable across these (NVIDIA's TensorRT-RTX support matrix, 1.0 to 1.7).
RTX_DEFAULT_TARGETS = ("8.6", "8.9", "12.0")
# What ``runs_on`` reads from tensorrt-rtx 1.7 (the pinned release), for the docs, which are
# written without importing it; a test holds the two equal.
RTX_RUNS_ON = ("7.5", "8.0", "8.6", "8.9", "12.0", "12.1")


def _cc_key(cc: str) -> tuple[int, ...]:
    return tuple(int(part) for part in cc.split("."))


def runs_on(trt: ModuleType) -> tuple[str, ...] | None:
    """The compute capabilities whose GPUs ``trt`` runs engines on, or None for no limit known.

    TensorRT-RTX names them in its ``ComputeCapability`` enum (1.7: SM75, SM80, SM86, SM89,
    SM120, SM121); on any other GPU its runtime refuses every engine, whatever it was built for
    ("TensorRT-RTX does not support this compute capability": seen on an H100, compute 9.0, by
    bench/trt_gpu.py). NVIDIA's tensorrt builds for the GPU it runs on."""
    enum = getattr(trt, "ComputeCapability", None)
    if trt.__name__ != "tensorrt_rtx" or enum is None:
        return None
    names = [n for n in dir(enum) if n.startswith("SM") and n[2:].isdigit() and len(n) >= 4]
    return tuple(sorted({f"{n[2:-1]}.{n[-1]}" for n in names}, key=_cc_key))


def engine_gap(trt: ModuleType, device: CudaDevice) -> str | None:
    """Why ``trt`` can't run any engine on ``device`` (one line), or None when it can."""
    supported = runs_on(trt)
    if supported is None or device.compute_capability in supported:
        return None
    return (f"{trt.__name__} {trt.__version__} runs engines only on compute capability "
            f"{', '.join(supported)}, and this GPU ({device.name}) is {device.compute_capability}: "
            "the engine is built for other GPUs and can't run here; NVIDIA's tensorrt builds and "
            "runs engines for this one")


def libcuda() -> ctypes.CDLL | None:
    for name in ("libcuda.so.1", "libcuda.so", ctypes.util.find_library("cuda") or ""):
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


@functools.cache
def cuda_device() -> CudaDevice | str:
    """Device 0 through the CUDA driver, or the reason there is none (a one-line string)."""
    lib = libcuda()
    if lib is None:
        return "no CUDA driver (libcuda.so.1 not found)"
    rc = lib.cuInit(0)
    if rc != 0:
        return f"the CUDA driver failed to initialise (cuInit returned {rc})"
    count = ctypes.c_int(0)
    rc = lib.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0 or count.value < 1:
        return f"the CUDA driver sees no device (cuDeviceGetCount: rc={rc}, count={count.value})"
    device = ctypes.c_int(0)
    lib.cuDeviceGet(ctypes.byref(device), 0)
    name = ctypes.create_string_buffer(256)
    lib.cuDeviceGetName(name, 256, device)
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, _MINOR = 76
    lib.cuDeviceGetAttribute(ctypes.byref(major), 75, device)
    lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, device)
    return CudaDevice(count.value, name.value.decode(errors="replace"),
                      f"{major.value}.{minor.value}")
