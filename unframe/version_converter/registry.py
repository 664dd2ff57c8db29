"""The adapter registry: one entry per (domain, op, from_opset, to_opset) step.

Keys follow onnx's C++ converter: an upgrade step into the schema introduced at opset ``v`` is
``(op, v - 1, v)``; a downgrade step out of it is ``(op, v, v - 1)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from unframe.opset import norm_domain
from unframe.registry import Registry

if TYPE_CHECKING:
    import onnx_ir as ir

    from unframe.version_converter.context import Step

AdapterFn = Callable[["ir.Node", "Step"], None]

BUILTIN_ADAPTER_MODULES = [
    f"unframe.version_converter.adapters.{name}"
    for name in ("softmax", "reduce", "split", "squeeze", "clip", "pad", "slice", "topk", "resize",
                 "bitshift",
                 "dropout", "scatter", "variadic", "misc", "scan", "pool", "constant", "tree_ensemble", "rnn", "roi_align", "depth_to_space", "batchnorm", "optional")
]


@dataclass(frozen=True)
class AdapterKey:
    domain: str
    op: str
    from_version: int
    to_version: int

    def __str__(self) -> str:
        dom = f"{self.domain}::" if self.domain else ""
        return f"{dom}{self.op}_{self.from_version}_{self.to_version}"


ADAPTERS: Registry[AdapterFn] = Registry(
    "version-converter adapter", entry_point_group="unframe.adapters",
    builtins=BUILTIN_ADAPTER_MODULES)


# adapters declared ``type_free``: they never refuse, read no inferred type or shape, and only change
# their own node's attributes and inputs (adding Constant nodes), so the walker's fast path, which
# runs without type inference, may take them and undo them
TYPE_FREE: set[AdapterKey] = set()


def adapter(op: str, from_version: int, to_version: int, *, domain: str = "",
            type_free: bool = False) -> Callable[[AdapterFn], AdapterFn]:
    """Register ``fn(node, step)`` as the conversion of ``op`` from ``from_version`` to ``to_version``.

    The function rewrites the node in place (or replaces it through ``step``), or calls
    ``step.refuse(reason)`` *before* changing anything when the node can't be expressed.
    ``type_free``: see ``TYPE_FREE`` (typically an attribute that became a constant input).
    """
    if abs(from_version - to_version) != 1:
        raise ValueError(f"adapter {op} {from_version}->{to_version}: steps are one opset apart")
    dom = norm_domain(domain)
    key = AdapterKey(dom, op, from_version, to_version)
    if type_free:
        TYPE_FREE.add(key)
    return ADAPTERS.decorator(key)


def find_adapter(domain: str, op: str, from_version: int, to_version: int) -> AdapterFn | None:
    return ADAPTERS.get(AdapterKey(domain, op, from_version, to_version), None)


def adapter_table() -> dict[AdapterKey, AdapterFn]:
    """A snapshot of the registry (loaded) for a walk: one lookup per step without the registry lock."""
    return dict(ADAPTERS.items())
