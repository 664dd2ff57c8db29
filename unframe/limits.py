"""Resource limits, checked before anything is allocated or run.

A hostile or broken model must end in a typed error, not in ``MemoryError`` or a process that
never returns. What is checked here, each before the work it guards:

* tensor data: the bytes a tensor's dims x dtype need against the bytes present (inline or in
  external data), so that no reader reshapes a short buffer or reads past one;
* allocations unframe makes from a model's numbers (parity inputs, constants a pass builds from
  a shape) against a memory budget: ``--max-memory``, by default half of the memory available;
* what running the model for parity would need: its weights against the same budget, and Loops
  whose constant trip count runs without an exit condition (the limits are here; the check,
  which reads the model's weights, is ``unframe.validate.runnable``);
* nesting: subgraphs inside subgraphs, and model-local functions calling each other (a cycle
  would recurse forever in every inliner);
* parity run time (``--parity-timeout``): a stage that runs longer stops with a clear message.

Every refusal is a ``ResourceLimitError`` (exit code 3) naming the tensor, input or node, how
much it would take, the limit, and what to do.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from unframe.errors import InputError, ResourceLimitError, UsageError

if TYPE_CHECKING:
    import onnx

MAX_SUBGRAPH_DEPTH = 32  # If/Loop/Scan bodies inside each other; exporters stay under ~5
MAX_FUNCTION_DEPTH = 32  # model-local functions calling functions
MAX_LOOP_TRIPS = 10_000_000  # a constant-count Loop parity would run (ORT: ~1 us per empty trip)
DEFAULT_MEMORY_FRACTION = 0.5  # of the memory available when the run starts
FALLBACK_MEMORY = 8 << 30  # when the system can't say what is available
DEFAULT_PARITY_SECONDS = 900.0

_budget: contextvars.ContextVar[int | None] = contextvars.ContextVar("unframe_memory_budget", default=None)
# (monotonic deadline, message, hint) of the innermost time limit
_deadline: contextvars.ContextVar[tuple[float, str, str] | None] = contextvars.ContextVar(
    "unframe_deadline", default=None)


# ------------------------------------------------------------------------------ sizes ------------
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
          "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "t": 1000**4, "tb": 1000**4, "tib": 1024**4}


def size_of(text: str) -> int:
    """``512MiB``, ``4GB``, ``1.5g`` or a plain count of bytes, as bytes."""
    m = _SIZE.match(text)
    if not m or (m.group(2) or "").lower() not in _UNITS:
        raise UsageError(f"bad size {text!r}", "use e.g. 512MiB or 4GiB")
    return int(float(m.group(1)) * _UNITS[(m.group(2) or "").lower()])


def human(n: float) -> str:
    """Bytes for messages: 1.5 GiB, 7.1 PiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} EiB"


def available_memory() -> int | None:
    """Bytes of memory available now (Linux's MemAvailable), or None when unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def default_max_memory() -> int:
    free = available_memory()
    return int(free * DEFAULT_MEMORY_FRACTION) if free else FALLBACK_MEMORY


def max_memory() -> int:
    """The memory budget in force: ``--max-memory`` when set, else the default fraction."""
    budget = _budget.get()
    return budget if budget is not None else default_max_memory()


def parse_size(value: Any, flag: str = "--max-memory") -> int:
    """``4GiB``, ``512MB``, ``1e9`` or an int of bytes."""
    if isinstance(value, bool):
        raise UsageError(f"bad {flag} {value!r}", "use a size like 4GiB or 512MiB")
    if isinstance(value, (int, float)):
        size = int(value)
    else:
        try:
            size = size_of(str(value))
        except UsageError:
            raise UsageError(f"bad {flag} {value!r}", "use a size like 4GiB or 512MiB") from None
    if size <= 0:
        raise UsageError(f"bad {flag} {value!r}: it must be positive", "use a size like 4GiB")
    return size


def parse_seconds(value: Any, flag: str = "--parity-timeout") -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"bad {flag} {value!r}", "give seconds, e.g. 600") from None
    if not seconds > 0 or math.isinf(seconds):
        raise UsageError(f"bad {flag} {value!r}: it must be a positive number of seconds",
                         "give seconds, e.g. 600")
    return seconds


@contextlib.contextmanager
def memory_budget(limit: int | None) -> Iterator[None]:
    """Within the block, ``max_memory()`` is ``limit`` (None: the default fraction)."""
    token = _budget.set(limit)
    try:
        yield
    finally:
        _budget.reset(token)


def shape_bytes(shape: Iterable[Any], itemsize: float) -> int:
    """Bytes of a dense array of ``shape`` (exact, in Python ints: no overflow)."""
    n = 1
    for d in shape:
        n *= max(int(d), 0)
    return math.ceil(n * itemsize)


def check_alloc(nbytes: int, what: str, hint: str = "", detail: str = "") -> None:
    """Refuse to allocate ``nbytes`` for ``what`` when it exceeds the memory budget; ``detail``
    follows the figures (the terminal cuts long messages: the figures come first)."""
    limit = max_memory()
    if nbytes > limit:
        raise ResourceLimitError(
            f"{what} would take {human(nbytes)}, more than the {human(limit)} allowed"
            + (f" ({detail})" if detail else ""),
            hint or "raise --max-memory (max_memory=) if the machine has the memory")


def check_stage_memory(nbytes: int, what: str, hint: str = "") -> None:
    """Refuse, before it starts, a stage whose working memory (estimated from the weights, by a
    factor measured in bench/) would not fit: against ``--max-memory`` when given, else against
    the memory available now (the default fraction is the budget of what unframe allocates from
    a model's numbers, not of a converter the user asked for). The OOM killer gives no message."""
    explicit = _budget.get()
    limit = explicit if explicit is not None else available_memory()
    if limit is None or nbytes <= limit:
        return
    raise ResourceLimitError(
        f"{what} needs about {human(nbytes)}, more than the {human(limit)} "
        + ("allowed (--max-memory)" if explicit is not None else "of memory available"),
        hint or "free memory or use a machine with more; --max-memory raises the limit when the "
                "estimate is too high")


def check_array(shape: Iterable[Any], dtype: Any, what: str, hint: str = "") -> None:
    """``check_alloc`` for a numpy array of ``shape`` and ``dtype``, before creating it."""
    import numpy as np

    shape = tuple(shape)
    if any(int(d) < 0 for d in shape):
        raise InputError(f"{what} has a negative dimension {list(shape)}", "the model is broken; re-export it")
    itemsize = np.dtype(dtype).itemsize if np.dtype(dtype).kind != "O" else 64
    spanned = itemsize  # numpy refuses a shape whose non-zero dims overflow, even with a 0 dim
    for d in shape:
        spanned *= max(int(d), 1)
    if spanned > np.iinfo(np.intp).max:
        raise InputError(f"{what} has dimensions no array can have {list(shape)[:8]}",
                         "the model is broken; re-export it or give the input real dimensions")
    check_alloc(shape_bytes(shape, itemsize), f"{what} (shape {_short_shape(shape)})", hint)


def _short_shape(shape: tuple[Any, ...]) -> str:
    text = "x".join(str(int(d)) for d in shape[:8]) + ("x..." if len(shape) > 8 else "")
    return text or "scalar"


# ---------------------------------------------------------------------- tensor data ------------
def tensor_bits(data_type: int) -> int | None:
    """Bits per element of an ONNX TensorProto data type; None for STRING; InputError if unknown."""
    import onnx_ir as ir

    if data_type == 8:  # STRING
        return None
    try:
        return int(ir.DataType(data_type).bitwidth)
    except (ValueError, TypeError):
        raise InputError(f"unknown tensor data type {data_type}", "the model is broken or too new "
                         "for the installed onnx; re-export it") from None


# TensorProto fields holding typed data (when raw_data is empty), and values per element.
_FIELD_OF = {1: ("float_data", 1), 14: ("float_data", 2), 11: ("double_data", 1), 15: ("double_data", 2),
             7: ("int64_data", 1), 12: ("uint64_data", 1), 13: ("uint64_data", 1), 8: ("string_data", 1)}


def tensor_elements(t: onnx.TensorProto, where: str) -> int:
    n = 1
    for d in t.dims:
        if d < 0:
            raise InputError(f"{where}: tensor {t.name!r} has a negative dimension {list(t.dims)}",
                             "the model is broken; re-export it")
        n *= d
    return n


def tensor_nbytes(t: onnx.TensorProto, where: str) -> int | None:
    """Bytes ``t``'s dims and type need in raw (and external) form; None for strings."""
    bits = tensor_bits(t.data_type) if t.data_type else None
    if t.data_type == 0:
        raise InputError(f"{where}: tensor {t.name!r} has no data type", "the model is broken; re-export it")
    n = tensor_elements(t, where)
    return None if bits is None else math.ceil(n * bits / 8)


_DATA_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


def check_inline_tensor(t: onnx.TensorProto, where: str) -> None:
    """The data stored in the file matches the dims x dtype the tensor declares, in the one field
    its type is stored in (raw_data, or the typed field of its type)."""
    n = tensor_elements(t, where)
    need = tensor_nbytes(t, where)
    field, per = _FIELD_OF.get(t.data_type, ("int32_data", 1))
    stray = [f for f in _DATA_FIELDS if f != field and len(getattr(t, f))]
    has_raw = t.HasField("raw_data")  # set but empty still counts: readers take raw_data then
    if stray or (has_raw and len(getattr(t, field))):
        raise InputError(f"{where}: tensor {t.name!r} of type {_type_name(t.data_type)} holds data in "
                         f"{(stray or [field])[0]}, where its type is not stored", "the file is corrupt; re-export the model")
    if has_raw:
        if need is None:
            raise InputError(f"{where}: string tensor {t.name!r} has raw data", "the model is broken; re-export it")
        if len(t.raw_data) != need:
            raise _mismatch(where, t, need, f"{len(t.raw_data)} bytes")
        return
    count = len(getattr(t, field))
    if t.data_type not in _FIELD_OF and need is not None and tensor_bits(t.data_type) < 8:
        expected = need  # sub-byte types: one packed byte per int32_data entry
    else:
        expected = n * per
    if count != expected:
        raise _mismatch(where, t, expected, f"{count} values in {field}")


def _type_name(data_type: int) -> str:
    import onnx

    try:
        return onnx.TensorProto.DataType.Name(data_type)
    except ValueError:
        return str(data_type)


def _mismatch(where: str, t: onnx.TensorProto, need: int, present: str) -> InputError:
    unit = "bytes" if "values" not in present else "values"
    return InputError(f"{where}: tensor {t.name!r} declares shape {list(t.dims)} ({need} {unit}) but "
                      f"holds {present}", "the file is corrupt or truncated; re-export the model")


def check_external_length(t: onnx.TensorProto, where: str, offset: int, length: int | None,
                          file_size: int, location: str) -> tuple[int, int]:
    """The external range a tensor reads, checked against its dims x dtype and the file's size.
    Returns (start, end)."""
    need = tensor_nbytes(t, where)
    if need is None:
        raise InputError(f"{where}: string tensor {t.name!r} keeps its data externally",
                         "strings can't be external data; re-export the model")
    end = offset + (length if length is not None else need)
    if end > file_size:
        raise InputError(f"{where}: tensor {t.name!r} has external data past the end of {location} (needs "
                         f"{end} bytes, file has {file_size})", "the data file is truncated; re-export it")
    if length is not None and length != need:
        raise _mismatch(where, t, need, f"{length} bytes in {location}")
    return offset, end


def check_sparse(sparse: onnx.SparseTensorProto, where: str) -> None:
    """A sparse tensor's values and indices hold what they declare, and every index lies
    inside the dense shape (a runtime densifying it would write out of bounds otherwise)."""
    import numpy as np
    from onnx import numpy_helper

    values, indices = sparse.values, sparse.indices
    name = values.name or "?"
    dense = 1
    for d in sparse.dims:
        if d < 0:
            raise InputError(f"{where}: sparse tensor {name!r} has a negative dimension", "re-export the model")
        dense *= d
    for part in (values, indices):
        check_inline_tensor(part, where)
    nnz = values.dims[0] if len(values.dims) == 1 else -1
    shape_ok = nnz >= 0 and (list(indices.dims) in ([nnz], [nnz, len(sparse.dims)]))
    if not shape_ok or indices.data_type != 7:
        raise InputError(f"{where}: sparse tensor {name!r} has values {list(values.dims)} and int64 "
                         f"indices {list(indices.dims)} that don't fit its shape {list(sparse.dims)}",
                         "the model is broken; re-export it")
    idx = numpy_helper.to_array(indices).astype(np.int64, copy=False)
    bounds = np.array([dense] if idx.ndim == 1 else list(sparse.dims), dtype=object)
    if idx.size and (idx.min() < 0 or np.any(idx >= bounds.astype(np.float64))):
        raise InputError(f"{where}: sparse tensor {name!r} has an index outside its shape "
                         f"{list(sparse.dims)}", "the model is broken; re-export it")


# ------------------------------------------------------------------- graph structure -----------
def check_nesting(proto: onnx.ModelProto, where: str) -> None:
    """Subgraphs nested deeper than MAX_SUBGRAPH_DEPTH, and model-local functions that call
    themselves (directly or through others) or nest deeper than MAX_FUNCTION_DEPTH."""
    _subgraph_depth(proto.graph, where, 0)
    for f in proto.functions:
        for node in f.node:
            for g in _subgraphs(node):
                _subgraph_depth(g, where, 1)
    _function_depth(proto, where)


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for a in node.attribute:
        if a.HasField("g"):
            yield a.g
        yield from a.graphs


def _subgraph_depth(graph: onnx.GraphProto, where: str, depth: int) -> None:
    # an explicit stack: a hostile depth must not hit Python's recursion limit first
    stack = [(graph, depth)]
    while stack:
        g, d = stack.pop()
        if d > MAX_SUBGRAPH_DEPTH:
            raise ResourceLimitError(f"{where}: subgraphs are nested more than {MAX_SUBGRAPH_DEPTH} deep "
                                     f"(graph {g.name!r})", "flatten the control flow and re-export")
        for node in g.node:
            stack.extend((sub, d + 1) for sub in _subgraphs(node))


def _function_depth(proto: onnx.ModelProto, where: str) -> None:
    local = {(f.domain, f.name): f for f in proto.functions}
    if not local:
        return
    calls = {key: {(n.domain, n.op_type) for n in _function_nodes(f) if (n.domain, n.op_type) in local}
             for key, f in local.items()}
    depth: dict[tuple[str, str], int] = {}
    for start in calls:
        _walk_calls(start, calls, depth, where)


def _function_nodes(f: onnx.FunctionProto) -> Iterator[onnx.NodeProto]:
    stack = list(f.node)
    while stack:
        n = stack.pop()
        yield n
        for g in _subgraphs(n):
            stack.extend(g.node)


def _walk_calls(start: tuple[str, str], calls: dict[tuple[str, str], set[tuple[str, str]]],
                depth: dict[tuple[str, str], int], where: str) -> None:
    """Depth of the call tree under ``start`` (memoized), by an explicit DFS that finds cycles."""
    on_path: set[tuple[str, str]] = set()
    stack: list[tuple[tuple[str, str], Iterator[tuple[str, str]]]] = []

    def enter(key: tuple[str, str]) -> None:
        on_path.add(key)
        stack.append((key, iter(sorted(calls[key]))))

    if start in depth:
        return
    enter(start)
    while stack:
        key, children = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            on_path.discard(key)
            depth[key] = 1 + max((depth[c] for c in calls[key]), default=0)
            if depth[key] > MAX_FUNCTION_DEPTH:
                raise ResourceLimitError(f"{where}: model-local functions call each other more than "
                                         f"{MAX_FUNCTION_DEPTH} deep (from {_fname(key)})",
                                         "inline the functions and re-export")
            continue
        if child in on_path:
            raise InputError(f"{where}: model-local function {_fname(child)} calls itself "
                             f"(through {_fname(key)})", "recursive functions can't run; re-export the model")
        if child not in depth:
            enter(child)


def _fname(key: tuple[str, str]) -> str:
    return f"{key[0]}::{key[1]}" if key[0] else key[1]


# ------------------------------------------------------------------------- run time ------------
class TimeLimitExceeded(ResourceLimitError):
    """A parity run took longer than its limit."""


@contextlib.contextmanager
def time_limit(seconds: float | None, what: str, hint: str = "") -> Iterator[None]:
    """Raise ``TimeLimitExceeded`` when the block runs longer than ``seconds``.

    A watchdog thread raises it in the calling thread (CPython's ``PyThreadState_SetAsyncExc``)
    as soon as that thread runs Python code again; no signal is used, so the limit works in any
    thread and leaves SIGALRM to the host (a test runner, a fuzzer). Native runtimes that can
    be cancelled (onnxruntime's ``RunOptions.terminate``) use ``cancel_after`` and call
    ``raise_if_expired`` when they return."""
    if not seconds:
        yield
        return
    hint = hint or "raise --parity-timeout, or pass --no-validate to convert without running it"
    message = f"{what} ran longer than {seconds:g} s"
    outer = _deadline.get()
    mine = (time.monotonic() + seconds, message, hint)
    token = _deadline.set(mine if outer is None or mine[0] < outer[0] else outer)
    watchdog = _Watchdog(threading.get_ident(), message, hint)
    timer = threading.Timer(seconds, watchdog.fire)
    timer.daemon = True
    timer.start()
    try:
        yield
        raise_if_expired()  # a runtime cancelled itself and returned normally
    finally:
        timer.cancel()
        watchdog.disarm()
        _deadline.reset(token)


class _Watchdog:
    """Raises the time limit's error in one thread, once, unless disarmed first."""

    def __init__(self, thread_id: int, message: str, hint: str) -> None:
        self.thread_id = thread_id
        self.lock = threading.Lock()
        self.armed = True
        self.fired = False
        # an async exception is a class, raised without arguments: bake the message in
        self.error = type("TimeLimitExceeded", (TimeLimitExceeded,),
                          {"__init__": lambda err: TimeLimitExceeded.__init__(err, message, hint),
                           "__reduce__": lambda err: (TimeLimitExceeded, (message, hint))})

    def fire(self) -> None:
        with self.lock:
            if self.armed:
                self.fired = True
                _set_async_exc(self.thread_id, self.error)

    def disarm(self) -> None:
        with self.lock:
            self.armed = False
            if self.fired:  # fired but maybe not yet delivered: don't let it escape the block
                _set_async_exc(self.thread_id, None)


def _set_async_exc(thread_id: int, error: type[BaseException] | None) -> None:
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                               ctypes.py_object(error) if error is not None else None)


def remaining() -> float | None:
    """Seconds left before the innermost ``time_limit`` expires; None when there is none."""
    current = _deadline.get()
    return None if current is None else current[0] - time.monotonic()


def raise_if_expired() -> None:
    current = _deadline.get()
    if current is not None and time.monotonic() >= current[0]:
        raise TimeLimitExceeded(current[1], current[2])


def cancel_after(cancel: Callable[[], None]) -> threading.Timer | None:
    """Call ``cancel`` from a timer thread when the current time limit expires (for runtimes that
    run native code the SIGALRM handler can't interrupt). The caller cancels the timer."""
    left = remaining()
    if left is None:
        return None
    timer = threading.Timer(max(left, 0.0), cancel)
    timer.daemon = True
    timer.start()
    return timer
