"""A strict reader of the Universal Binary JSON that XGBoost writes (its ``.ubj`` models and the
buffer a pickled or skops-saved ``Booster`` holds), so that unframe reads the same model XGBoost
will load, before XGBoost does.

Typed arrays (``[$d#L<n>`` then n big-endian values) become numpy arrays; objects become dicts
(a repeated key is refused, as is anything after the root value); every length is checked
against the bytes left, so truncated or crafted input raises ``UBJSONError``, never reads past
the end. Nesting is limited to ``MAX_DEPTH``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

MAX_DEPTH = 64
# marker -> (numpy big-endian dtype, size)
NUMERIC = {b"i": (">i1", 1), b"U": (">u1", 1), b"I": (">i2", 2), b"l": (">i4", 4),
           b"L": (">i8", 8), b"d": (">f4", 4), b"D": (">f8", 8)}
INTEGER = (b"i", b"U", b"I", b"l", b"L")


class UBJSONError(ValueError):
    pass


def loads(data: bytes) -> Any:
    reader = _Reader(memoryview(data))
    value = reader.value(reader.marker(), 0)
    if reader.pos != len(data):
        raise UBJSONError(f"{len(data) - reader.pos} bytes after the root value")
    return value


class _Reader:
    def __init__(self, data: memoryview) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise UBJSONError(f"truncated at byte {self.pos} (wanted {n} more)")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def marker(self) -> bytes:
        while True:
            m = bytes(self.take(1))
            if m != b"N":  # no-op
                return m

    def number(self, m: bytes) -> Any:
        dtype, size = NUMERIC[m]
        return np.frombuffer(self.take(size), dtype=dtype)[0].item()

    def length(self) -> int:
        m = self.marker()
        if m not in INTEGER:
            raise UBJSONError(f"a length must be an integer, got marker {m!r}")
        n = self.number(m)
        if n < 0 or n > len(self.data) - self.pos:
            raise UBJSONError(f"length {n} at byte {self.pos} exceeds the data left")
        return n

    def string(self) -> str:
        try:
            return str(self.take(self.length()), "utf-8")
        except UnicodeDecodeError:
            raise UBJSONError(f"a string before byte {self.pos} is not UTF-8") from None

    def value(self, m: bytes, depth: int) -> Any:
        if m in NUMERIC:
            return self.number(m)
        simple = {b"Z": None, b"T": True, b"F": False}
        if m in simple:
            return simple[m]
        if m in (b"S", b"H"):
            return self.string()
        if m == b"C":
            return chr(self.take(1)[0])
        if m in (b"[", b"{"):
            if depth >= MAX_DEPTH:
                raise UBJSONError(f"nested deeper than {MAX_DEPTH}")
            return self.array(depth + 1) if m == b"[" else self.object(depth + 1)
        raise UBJSONError(f"unknown marker {m!r} at byte {self.pos - 1}")

    def _header(self) -> tuple[bytes | None, int | None]:
        """An optimized container's element type and count, if given."""
        kind = count = None
        if bytes(self.data[self.pos:self.pos + 1]) == b"$":
            self.pos += 1
            kind = self.marker()
            if bytes(self.data[self.pos:self.pos + 1]) != b"#":
                raise UBJSONError("a typed container without a count")
        if bytes(self.data[self.pos:self.pos + 1]) == b"#":
            self.pos += 1
            m = self.marker()
            if m not in INTEGER:
                raise UBJSONError("a container count must be an integer")
            count = self.number(m)
            if count < 0 or count > len(self.data) - self.pos:
                raise UBJSONError(f"container count {count} exceeds the data left")
        return kind, count

    def array(self, depth: int) -> Any:
        kind, count = self._header()
        if kind in NUMERIC and count is not None:
            dtype, size = NUMERIC[kind]
            raw = self.take(count * size)
            return np.frombuffer(raw, dtype=dtype).astype(np.dtype(dtype).newbyteorder("="))
        items = []
        while count is None or len(items) < count:
            m = kind or self.marker()
            if count is None and m == b"]":
                return items
            items.append(self.value(m, depth))
        return items

    def object(self, depth: int) -> dict[str, Any]:
        kind, count = self._header()
        out: dict[str, Any] = {}
        while count is None or len(out) < count:
            if count is None and bytes(self.data[self.pos:self.pos + 1]) == b"}":
                self.pos += 1
                return out
            key = self.string()
            if key in out:
                raise UBJSONError(f"repeated key {key!r}")
            out[key] = self.value(kind or self.marker(), depth)
        return out

