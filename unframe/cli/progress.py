"""A spinner for stages that take a while, on a terminal only.

A stage that ends within ``DELAY`` seconds shows nothing, so quick conversions print only their
result. Nothing is shown on a pipe or with ``--json``. The spinner writes to a duplicate of the
terminal's stderr taken at start, so that frameworks' log capture (``unframe.quiet``, which
redirects file descriptor 2 while TensorFlow runs) does not swallow it.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from unframe.pipeline import Observer, Stage

DELAY = 1.0

LABELS = {"load": "loading", "export": "exporting to ONNX", "opset": "converting the opset",
          "backend": "building", "parity": "checking parity", "stamp": "recording provenance",
          "write": "writing"}


class TerminalProgress(Observer):
    def __init__(self) -> None:
        from rich.console import Console

        self._stream = os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1)
        self.console = Console(file=self._stream, stderr=False, highlight=False)

    @contextmanager
    def stage(self, stage: Stage) -> Iterator[None]:
        text = f"{LABELS.get(stage.kind, stage.kind)} ({stage.tool})"
        status: list[Any] = []
        lock = threading.Lock()
        done = threading.Event()

        def show() -> None:
            with lock:
                if not done.is_set():
                    s = self.console.status(text, spinner="dots")
                    s.start()
                    status.append(s)

        timer = threading.Timer(DELAY, show)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            done.set()
            with lock:
                for s in status:
                    s.stop()
                status.clear()

    def close(self) -> None:
        self._stream.close()


def observer_for(as_json: bool) -> Observer:
    """The spinner on an interactive stderr; silence on a pipe, in CI or with --json."""
    try:
        interactive = sys.stderr.isatty() and not as_json and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        interactive = False
    return TerminalProgress() if interactive else Observer()
