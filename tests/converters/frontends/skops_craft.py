"""Crafting model files for the safe-loading tests: a real archive (or booster model) written by
the library, with one thing changed.

A .skops file is a zip of ``schema.json`` (a tree of nodes, each a dict with ``__class__``,
``__module__``, ``__loader__``) and ``.npy`` members; ``Archive`` reads both, finds nodes by
class name, swaps arrays and JSON values, and writes the result. ``ubj_dumps`` writes the
UBJSON XGBoost serializes boosters in, for editing a booster's buffer.
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np


class Archive:
    def __init__(self, path: Path) -> None:
        with zipfile.ZipFile(path) as zf:
            self.members = {n: zf.read(n) for n in zf.namelist()}
        self.schema = json.loads(self.members.pop("schema.json"))

    # -- finding nodes -----------------------------------------------------------------------
    def nodes(self, class_name: str) -> list[dict[str, Any]]:
        """Every node of that class, in schema order."""
        return [n for n in _walk(self.schema) if n.get("__class__") == class_name]

    def node(self, class_name: str, index: int = 0) -> dict[str, Any]:
        found = self.nodes(class_name)
        assert len(found) > index, f"{class_name} not in the archive"
        return found[index]

    @staticmethod
    def state(node: dict[str, Any]) -> dict[str, Any]:
        """The attribute dict of an ObjectNode / the state dict of a TreeNode."""
        return node["content"]["content"]

    # -- values ------------------------------------------------------------------------------
    def array(self, node: dict[str, Any]) -> np.ndarray:
        return np.load(io.BytesIO(self.members[node["file"]]), allow_pickle=False)

    def set_array(self, node: dict[str, Any], arr: np.ndarray) -> None:
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        name = f"crafted_{len(self.members)}.npy"  # a new member: shared arrays stay intact
        self.members[name] = buf.getvalue()
        self.unshare(node)
        node["file"] = name

    def edit_array(self, node: dict[str, Any], fn: Any) -> None:
        arr = self.array(node).copy()
        out = fn(arr)
        self.set_array(node, arr if out is None else out)

    def set_json(self, node: dict[str, Any], value: Any) -> None:
        assert node["__loader__"] == "JsonNode", node
        self.unshare(node)
        node["content"] = json.dumps(value)

    def unshare(self, node: dict[str, Any]) -> None:
        """skops writes a value met twice once, then as ``CachedNode`` references to its
        ``__id__`` (equal small ints share one): turn those references into copies of the value
        as it is, so that editing this node changes only this place."""
        saved = node.pop("__id__", None)
        if saved is None:
            return
        original = {k: v for k, v in node.items()}
        for ref in list(_walk(self.schema)):
            if ref.get("__loader__") == "CachedNode" and ref.get("__id__") == saved:
                ref.clear()
                ref.update(json.loads(json.dumps(original)))

    @staticmethod
    def get_json(node: dict[str, Any]) -> Any:
        return json.loads(node["content"])

    def save(self, path: Path) -> Path:
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("schema.json", json.dumps(self.schema))
            for name, data in self.members.items():
                zf.writestr(name, data)
        return path


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "__class__" in item:
                yield item
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))


def class_names(path: Path) -> set[str]:
    """module.class of every node in an archive."""
    arch = Archive(path)
    return {f"{n['__module__']}.{n['__class__']}" for n in _walk(arch.schema)}


# -- UBJSON (XGBoost's serialization) ---------------------------------------------------------

_TYPED = {np.dtype("int8"): b"i", np.dtype("uint8"): b"U", np.dtype("int16"): b"I",
          np.dtype("int32"): b"l", np.dtype("int64"): b"L", np.dtype("float32"): b"d",
          np.dtype("float64"): b"D"}


def ubj_dumps(value: Any) -> bytes:
    if value is None:
        return b"Z"
    if isinstance(value, bool):
        return b"T" if value else b"F"
    if isinstance(value, int):
        return b"L" + struct.pack(">q", value)
    if isinstance(value, float):
        return b"D" + struct.pack(">d", value)
    if isinstance(value, str):
        return b"S" + _ubj_len(len(value.encode())) + value.encode()
    if isinstance(value, np.ndarray):
        marker = _TYPED[value.dtype.newbyteorder("=")]
        return (b"[$" + marker + b"#" + _ubj_len(value.size)
                + value.astype(value.dtype.newbyteorder(">")).tobytes())
    if isinstance(value, list):
        return b"[" + b"".join(ubj_dumps(v) for v in value) + b"]"
    if isinstance(value, dict):
        return b"{" + b"".join(_ubj_len(len(k.encode())) + k.encode() + ubj_dumps(v)
                               for k, v in value.items()) + b"}"
    raise TypeError(type(value))


def _ubj_len(n: int) -> bytes:
    return b"L" + struct.pack(">q", n)
