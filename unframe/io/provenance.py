"""Provenance in an ONNX artifact: ``unframe.*`` keys in ``metadata_props``, and the source file's
sha256.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import onnx_ir as ir

PROVENANCE_PREFIX = "unframe."


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    if path.is_dir():
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            h.update(str(f.relative_to(path)).encode())
            h.update(_file_digest(f).encode())
        return h.hexdigest()
    return _file_digest(path)


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def stamp_onnx(model: ir.Model, provenance: dict[str, str]) -> None:
    for k, v in provenance.items():
        model.metadata_props[f"{PROVENANCE_PREFIX}{k}"] = v


def read_provenance(metadata_props: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in metadata_props.items():
        if k.startswith(PROVENANCE_PREFIX):
            key = k[len(PROVENANCE_PREFIX):]
            try:
                out[key] = json.loads(v)
            except (ValueError, TypeError):
                out[key] = v
    return out
