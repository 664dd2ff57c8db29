"""Functions the sandbox tests run in a child process (a module of its own: the child imports it
by name, without pytest)."""

from __future__ import annotations

import ctypes
import os
import time

from unframe.errors import Blocker, UnsupportedError


def double(x: int) -> int:
    return 2 * x


def pid() -> int:
    return os.getpid()


def segfault() -> None:
    ctypes.string_at(0)  # reads address 0: SIGSEGV, as a native parser on bad bytes


def typed() -> None:
    raise UnsupportedError("the parser refused it", "see the blockers", blockers=[Blocker("Foo", "no such op", "n1")])


def bug() -> None:
    {}["missing"]  # noqa: B018 - an unexpected exception in sandboxed code


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def allocate(nbytes: int) -> int:
    return len(bytearray(nbytes))


def unpicklable() -> object:
    return lambda: None


PRELOADS: list[int] = []  # the pids that ran slow_preload in this process's memory


def slow_preload() -> None:
    """A preload as costly as a library's import (TensorFlow's: about 4 s)."""
    PRELOADS.append(os.getpid())
    time.sleep(0.5)


def preloads() -> tuple[int, list[int]]:
    return os.getpid(), list(PRELOADS)


def failing_preload() -> None:
    raise RuntimeError("the library is broken")
