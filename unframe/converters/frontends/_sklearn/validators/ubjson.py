"""A strict reader of the Universal Binary JSON that XGBoost writes (its ``.ubj`` models and the
buffer a pickled or skops-saved ``Booster`` holds), so that unframe reads the same model XGBoost
will load, before XGBoost does.

Typed arrays (``[$d#L<n>`` then n big-endian values) become read-only big-endian numpy arrays
over the bytes (no copy); objects become dicts
(a repeated key is refused, as is anything after the root value); every length is checked
against the bytes left, so truncated or crafted input raises ``UBJSONError``, never reads past
the end. Nesting is limited to ``MAX_DEPTH``.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

MAX_DEPTH = 64
# marker byte -> (struct format, numpy big-endian dtype, size)
NUMERIC = {ord("i"): (">b", ">i1", 1), ord("U"): (">B", ">u1", 1), ord("I"): (">h", ">i2", 2),
           ord("l"): (">i", ">i4", 4), ord("L"): (">q", ">i8", 8), ord("d"): (">f", ">f4", 4),
           ord("D"): (">d", ">f8", 8)}
INTEGER = frozenset(ord(c) for c in "iUIlL")
SIMPLE = {ord("Z"): None, ord("T"): True, ord("F"): False}
NOOP, DOLLAR, HASH = ord("N"), ord("$"), ord("#")
OPEN_ARRAY, CLOSE_ARRAY, OPEN_OBJECT, CLOSE_OBJECT = ord("["), ord("]"), ord("{"), ord("}")


class UBJSONError(ValueError):
    pass


_STRUCTS = {m: (struct.Struct(fmt), size) for m, (fmt, _, size) in NUMERIC.items()}
_STRING, _HIGH, _CHAR = ord("S"), ord("H"), ord("C")
_INT64 = ord("L")
_INT64_AT = struct.Struct(">q").unpack_from


def loads(data: bytes) -> Any:
    value, pos = _Reader(bytes(data)).read()
    if pos != len(data):
        raise UBJSONError(f"{len(data) - pos} bytes after the root value")
    return value


class _Reader:
    """Recursive descent over the bytes; the hot paths (markers, integers, keys) are inlined
    into few calls because a model holds tens of thousands of tokens."""

    def __init__(self, data: bytes) -> None:
        self.data, self.end = data, len(data)

    def read(self) -> tuple[Any, int]:
        m, pos = self._marker(0)
        return self._value(m, pos, 0)

    def _marker(self, pos: int) -> tuple[int, int]:
        data, end = self.data, self.end
        while pos < end:
            m = data[pos]
            pos += 1
            if m != NOOP:
                return m, pos
        raise UBJSONError(f"truncated at byte {pos}")

    def _number(self, m: int, pos: int) -> tuple[Any, int]:
        unpack, size = _STRUCTS[m]
        if pos + size > self.end:
            raise UBJSONError(f"truncated at byte {pos} (wanted {size} more)")
        return unpack.unpack_from(self.data, pos)[0], pos + size

    def _count(self, pos: int, what: str) -> tuple[int, int]:
        m, pos = self._marker(pos)
        if m not in INTEGER:
            raise UBJSONError(f"{what} must be an integer, got marker {chr(m)!r}")
        n, pos = self._number(m, pos)
        if n < 0 or n > self.end - pos:
            raise UBJSONError(f"{what} {n} at byte {pos} exceeds the data left")
        return n, pos

    def _string(self, pos: int) -> tuple[str, int]:
        n, pos = self._count(pos, "a string length")
        try:
            return self.data[pos:pos + n].decode("utf-8"), pos + n
        except UnicodeDecodeError:
            raise UBJSONError(f"a string at byte {pos} is not UTF-8") from None

    def _value(self, m: int, pos: int, depth: int) -> tuple[Any, int]:
        if m in _STRUCTS:
            return self._number(m, pos)
        if m in SIMPLE:
            return SIMPLE[m], pos
        if m == _STRING or m == _HIGH:
            return self._string(pos)
        if m == _CHAR:
            if pos >= self.end:
                raise UBJSONError(f"truncated at byte {pos}")
            return chr(self.data[pos]), pos + 1
        if m == OPEN_ARRAY or m == OPEN_OBJECT:
            if depth >= MAX_DEPTH:
                raise UBJSONError(f"nested deeper than {MAX_DEPTH}")
            return (self._array if m == OPEN_ARRAY else self._object)(pos, depth + 1)
        raise UBJSONError(f"unknown marker {chr(m)!r} at byte {pos - 1}")

    def _header(self, pos: int) -> tuple[int | None, int | None, int]:
        """An optimized container's element type and count, if given."""
        data, end = self.data, self.end
        if pos < end and data[pos] == DOLLAR:
            kind, pos = self._marker(pos + 1)
            if pos >= end or data[pos] != HASH:
                raise UBJSONError("a typed container without a count")
            count, pos = self._count(pos + 1, "a container count")
            return kind, count, pos
        if pos < end and data[pos] == HASH:
            count, pos = self._count(pos + 1, "a container count")
            return None, count, pos
        return None, None, pos

    def _array(self, pos: int, depth: int) -> tuple[Any, int]:
        data, end = self.data, self.end
        if pos + 12 <= end and data[pos] == DOLLAR and data[pos + 2] == HASH \
                and data[pos + 3] == _INT64 and data[pos + 1] in NUMERIC:  # [$d#L<n>, the usual
            _, dtype, size = NUMERIC[data[pos + 1]]
            count = _INT64_AT(data, pos + 4)[0]
            pos += 12
            if count < 0 or pos + count * size > end:
                raise UBJSONError(f"typed array of {count} at byte {pos} exceeds the data left")
            # big-endian and read-only, as stored: the checks convert what they compare
            return np.frombuffer(data, dtype=dtype, count=count, offset=pos), pos + count * size
        kind, count, pos = self._header(pos)
        if kind in NUMERIC and count is not None:
            _, dtype, size = NUMERIC[kind]
            if pos + count * size > self.end:
                raise UBJSONError(f"truncated typed array at byte {pos}")
            return np.frombuffer(self.data, dtype=dtype, count=count, offset=pos), pos + count * size
        items: list[Any] = []
        while count is None or len(items) < count:
            if kind is None:
                m, pos = self._marker(pos)
            else:
                m = kind
            if count is None and m == CLOSE_ARRAY:
                return items, pos
            value, pos = self._value(m, pos, depth)
            items.append(value)
        return items, pos

    def _object(self, pos: int, depth: int) -> tuple[dict[str, Any], int]:
        kind, count, pos = self._header(pos)
        data, end = self.data, self.end
        out: dict[str, Any] = {}
        while count is None or len(out) < count:
            if count is None and pos < end and data[pos] == CLOSE_OBJECT:
                return out, pos + 1
            if pos + 9 <= end and data[pos] == _INT64:  # the usual key: an int64 length
                n = _INT64_AT(data, pos + 1)[0]
                if n < 0 or pos + 9 + n > end:
                    raise UBJSONError(f"a key length {n} at byte {pos} exceeds the data left")
                try:
                    key = data[pos + 9:pos + 9 + n].decode("utf-8")
                except UnicodeDecodeError:
                    raise UBJSONError(f"a key at byte {pos} is not UTF-8") from None
                pos += 9 + n
            else:
                key, pos = self._string(pos)
            if key in out:
                raise UBJSONError(f"repeated key {key!r}")
            if kind is None:
                m, pos = self._marker(pos)
            else:
                m = kind
            if m == OPEN_ARRAY and depth < MAX_DEPTH:
                out[key], pos = self._array(pos, depth + 1)
            else:
                out[key], pos = self._value(m, pos, depth)
        return out, pos
