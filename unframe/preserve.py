"""The live-model guarantee: a model object handed to ``convert()`` comes back exactly as it was.

Converting from a training script must not disturb the training that goes on after the call.
Each frontend's ``preserve(source)`` is a context manager that snapshots every piece of state a
conversion could touch (a torch module's train/eval flags, parameters and buffers, hooks,
devices and dtypes, ``requires_grad``; a Keras model's weights, ``trainable`` flags, optimizer
and compiled state; the process's RNG states) and restores it on exit. The load stage enters it
through ``Flow.hold`` and the run releases it in a ``finally``, so the restore happens after a
success, a failed stage and a KeyboardInterrupt alike. Inside, the model is in inference mode.

This module holds the framework-free parts: the Python and numpy RNG snapshot and the check that
a snapshot fits in memory before it is taken.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any

from unframe.errors import UsageError

# A copy of the weights may take at most this share of the memory available now: the export
# and the parity runs need room of their own.
COPY_BUDGET = 0.8


@dataclass
class PythonRng:
    """``random``'s and numpy's global RNG states (seeded training scripts rely on both)."""

    py_state: Any = None
    np_state: Any = None

    @classmethod
    def capture(cls) -> PythonRng:
        import numpy as np

        return cls(random.getstate(), np.random.get_state())

    def restore(self) -> None:
        import numpy as np

        random.setstate(self.py_state)
        np.random.set_state(self.np_state)


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation now (Linux MemAvailable, else psutil);
    None when this system doesn't say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_copy_fits(nbytes: int, what: str, *, purpose: str = "restore it after the conversion",
                    hint: str = "") -> None:
    """Refuse, before copying anything, a copy of ``nbytes`` that would not fit in memory."""
    available = available_memory()
    if available is None or nbytes <= available * COPY_BUDGET:
        return
    raise UsageError(
        f"{what} holds {_gb(nbytes)} of weights; copying them to the CPU to {purpose} needs more "
        f"than the {_gb(available)} of memory available",
        hint or "save a checkpoint and convert the file instead, or free memory")


def _gb(nbytes: int) -> str:
    return f"{nbytes / 1e9:.2f} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:.1f} MB"
