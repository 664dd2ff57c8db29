"""Keep the log lines of native frameworks off the user's stderr.

TensorFlow, absl and oneDNN log from C++ straight to file descriptor 2, TensorFlow and absl also
through Python logging, and tf2onnx logs a traceback for each optimizer pass it recovers from.
None of it is the user's business unless they asked for ``--debug``:
``quiet_native_logs()`` points fd 2 at a temporary file while a framework works, sets those
Python loggers to ERROR, and drops what was captured, except that an exception raised inside
carries the last captured lines as a note (shown in a ``--debug`` traceback).

With ``keep`` (the default under ``--debug``) nothing is redirected: the lines go to stderr as
they are written, so that they are not lost if the process dies inside a native call.

Nothing here imports a framework.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO

QUIET_LOGGERS = ("absl", "tensorflow", "tf2onnx", "h5py")
TAIL_LINES = 20
TAIL_BYTES = 64 * 1024
STDERR_FD = 2

_debug = False
_lock = threading.RLock()
_active: _Capture | None = None  # one capture per process: fd 2 is process-wide


def set_debug(flag: bool) -> None:
    """The CLI's ``--debug``: native logs are shown instead of captured."""
    global _debug
    _debug = bool(flag)


def debug_enabled() -> bool:
    return _debug


def quiet_tensorflow_env() -> None:
    """TensorFlow reads its C++ log level once, when it is imported: set it before that.
    A level the user set themselves stays (what it lets through is still captured)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


@dataclass
class _Capture:
    saved_fd: int | None  # a dup of the real fd 2; None when fd 2 could not be redirected
    file: IO[bytes] | None
    levels: dict[str, int] = field(default_factory=dict)
    depth: int = 0


@contextmanager
def quiet_native_logs(keep: bool | None = None) -> Iterator[None]:
    """Capture native log output (fd 2 and the frameworks' Python loggers) for the duration.

    ``keep`` (default: ``debug_enabled()``) lets everything through. Nested and concurrent uses
    share one capture; the outermost exit restores fd 2 and the logger levels.
    """
    quiet_tensorflow_env()
    if debug_enabled() if keep is None else keep:
        yield
        return
    capture, start = _enter()
    try:
        yield
    except BaseException as exc:
        tail = _tail(capture, start)
        if tail and not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            _add_note(exc, f"native log, last {len(tail)} lines (--debug shows all of it, live):\n"
                      + "\n".join(tail))
        raise
    finally:
        _exit(capture)


def _enter() -> tuple[_Capture, int]:
    global _active
    with _lock:
        if _active is None:
            _active = _Capture(*_redirect())
            _active.levels = _quiet_loggers()
        _active.depth += 1
        return _active, _offset(_active)


def _exit(capture: _Capture) -> None:
    global _active
    with _lock:
        capture.depth -= 1
        if capture.depth > 0:
            return
        _active = None
        _restore(capture)


def _redirect() -> tuple[int | None, IO[bytes] | None]:
    """Point fd 2 at a temporary file; (None, None) when fd 2 can't be duplicated (closed, or
    not a real descriptor): then only the loggers are quieted."""
    _flush_stderr()
    try:
        saved = os.dup(STDERR_FD)
    except OSError:
        return None, None
    try:
        sink = tempfile.TemporaryFile(prefix="unframe-native-log-")
        os.dup2(sink.fileno(), STDERR_FD)
    except OSError:
        os.close(saved)
        return None, None
    return saved, sink


def _restore(capture: _Capture) -> None:
    try:
        if capture.saved_fd is not None:
            _flush_stderr()
            os.dup2(capture.saved_fd, STDERR_FD)
            os.close(capture.saved_fd)
        if capture.file is not None:
            capture.file.close()
    finally:
        _set_levels(capture.levels)


def _quiet_loggers() -> dict[str, int]:
    before = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
    _set_levels({name: logging.ERROR for name in QUIET_LOGGERS
                 if logging.getLogger(name).getEffectiveLevel() < logging.ERROR})
    return before


def _set_levels(levels: dict[str, int]) -> None:
    """Logger levels set together: each ``Logger.setLevel`` empties the level cache of every
    logger (a walk over all of them: 0.4 ms once torch's are made), so all but the last are set
    as attributes and the last one's ``setLevel`` empties it once, after them all."""
    items = list(levels.items())
    for name, level in items[:-1]:
        logging.getLogger(name).level = level
    if items:
        logging.getLogger(items[-1][0]).setLevel(items[-1][1])


def _flush_stderr() -> None:
    # Python's buffered stderr text must land on the fd it was written for.
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # closed or detached
            pass


def _offset(capture: _Capture) -> int:
    if capture.file is None:
        return 0
    _flush_stderr()
    try:
        return os.lseek(capture.file.fileno(), 0, os.SEEK_END)
    except OSError:
        return 0


def _tail(capture: _Capture, start: int, lines: int = TAIL_LINES) -> list[str]:
    """The last captured lines written since ``start``."""
    if capture.file is None:
        return []
    _flush_stderr()
    try:
        fd = capture.file.fileno()
        end = os.lseek(fd, 0, os.SEEK_END)
        start = max(start, end - TAIL_BYTES)
        os.lseek(fd, start, os.SEEK_SET)
        data = os.read(fd, max(0, end - start))
        os.lseek(fd, 0, os.SEEK_END)  # fd 2 shares this offset: keep appending at the end
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace")
    return [ln.rstrip() for ln in text.splitlines() if ln.strip()][-lines:]


def _add_note(exc: BaseException, note: str) -> None:
    add = getattr(exc, "add_note", None)
    if add is not None:
        add(note)
    else:  # Python 3.10
        exc.__notes__ = [*getattr(exc, "__notes__", []), note]  # type: ignore[attr-defined]


__all__ = ["quiet_native_logs", "quiet_tensorflow_env", "set_debug", "debug_enabled"]
