"""A ``.pte`` file's header, read before ExecuTorch's runtime sees the file, and its sidecar.

ExecuTorch's loader aborts the whole process (SIGABRT) on some garbage files: its error message
quotes the bytes where the file identifier should be, and a message that is not UTF-8 throws
inside pybind11's error handling. So no file reaches the runtime before ``read_header`` has
checked what the serializer writes (``executorch/exir/_serialize/_program.py``)::

    0:4    u32   offset of the flatbuffer's root table
    4:8    b"ET" + two digits: the schema's file identifier ("ET12" in 1.5)
    8:12   b"eh00": the extended header, then
    12:16  u32   its length (>= 24)
    16:24  u64   program size (the flatbuffer)
    24:32  u64   segment base offset (0: no segments)
    32:40  u64   segment data size (when the header is that long)

The sidecar ``<program>.pte.json`` records what unframe knows about the program (the names and
bounds of its inputs, what XNNPACK took, the provenance); the TensorRT backend's sidecar
helpers write it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unframe.converters.backends.tensorrt.sidecar import sidecar_path, write_sidecar
from unframe.errors import InputError

SUFFIX = ".pte"
FORMAT = "unframe ExecuTorch program sidecar v1"
HEAD_BYTES = 40
_EXTENDED_MAGIC = b"eh00"
_MIN_EXTENDED = 24

__all__ = ["FORMAT", "Header", "SUFFIX", "is_pte_file", "read_header", "read_sidecar",
           "sha256_of", "sidecar_path", "write_sidecar"]


@dataclass(frozen=True)
class Header:
    identifier: str  # "ET12"
    program_size: int
    segment_base_offset: int
    segment_data_size: int
    file_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {"identifier": self.identifier, "program_bytes": self.program_size,
                "segment_base_offset": self.segment_base_offset,
                "segment_bytes": self.segment_data_size}


def looks_like_pte(head: bytes) -> bool:
    """The file identifier alone: ``ET`` and two digits at bytes 4:8."""
    return len(head) >= 8 and head[4:6] == b"ET" and head[6:8].isdigit()


def is_pte_file(path: Path) -> bool:
    """By suffix, or (for a file named otherwise) by the identifier at bytes 4:8."""
    if path.suffix.lower() == SUFFIX:
        return True
    if not path.is_file():
        return False
    with path.open("rb") as f:
        return looks_like_pte(f.read(8))


def read_header(path: Path) -> Header:
    """The header of ``path``, checked against the file's size; ``InputError`` naming what is
    wrong otherwise (nothing is handed to ExecuTorch)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError as exc:
        raise InputError(f"{path}: can't read it ({exc.strerror or exc})", "check the path") from exc
    return parse_header(head, size, str(path))


def parse_header(head: bytes, size: int, what: str) -> Header:
    hint = "it is not an ExecuTorch program written whole: convert the torch model again"
    if not looks_like_pte(head):
        raise InputError(f"{what}: not an ExecuTorch program (no ET file identifier at byte 4)", hint)
    identifier = head[4:8].decode("ascii")
    if len(head) < HEAD_BYTES or head[8:12] != _EXTENDED_MAGIC:
        raise InputError(f"{what}: an {identifier} file without ExecuTorch's extended header", hint)
    length = int.from_bytes(head[12:16], "little")
    program, base = int.from_bytes(head[16:24], "little"), int.from_bytes(head[24:32], "little")
    segments = int.from_bytes(head[32:40], "little") if length > _MIN_EXTENDED else 0
    root = int.from_bytes(head[0:4], "little")
    if length < _MIN_EXTENDED or not HEAD_BYTES <= program <= size or not 0 < root < program:
        raise InputError(f"{what}: its header gives a program of {program} bytes in a file of "
                         f"{size} (truncated or corrupt)", hint)
    if base and (base < program or base + segments > size):
        raise InputError(f"{what}: its weight segments end at byte {base + segments}, past the "
                         f"file's {size} (truncated)", hint)
    return Header(identifier, program, base, segments, size)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ------------------------------------------------------------------------------------ sidecar --
_STR_FIELDS = ("format", "executorch_version", "torch_version", "precision", "method",
               "program_sha256")
_DICT_FIELDS = ("delegation", "provenance", "bounds")
_LIST_FIELDS = ("inputs", "outputs", "leaves", "notes")


def read_sidecar(path: Path) -> dict[str, Any] | None:
    """The sidecar beside ``path`` when it reads as one unframe wrote; None otherwise (missing,
    not JSON, or fields of other types: then nothing in it is trusted)."""
    side = sidecar_path(path)
    if not side.is_file():
        return None
    try:
        data = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) and well_formed(data) else None


def well_formed(meta: dict[str, Any]) -> bool:
    if meta.get("format") != FORMAT:
        return False
    types = [(_STR_FIELDS, str), (_DICT_FIELDS, dict), (_LIST_FIELDS, list)]
    if any(k in meta and not isinstance(meta[k], kind) for keys, kind in types for k in keys):
        return False
    tensors = [*meta.get("inputs", []), *meta.get("outputs", [])]
    return all(_tensor_ok(t) for t in tensors) and all(_leaf_ok(x) for x in meta.get("leaves", []))


def _tensor_ok(t: Any) -> bool:
    return isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("dtype"), str) \
        and isinstance(t.get("shape"), list) and all(isinstance(d, (int, str)) for d in t["shape"])


def _leaf_ok(leaf: Any) -> bool:
    return isinstance(leaf, dict) and (isinstance(leaf.get("input"), str) or "value" in leaf)
