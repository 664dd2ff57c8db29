"""What unframe remembers between processes: answers a runtime gave about this machine.

A CLI call is a fresh process, so whatever a runtime answered in the last one (OpenVINO's CPU
plugin: which ops, as they are, it takes) would be asked again, at a cost comparable to the
conversion itself. A ``DigestSet`` keeps such answers on disk as digests, one per line, in a
file named for what they depend on (the runtime's version, the CPU); a file of another version
is never read.

Where: ``$UNFRAME_CACHE_DIR``, else ``$XDG_CACHE_HOME/unframe``, else ``~/.cache/unframe``;
``UNFRAME_CACHE_DIR=off`` keeps nothing. What is kept only ever spares a question whose answer
was yes (an op taken): a stale or hand-edited line can make a pre-flight pass that the runtime
then refuses at compile time (parity says so), never refuse what converts. Unreadable files,
bad lines and an unwritable folder are ignored: the question is asked again.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
from collections.abc import Iterable
from pathlib import Path

OFF = "off"
MAX_LINES = 50_000  # a set this large starts over (a few MB)
_DIGEST = re.compile(r"^[0-9a-f]{32}$")


def directory() -> Path | None:
    """The cache folder (not created here), or None when turned off."""
    given = os.environ.get("UNFRAME_CACHE_DIR")
    if given is not None:
        return None if given.strip().lower() in (OFF, "") else Path(given).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "unframe"


def digest(value: object) -> str:
    """A stable 128-bit digest of a value's ``repr`` (tuples of str, int, bytes, None)."""
    return hashlib.blake2b(repr(value).encode(), digest_size=16).hexdigest()


def machine_id() -> str:
    """The CPU as a runtime's kernels see it: architecture, model name and instruction-set flags
    (``unframe.cpu``), as a short digest."""
    from unframe import cpu

    name, flags = cpu.info()
    return digest((platform.machine(), platform.system(), name, tuple(sorted(flags))))[:12]


class DigestSet:
    """A set of digests kept in ``<cache>/<name>.txt`` (see the module's doc)."""

    def __init__(self, name: str) -> None:
        self.name = re.sub(r"[^A-Za-z0-9._-]+", "_", name)

    @property
    def path(self) -> Path | None:
        folder = directory()
        return folder / f"{self.name}.txt" if folder is not None else None

    def load(self) -> set[str]:
        path = self.path
        if path is None:
            return set()
        try:
            with open(path, encoding="ascii", errors="replace") as fh:
                return {line.strip() for line in fh if _DIGEST.match(line.strip())}
        except OSError:
            return set()

    def add(self, digests: Iterable[str]) -> None:
        """Append ``digests`` (one write of whole lines, so processes appending at once don't
        interleave within a line); a file past ``MAX_LINES`` starts over."""
        path = self.path
        new = sorted({d for d in digests if _DIGEST.match(d)})
        if path is None or not new:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists() and path.stat().st_size > MAX_LINES * 33:
                path.unlink()
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, "".join(f"{d}\n" for d in new).encode("ascii"))
            finally:
                os.close(fd)
        except OSError:
            pass


__all__ = ["DigestSet", "digest", "directory", "machine_id"]
