"""Where a stage's seconds go: the wrapped tools' own calls, and unframe's work around them.

The pipeline runs each stage under ``stage_clock()``. Code that hands work to a wrapped library
(an exporter, a converter, a runtime running a model) does it inside ``tool(name)``; a frontend's
own numbers check runs inside ``checking()``, so that what it costs is told apart as parity. The
clock sums each tool's seconds. A tool block inside another counts once, in the outer one: tf2onnx
running onnxruntime inside its own conversion is tf2onnx's time. Whatever of a stage's seconds no
tool block holds is unframe's own: copies, the live model's guard, probes, feeds drawn,
comparisons, graph edits, writes::

    with stage_clock() as clock:               # pipeline/flow.py, around each stage
        with tool("torch.onnx.export"):        # a frontend, around the exporter call
            torch.onnx.export(...)
        with checking():                       # the frontend's check of its own export
            with tool("onnxruntime 1.31.1"):
                session.run(...)
    clock.work.tools   -> {"torch.onnx.export": 2.91}
    clock.check.tools  -> {"onnxruntime 1.31.1": 0.12}

Outside a stage clock (a bare runner call, a bench) ``tool`` and ``checking`` cost one context
variable lookup and record nothing. Nothing here imports anything of unframe's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import wraps
from typing import Any, TypeVar


@dataclass
class Bucket:
    """Seconds of one part of a stage (its work, or its own numbers check): per tool, and in all."""

    tools: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    def add(self, name: str, seconds: float) -> None:
        self.tools[name] = self.tools.get(name, 0.0) + seconds

    @property
    def tool_seconds(self) -> float:
        return sum(self.tools.values())


@dataclass
class Clock:
    """One stage's clock: its work, and the checking it did of its own numbers."""

    work: Bucket = field(default_factory=Bucket)
    check: Bucket = field(default_factory=Bucket)
    _bucket: Bucket | None = None
    _in_tool: bool = False

    @property
    def current(self) -> Bucket:
        return self._bucket or self.work


_CLOCK: ContextVar[Clock | None] = ContextVar("unframe_stage_clock", default=None)


@contextmanager
def stage_clock() -> Iterator[Clock]:
    """A clock for one stage; clocks nest (a stage run inside another's gets its own)."""
    clock = Clock()
    token = _CLOCK.set(clock)
    try:
        yield clock
    finally:
        _CLOCK.reset(token)


@contextmanager
def tool(name: str) -> Iterator[None]:
    """The block is ``name``'s own time (counted once when tool blocks nest)."""
    clock = _CLOCK.get()
    if clock is None or clock._in_tool:
        yield
        return
    clock._in_tool = True
    bucket = clock.current
    started = time.perf_counter()
    try:
        yield
    finally:
        bucket.add(name, time.perf_counter() - started)
        clock._in_tool = False


@contextmanager
def checking() -> Iterator[None]:
    """The block is the stage checking its own numbers (timed as the parity of that stage)."""
    clock = _CLOCK.get()
    if clock is None or clock._bucket is not None:
        yield
        return
    clock._bucket = clock.check
    started = time.perf_counter()
    try:
        yield
    finally:
        clock.check.seconds += time.perf_counter() - started
        clock._bucket = None


F = TypeVar("F", bound=Callable[..., Any])


def timed_as(name: Callable[[Any], str]) -> Callable[[F], F]:
    """A method decorator: each call is a tool block named ``name(self)``."""

    def wrap(method: F) -> F:
        @wraps(method)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            if _CLOCK.get() is None:
                return method(self, *args, **kwargs)
            with tool(name(self)):
                return method(self, *args, **kwargs)

        call.__unframe_timed__ = True  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    return wrap


def split(elapsed: float, bucket: Bucket) -> dict[str, Any]:
    """A stage part's seconds as ``--json`` shows them: the tools' own and unframe's (the rest)."""
    tools = {k: round(v, 4) for k, v in sorted(bucket.tools.items(), key=lambda kv: -kv[1])}
    return {"seconds": round(elapsed, 4), "tools": tools,
            "unframe": round(max(0.0, elapsed - bucket.tool_seconds), 4)}
