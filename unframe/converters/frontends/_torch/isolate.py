"""Run a step that can corrupt torch's native state in a forked child process.

The TorchScript tracer is such a step: a trace that fails (notably on a batch size the model
does not take) can leave torch's heap corrupted, and the *next* conversion in the same process
then dies with SIGSEGV or "double free or corruption" (a training script's callback, a zoo
worker, a notebook). The step runs in a fork of this process instead, which has the live
module without pickling it (``unframe.sandbox`` starts fresh interpreters, which would need the
model as bytes), writes its result to disk (the ONNX file in the export's folder) and sends back
only a small picklable value or a description of its failure. Whatever happens in the child
stays there:

* a Python exception comes back as ``ChildFailure`` carrying the one-line explanation the child
  made of it (the child still has the exception chain and its frames);
* a child killed by a signal, or one that exits without answering, is a ``ConversionError``
  naming the signal; so is one that runs past ``timeout`` (it is killed);
* Ctrl-C in the parent kills the child before the interrupt goes on.

Forking a process that has threads copies only the calling thread: the child sets torch to one
thread first (torch's DataLoader workers do the same, for the same reason), freezes what it
inherited out of reach of Python's garbage collector (``gc.freeze``: an object of the parent's,
such as an onnxruntime session of an earlier parity check left in a reference cycle, must not be
finalized there: its destructor waits for thread-pool threads the child doesn't have, and the
child hangs; found as a hung test), calls nothing that takes the dynamic loader's lock
(the parent resolves ``prctl`` before forking) and never returns into the caller's code
(``os._exit``). Its stdout and stderr go to a file whose tail is kept for
``--debug``. A model on a CUDA device can't be used in a forked child; the step then runs here,
as it did before.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import select
import signal
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any

from unframe.errors import ConversionError

TIMEOUT = 900.0  # a trace taking longer is stopped (the largest models trace in minutes)


class ChildFailure(Exception):
    """The step raised in the child: ``line`` is its one-line explanation, made there."""

    def __init__(self, line: str, data_dependent: bool, child_traceback: str) -> None:
        super().__init__(line)
        self.line = line
        self.data_dependent = data_dependent
        self.child_traceback = child_traceback


def can_fork(device: Any = None) -> bool:
    """Forking is safe: a POSIX fork, and no CUDA context to lose."""
    if not hasattr(os, "fork") or sys.platform == "win32":
        return False
    if device is not None and getattr(device, "type", "cpu") != "cpu":
        return False
    import torch

    return not (torch.cuda.is_available() and torch.cuda.is_initialized())


def run(step: Callable[[], Any], explain: Callable[[BaseException], tuple[str, bool]], what: str,
        timeout: float | None = None) -> Any:
    """``step()`` in a forked child; its (picklable) result. ``explain(exc)`` turns an exception
    in the child into (one line, data-dependent?) there, where its chain and frames still are."""
    timeout = TIMEOUT if timeout is None else timeout
    log = tempfile.TemporaryFile(prefix="unframe-trace-")
    _prctl()  # resolved here: the child must not take the dynamic loader's lock
    read_end, write_end = os.pipe()
    for stream in (sys.stdout, sys.stderr):  # else the child holds a copy of what is buffered
        with contextlib.suppress(Exception):
            stream.flush()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "use of fork() may lead to deadlocks"
        pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        _child(step, explain, write_end, log.fileno())
    os.close(write_end)
    try:
        payload, status = _collect(pid, read_end, timeout)
    finally:
        os.close(read_end)
        _kill(pid)
    try:
        return _outcome(payload, status, what, timeout, _tail(log))
    finally:
        log.close()


def _child(step: Callable[[], Any], explain: Callable[[BaseException], tuple[str, bool]], out: int,
           log: int) -> None:
    code = 1
    try:
        gc.freeze()  # never finalize what the parent owns (see the module's doc)
        _die_with_parent()
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and kills us
        os.dup2(log, 1)
        os.dup2(log, 2)
        import torch

        torch.set_num_threads(1)
        try:
            reply: tuple[str, Any] = ("ok", step())
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
            line, data_dependent = _explained(explain, exc)
            reply = ("failed", (line, data_dependent, traceback.format_exc()[-8000:]))
        try:
            data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - a result that won't pickle
            data = pickle.dumps(("failed", (f"{type(exc).__name__}: {exc}"[:300], False, "")))
        view = memoryview(data)
        while view:
            view = view[os.write(out, view):]
        code = 0
    finally:
        os._exit(code)


def _explained(explain: Callable[[BaseException], tuple[str, bool]], exc: BaseException) -> tuple[str, bool]:
    try:
        return explain(exc)
    except Exception:  # noqa: BLE001 - the explanation itself failed: the exception's own line
        text = str(exc).strip()
        return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:300], False


def _collect(pid: int, fd: int, timeout: float) -> tuple[bytes | None, int | None]:
    """The child's reply (None when it sent none) and its exit status (None: still running at
    the deadline, when it is killed by the caller)."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None, None
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if ready:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    return (b"".join(chunks) or None), os.waitstatus_to_exitcode(status)


def _kill(pid: int) -> None:
    """The child gone and reaped, whatever the way out (a timeout, Ctrl-C in the parent)."""
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _outcome(payload: bytes | None, status: int | None, what: str, timeout: float, tail: str) -> Any:
    details = {"child_stderr": tail} if tail else {}
    if status is None:
        raise ConversionError(f"{what} did not finish within {timeout:g} s; its child process was stopped",
                              "try --exporter dynamo, or --static", details=details)
    if payload is None:
        how = (f"crashed ({_signal_name(-status)})" if status < 0 else
               f"ended its child process without an answer (exit status {status})")
        raise ConversionError(f"{what} {how}; it ran in a child process, so this process is unharmed",
                              "try --exporter dynamo, or --static; --debug shows the child's last output",
                              details=details)
    kind, value = pickle.loads(payload)
    if kind == "ok":
        return value
    line, data_dependent, child_traceback = value
    raise ChildFailure(line, data_dependent, child_traceback)


def _tail(log: Any, limit: int = 4000) -> str:
    try:
        log.seek(0, os.SEEK_END)
        log.seek(max(0, log.tell() - limit))
        return log.read().decode(errors="replace")
    except (OSError, ValueError):
        return ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


_PRCTL: list[Any] = []


def _prctl() -> Any:
    """libc's prctl, looked up once in the parent (None off Linux or where it can't be had)."""
    if not _PRCTL:
        found = None
        if sys.platform.startswith("linux"):
            import ctypes

            with contextlib.suppress(OSError, AttributeError):
                found = ctypes.CDLL(None, use_errno=True).prctl
        _PRCTL.append(found)
    return _PRCTL[0]


def _die_with_parent() -> None:
    """A child stuck in native code is killed by the kernel when the parent goes (Linux)."""
    prctl = _PRCTL[0] if _PRCTL else None
    if prctl is not None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
