"""The part of skops' loader that unframe validates in: the tree of nodes skops builds from an
archive before it constructs anything, and typed, checked reads of a node's content.

``skops.io.load`` runs in three steps: ``get_tree`` turns ``schema.json`` into nodes (reading
the archive's members into memory, importing nothing from the file), ``audit_tree`` checks their
type names against the trusted list, and ``construct`` builds the objects. unframe runs the
same steps and validates between the first and the last, on the very node objects skops then
constructs from: a node that several places share (skops memoizes by ``__id__``) is one
object, so what is checked is what is built. Arrays are parsed here once, with
``allow_pickle=False``, and handed to skops as the node's constructed value.

These are skops internals (``skops.io._audit``, ``skops.io._utils``, the node classes); this
module is the only place that touches them.
"""

from __future__ import annotations

import json
import math
from typing import Any
from zipfile import ZipFile

import numpy as np


class Invalid(ValueError):
    """A validator's finding: what is wrong with the content (the caller adds where). A check of
    several objects at once sets ``index``: which of them is wrong."""

    def __init__(self, reason: str, index: int | None = None) -> None:
        super().__init__(reason)
        self.index = index


def require(condition: Any, reason: str) -> None:
    if not condition:
        raise Invalid(reason)


def read_tree(zf: ZipFile) -> Any:
    """The root node of the archive, nothing constructed."""
    from skops.io._audit import get_tree
    from skops.io._protocol import PROTOCOL
    from skops.io._utils import LoadContext

    schema = json.loads(zf.read("schema.json"))
    require(isinstance(schema, dict), "schema.json is not an object")
    protocol = schema.get("protocol")
    if not (type(protocol) is int and 0 <= protocol <= PROTOCOL):
        raise Invalid(f"skops protocol {protocol!r} is not one this skops reads (0 to {PROTOCOL})")
    return get_tree(schema, LoadContext(src=zf, protocol=protocol), trusted=None)


def construct(root: Any) -> Any:
    """Build the objects. The caller has checked ``untrusted_types(root)`` (what skops'
    ``audit_tree`` computes, on the same nodes) against the validated types: auditing again
    would walk the whole tree a second time for the same answer."""
    return root.construct()


def untrusted_types(root: Any) -> set[str]:
    """The type names skops does not trust by default, as ``get_untrusted_types`` lists them."""
    return set(root.get_unsafe_set())


def type_name(node: Any) -> str:
    return f"{node.module_name}.{node.class_name}"


def loader(node: Any) -> str:
    """The node kind: how skops will build the object (``ObjectNode``, ``TreeNode``...)."""
    return type(node).__name__


_REDUCE_LOADERS = frozenset({"TreeNode", "LossNode", "ReduceNode"})


def children(node: Any) -> list[tuple[Any, Any]]:
    """(key, child node) of every node skops constructs this one from; a key is a string, or an
    int for a list item (``path`` renders them). A reduce node's ``constructor`` is skipped:
    skops builds it from the node's own type name, which the node's validator covers."""
    from skops.io._audit import Node

    out: list[tuple[Any, Any]] = []
    for key, child in node.children.items():
        if isinstance(child, Node):
            if key != "constructor" or type(node).__name__ not in _REDUCE_LOADERS:
                out.append(("" if key in ("content", "attrs") else key, child))
        elif isinstance(child, list):
            out.extend((i, c) for i, c in enumerate(child) if isinstance(c, Node))
        elif isinstance(child, dict):
            out.extend((k, c) for k, c in child.items() if isinstance(c, Node))
    return out


def path(keys: list[Any]) -> str:
    """``estimators_[3].tree_`` from the keys of a walk."""
    text = "".join(f"[{k}]" if isinstance(k, int) else
                   f".{k}" if k.isidentifier() else f"[{k!r}]" for k in keys if k != "")
    return text.lstrip(".") or "the model"


# --- typed reads ------------------------------------------------------------------------------

def expect(node: Any, *loaders: str) -> None:
    if loader(node) not in loaders:
        raise Invalid(f"{type_name(node)} is stored as {loader(node)}, expected {' or '.join(loaders)}")


def value(node: Any) -> Any:
    """A JSON scalar (int, float, str, bool, None)."""
    expect(node, "JsonNode")
    try:
        return json.loads(node.content)
    except (TypeError, ValueError):
        raise Invalid(f"unreadable JSON value {str(node.content)[:40]!r}") from None


def integer(node: Any, what: str, low: int = 0, high: int = 2**31 - 1) -> int:
    got = value(node) if loader(node) == "JsonNode" else _numpy_scalar(node, what)
    if type(got) is not int:
        raise Invalid(f"{what} is {got!r}, expected an integer")
    if not (low <= got <= high):
        raise Invalid(f"{what} = {got} is outside [{low}, {high}]")
    return got


def number(node: Any, what: str) -> float:
    got = value(node) if loader(node) == "JsonNode" else _numpy_scalar(node, what)
    if not (type(got) in (int, float) and math.isfinite(got)):
        raise Invalid(f"{what} is {got!r}, expected a finite number")
    return float(got)


def _numpy_scalar(node: Any, what: str) -> Any:
    expect(node, "JsonNode", "NdArrayNode")
    arr = _load(node)
    if arr.ndim != 0 and arr.dtype.kind in "iuf":
        raise Invalid(f"{what} is not a numeric scalar")
    return arr.item()


def array(node: Any, what: str, kinds: str = "iufb", ndim: int | None = None) -> np.ndarray:
    """A plain numpy array stored in the archive (no object dtype: read without pickle)."""
    expect(node, "NdArrayNode")
    if not (type_name(node) == "numpy.ndarray"):
        raise Invalid(f"{what} is a {type_name(node)}, expected an array")
    arr = _load(node)
    if arr.dtype.kind not in kinds:
        raise Invalid(f"{what} has dtype {arr.dtype}")
    if not (ndim is None or arr.ndim == ndim):
        raise Invalid(f"{what} has {arr.ndim} dimensions, expected {ndim}")
    node._constructed = arr  # skops builds the object from this very array, parsed once
    return arr


def _load(node: Any) -> np.ndarray:
    if not (getattr(node, "type", None) == "numpy"):
        raise Invalid(f"{type_name(node)} is not stored as a .npy member")
    cached = getattr(node, "_constructed", None)
    if isinstance(cached, np.ndarray):
        return cached
    try:
        node.buffer.seek(0)
        arr = np.load(node.buffer, allow_pickle=False)
    except Exception as exc:  # truncated or corrupt .npy member
        raise Invalid(f"unreadable array ({type(exc).__name__}: {str(exc)[:80]})") from None
    finally:
        node.buffer.seek(0)  # skops reads the buffer again for scalars
    return arr


def mapping(node: Any, what: str) -> dict[str, Any]:
    """A plain dict's entries (string keys) as nodes."""
    expect(node, "DictNode")
    if not (type_name(node) == "builtins.dict"):
        raise Invalid(f"{what} is a {type_name(node)}, expected a dict")
    return dict(node.content)


def sequence(node: Any, what: str, length: int | None = None) -> list[Any]:
    """A list's or tuple's items as nodes."""
    expect(node, "ListNode", "TupleNode")
    if type_name(node) not in ("builtins.list", "builtins.tuple"):
        raise Invalid(f"{what} is a {type_name(node)}, expected a list or tuple")
    items = list(node.content)
    if not (length is None or len(items) == length):
        raise Invalid(f"{what} has {len(items)} items, expected {length}")
    return items


def object_state(node: Any, what: str) -> dict[str, Any]:
    """The attribute dict an ``ObjectNode`` sets on the instance skops makes with ``__new__``."""
    expect(node, "ObjectNode")
    if not (node.attrs is not None):
        raise Invalid(f"{what} has no state")
    return mapping(node.attrs, f"{what}'s state")


def raw_bytes(node: Any, what: str) -> bytes:
    expect(node, "BytesNode", "BytearrayNode")
    return node.content.getvalue()


def is_none(node: Any) -> bool:
    return loader(node) == "JsonNode" and node.content == "null"
