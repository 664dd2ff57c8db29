"""Run code that can crash the process in a child process: native parsers and builders fed bytes
unframe can't vouch for (TensorRT's ONNX parser and builder, coremltools' loading of foreign
packages, TFLite's interpreter, HDF5).

``call(name, fn, *args)`` runs ``fn(*args)`` in the child for ``name`` and returns its result.
The child is started on first use and reused until the end of the conversion (``session()``),
so the parser and the builder of one conversion share one child and one import of their
library; a state a first call leaves in the child (a parsed network) is there for the next.
What can come back:

* the result, or the ``UnframeError`` the function raised, with every field;
* another exception of the function: re-raised in the parent as ``SandboxedFailure`` with the
  child's type name, message and traceback (``--debug`` shows it);
* the child killed by a signal (a segfault in native code): ``crash_error`` (an ``InputError``,
  exit 3, unless the caller says the input is not to blame) naming the signal;
* no answer within ``timeout`` seconds: the child is killed and ``crash_error`` says so.

The child is a fresh interpreter (``subprocess`` running this module's ``_child_main``), talking
over a socket pair with ``multiprocessing.connection`` framing: nothing of the parent's state
(threads, locks, a half-initialized library) is forked into it, and the parent's ``__main__`` is
not re-imported. It inherits the parent's ``sys.path``; its stderr goes to a file whose tail is
kept for the error's details.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from unframe.errors import InputError, UnframeError

START_TIMEOUT = 300.0  # a preload (a library's import) that takes longer is an error, not a hang


class SandboxedFailure(RuntimeError):
    """An unexpected exception inside the child: a bug in the sandboxed function (exit 1)."""

    def __init__(self, type_name: str, message: str, child_traceback: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.child_traceback = child_traceback

    def __str__(self) -> str:
        return f"{self.args[0]} (in a sandboxed child; its traceback:\n{self.child_traceback})"


class Sandbox:
    """One child process, reused for every call until ``close()``."""

    def __init__(self, name: str, *, memory_limit: int | None = None) -> None:
        self.name = name
        self.memory_limit = memory_limit  # RLIMIT_AS of the child, bytes (None: no limit)
        self.proc: subprocess.Popen[bytes] | None = None
        self.conn: Any = None
        self._stderr: Any = None
        self.calls = 0
        self.starts = 0
        self._timed_out = False
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------------
    def _start(self) -> None:
        from multiprocessing.connection import Connection

        ours, theirs = socket.socketpair()
        self._stderr = tempfile.TemporaryFile(prefix="unframe-sandbox-")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        code = "from unframe.sandbox import _child_main; _child_main()"
        args = [sys.executable, "-c", code, str(theirs.fileno()), str(self.memory_limit or 0)]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._stderr,
                                     stderr=self._stderr, pass_fds=(theirs.fileno(),), env=env,
                                     close_fds=True, start_new_session=True)
        theirs.close()
        self.conn = Connection(ours.detach())
        self.starts += 1
        self._preloaded: set[str] = set()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close(self) -> None:
        proc, conn = self.proc, self.conn
        self.proc, self.conn = None, None
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.close()  # the child sees EOF and exits
        if proc is not None:
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    # -- calls -----------------------------------------------------------------------------------
    def call(self, fn: Callable[..., Any], *args: Any, what: str = "", timeout: float | None = None,
             crash_error: type[UnframeError] = InputError, hint: str = "",
             preload: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` in the child (``fn`` must be a module-level function).

        ``timeout`` bounds the call itself; ``preload`` (a module-level function, e.g. one that
        imports TensorFlow) runs first in a fresh child, outside the timeout, so that a limit
        sized for the work is not eaten by a slow import."""
        what = what or f"{fn.__module__}.{fn.__qualname__}"
        with self._lock:
            if not self.alive():
                self.close()
                self._start()
            key = preload and f"{preload.__module__}.{preload.__qualname__}"
            if preload is not None and key not in self._preloaded:
                self._exchange(preload, (), {}, what, START_TIMEOUT, crash_error, hint)
                self._preloaded.add(key)
            reply = self._exchange(fn, args, kwargs, what, timeout, crash_error, hint)
        return _unpack(reply, what)

    def _exchange(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], what: str,
                  timeout: float | None, crash_error: type[UnframeError], hint: str) -> Any:
        self.calls += 1
        answered = False
        try:
            try:
                self.conn.send((fn.__module__, fn.__qualname__, args, kwargs))
            except (OSError, EOFError):
                pass  # the child died under us: reported below from its exit status
            reply = self._wait(timeout)
            answered = True
        finally:
            if not answered:  # interrupted while the child works (a time limit, Ctrl-C): its late
                self._kill()  # reply would answer the next call, so this child goes
        if reply is None:
            raise self._crashed(what, timeout, crash_error, hint)
        return reply

    def _wait(self, timeout: float | None) -> Any:
        """The child's reply, or None when it died or ran past ``timeout`` (then it is killed)."""
        self._timed_out = False
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            step = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
            try:
                if self.conn.poll(step):
                    return self.conn.recv()
            except (EOFError, OSError):
                self.proc.wait()
                return None
            if not self.alive():
                return None
            if deadline is not None and time.monotonic() >= deadline:
                self._timed_out = True
                self.proc.kill()
                self.proc.wait()
                return None

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.close()

    def _crashed(self, what: str, timeout: float | None, error: type[UnframeError], hint: str
                 ) -> UnframeError:
        code = self.proc.returncode if self.proc is not None else None
        tail = self._stderr_tail()
        self.close()
        if self._timed_out:
            message = f"{what} did not finish within {timeout:g} s; its child process was stopped"
        elif code is not None and code < 0:
            message = (f"{what} crashed ({_signal_name(-code)}); it ran in a child process, so "
                       "unframe did not")
        else:
            message = f"{what} ended its child process unexpectedly (exit status {code})"
        return error(message, hint or "the input likely holds something this library can't take; "
                     "--debug shows the child's last output", details={"child_stderr": tail})

    def _stderr_tail(self, limit: int = 4000) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - limit))
            return self._stderr.read().decode(errors="replace")
        except (OSError, ValueError):
            return ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _unpack(reply: tuple[str, Any], what: str) -> Any:
    kind, payload = reply
    if kind == "ok":
        return payload
    if kind == "error":
        raise payload
    if kind == "memory":
        from unframe.errors import ResourceLimitError

        raise ResourceLimitError(f"{what} ran out of memory in its child process ({payload})",
                                 "raise --max-memory if the machine has the memory")
    type_name, message, text = payload
    raise SandboxedFailure(type_name, message, text)


# ------------------------------------------------------------------------------ sessions -------
_children: dict[str, Sandbox] = {}
_in_session: set[str] = set()  # children started inside a session: closed when it ends
_depth = [0]


def shared(name: str, *, keep: bool = False) -> Sandbox:
    """The child for ``name`` (e.g. "tensorrt"), started on first call. Inside a ``session``
    it lives until the session ends; outside any, or with ``keep`` (a child whose state the
    caller manages itself, e.g. onnxruntime's sessions), until the process exits."""
    box = _children.get(name)
    if box is None:
        box = _children[name] = Sandbox(name)
        if _depth[0] and not keep:
            _in_session.add(name)
    return box


def existing(name: str) -> Sandbox | None:
    """The child for ``name`` if one was made (started or not), else None."""
    return _children.get(name)


def call(name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``shared(name).call(fn, *args, **kwargs)``."""
    return shared(name).call(fn, *args, **kwargs)


@contextlib.contextmanager
def session() -> Iterator[None]:
    """One conversion: children started inside are closed when the outermost session ends, so
    a conversion's parser and builder share a child and the next conversion gets a fresh one."""
    _depth[0] += 1
    try:
        yield
    finally:
        _depth[0] -= 1
        if _depth[0] == 0:
            for name in sorted(_in_session):
                box = _children.pop(name, None)
                if box is not None:
                    box.close()
            _in_session.clear()


def close_all() -> None:
    while _children:
        _, box = _children.popitem()
        box.close()
    _in_session.clear()


atexit.register(close_all)


# ------------------------------------------------------------------------------ the child ------
def _child_main() -> None:
    """The child's loop: receive (module, function, args, kwargs), reply with the outcome."""
    from multiprocessing.connection import Connection

    fd, memory = int(sys.argv[1]), int(sys.argv[2])
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    if memory:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    conn = Connection(fd)
    while True:
        try:
            module, qualname, args, kwargs = conn.recv()
        except (EOFError, OSError):
            return
        conn.send_bytes(_outcome(module, qualname, args, kwargs))


def _die_with_parent() -> None:
    """A child stuck in native code never reads the parent's EOF: have the kernel kill it when
    the parent goes (Linux's PR_SET_PDEATHSIG), however the parent ends (a fuzzer's exit(), a
    kill). Elsewhere, the parent's atexit handler and close() are all there is."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent already went before prctl took effect
        os._exit(0)


def _outcome(module: str, qualname: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """The pickled reply: ("ok", result), ("error", UnframeError), ("memory", text) or
    ("failed", (type name, message, traceback))."""
    import pickle

    try:
        fn: Any = importlib.import_module(module)
        for part in qualname.split("."):
            fn = getattr(fn, part)
        return pickle.dumps(("ok", fn(*args, **kwargs)), protocol=pickle.HIGHEST_PROTOCOL)
    except MemoryError as exc:
        return pickle.dumps(("memory", str(exc)[:300]))
    except UnframeError as exc:
        try:
            return pickle.dumps(("error", exc), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - a field that won't pickle: send the description
            pass
        return _failed(exc)
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
        return _failed(exc)


def _failed(exc: BaseException) -> bytes:
    import pickle

    return pickle.dumps(("failed", (type(exc).__name__, str(exc)[:2000], traceback.format_exc()[-8000:])))
