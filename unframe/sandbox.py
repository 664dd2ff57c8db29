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

A slow preload (TensorFlow's import: about 4 s) is paid again by every new child. A caller that
passes ``zygote=True`` lets a long-running process (a zoo run, a training script's callbacks, a
fuzzer) pay it once: the second time such a child has to start, a *template* starts instead (a
fresh interpreter that runs the preload and nothing else) and from then on every new child is a
fork of it, ready in milliseconds. A one-shot conversion never starts a template. The template
has run only the preload, so what a child inherits is that library's import, never unframe's or
the caller's state; the forked child is the same ``_child_main`` loop as a spawned one.
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
        # one line naming the cause; the child's traceback is for --debug (``child_tracebacks``)
        first = " ".join(str(self.args[0]).split("\n", 1)[0].split())[:300]
        return f"{first} (in a sandboxed child process)"


def child_tracebacks(exc: BaseException | None) -> list[str]:
    """The tracebacks of the sandboxed children behind ``exc`` (its causes and contexts, in the
    order raised): what ``--debug`` adds to the parent's own traceback."""
    found: list[str] = []
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = getattr(exc, "child_traceback", "")
        if text:
            found.append(text)
        exc = exc.__cause__ or exc.__context__
    return found[::-1]


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
        self._template: _Template | None = None  # the template the child was forked from

    # -- lifecycle -------------------------------------------------------------------------------
    def _start(self, preload: Callable[[], Any] | None = None, zygote: bool = False) -> None:
        from multiprocessing.connection import Connection

        self._preloaded: set[str] = set()
        if preload is not None and zygote:
            key = _key(preload)
            template = _template_for(key, preload)
            if template is not None:
                self._stderr = None
                self.proc, self.conn = template.fork(self.memory_limit)
                self._template = template
                self.starts += 1
                self._preloaded.add(key)
                return
        self._template = None
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
             preload: Callable[[], Any] | None = None, zygote: bool = False, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` in the child (``fn`` must be a module-level function).

        ``timeout`` bounds the call itself; ``preload`` (a module-level function, e.g. one that
        imports TensorFlow) runs first in a fresh child, outside the timeout, so that a limit
        sized for the work is not eaten by a slow import. ``zygote``: a new child may be forked
        from a template that ran ``preload`` (see the module's docstring); only for a preload
        whose library is safe to fork once imported."""
        what = what or f"{fn.__module__}.{fn.__qualname__}"
        with self._lock:
            if not self.alive():
                self.close()
                self._start(preload, zygote)
            key = preload and _key(preload)
            if preload is not None and key not in self._preloaded:
                _unpack(self._exchange(preload, (), {}, what, START_TIMEOUT, crash_error, hint), what)
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
        # a forked child writes to its template's file (shared by its siblings, one at a time)
        return _tail(self._stderr if self._template is None else self._template.stderr, limit)


def _tail(file: Any, limit: int) -> str:
    if file is None:
        return ""
    try:
        file.seek(0, os.SEEK_END)
        size = file.tell()
        file.seek(max(0, size - limit))
        return file.read().decode(errors="replace")
    except (OSError, ValueError):
        return ""


def _key(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


# ------------------------------------------------------------------------------ templates ------
_templates: dict[str, _Template] = {}
_plain_starts: dict[str, int] = {}  # zygote preloads started the plain way, per key


def _template_for(key: str, preload: Callable[[], Any]) -> _Template | None:
    """The live template for ``preload``, started on this key's second start; None for the
    first (a plain child: a one-shot conversion never pays for a template) or when a template
    can't be had (then plain children, as without ``zygote``)."""
    template = _templates.get(key)
    if template is not None and template.alive():
        return template
    if template is not None:
        template.close()
        del _templates[key]
    _plain_starts[key] = _plain_starts.get(key, 0) + 1
    if _plain_starts[key] < 2:
        return None
    try:
        template = _Template(preload)
    except (OSError, EOFError, RuntimeError):
        return None
    _templates[key] = template
    return template


class _Template:
    """A fresh interpreter that ran one preload and forks children from itself on request."""

    def __init__(self, preload: Callable[[], Any]) -> None:
        from multiprocessing.connection import Connection

        ours, theirs = socket.socketpair()
        self.stderr: Any = tempfile.TemporaryFile(prefix="unframe-template-")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        code = "from unframe.sandbox import _template_main; _template_main()"
        args = [sys.executable, "-c", code, str(theirs.fileno()), preload.__module__, preload.__qualname__]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.stderr, stderr=self.stderr,
                                     pass_fds=(theirs.fileno(),), env=env, close_fds=True,
                                     start_new_session=True)
        theirs.close()
        self.conn = Connection(ours.detach())
        self._lock = threading.Lock()
        try:
            ready = self.conn.poll(START_TIMEOUT) and self.conn.recv() == "ready"
        except (OSError, EOFError):  # it died in its preload
            ready = False
        if not ready:
            self.proc.kill()
            self.close()
            raise RuntimeError("the template did not run its preload")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fork(self, memory_limit: int | None) -> tuple[_Forked, Any]:
        from multiprocessing.connection import Connection
        from multiprocessing.reduction import send_handle

        ours, theirs = socket.socketpair()
        with self._lock:
            self.conn.send(("fork", memory_limit or 0))
            send_handle(self.conn, theirs.fileno(), self.proc.pid)
            theirs.close()
            pid = self.conn.recv()
        return _Forked(self, pid), Connection(ours.detach())

    def status(self, pid: int, block: bool) -> int | None:
        """The exit status of child ``pid`` (negative: the signal), or None while it runs."""
        with self._lock:
            try:
                self.conn.send(("status", pid, block))
                return self.conn.recv()
            except (OSError, EOFError):  # the template went, and its children with it
                return -signal.SIGKILL

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()  # the template sees EOF, kills its children and exits
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()


class _Forked:
    """A child forked by a template, with the part of ``subprocess.Popen`` that ``Sandbox`` uses.
    Its parent is the template, which reaps it and reports its status."""

    def __init__(self, template: _Template, pid: int) -> None:
        self.template, self.pid = template, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.template.status(self.pid, block=False)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            time.sleep(0.005)
        return self.returncode  # type: ignore[return-value]

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)


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
    while _templates:
        _, template = _templates.popitem()
        template.close()
    _plain_starts.clear()


atexit.register(close_all)


# ------------------------------------------------------------------------------ the child ------
def _child_main() -> None:
    """The child's loop: receive (module, function, args, kwargs), reply with the outcome."""
    _serve(int(sys.argv[1]), int(sys.argv[2]))


def _serve(fd: int, memory: int) -> None:
    from multiprocessing.connection import Connection

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


def _template_main() -> None:
    """The template's loop: run the preload once, then fork a child per request (the child
    serves the socket it was handed) and report the children's exit statuses."""
    from multiprocessing.connection import Connection
    from multiprocessing.reduction import recv_handle

    fd, module, qualname = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(fd)
    import pickle

    if pickle.loads(_outcome(module, qualname, (), {}))[0] != "ok":
        return  # the parent sees EOF instead of "ready" and starts plain children
    conn.send("ready")
    finished: dict[int, int] = {}
    children: set[int] = set()
    try:
        while True:
            try:
                request = conn.recv()
            except (EOFError, OSError):
                return
            if request[0] == "fork":
                handle = recv_handle(conn)
                pid = os.fork()
                if pid == 0:  # the child: never returns into this loop
                    try:
                        conn.close()
                        _serve(handle, request[1])
                    finally:
                        os._exit(0)
                os.close(handle)
                children.add(pid)
                conn.send(pid)
            elif request[0] == "status":
                _reap(children, finished)
                pid, block = request[1], request[2]
                if block and pid in children:
                    _, status = os.waitpid(pid, 0)
                    children.discard(pid)
                    finished[pid] = os.waitstatus_to_exitcode(status)
                conn.send(finished.pop(pid, None if pid in children else -signal.SIGKILL))
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _reap(children: set[int], finished: dict[int, int]) -> None:
    for pid in list(children):
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            children.discard(pid)
            finished[pid] = os.waitstatus_to_exitcode(status)


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
