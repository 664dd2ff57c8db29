"""The registry of lowerings: one function per ``ai.onnx.ml`` op, ``@lowering("Scaler")``.

A lowering gets a ``LowerContext`` (the node, an ``Emitter`` placed before it, the pass options)
and returns the values that replace the node's outputs, in order. Before anything is written the
pass asks each lowering's ``check`` for the reasons it can't take a node (attribute values the
rewrite does not express), so every blocker of a model is known at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.passes.ml_to_tensor.attrs import Unsupported, attr_value, float_attr
from unframe.passes.ml_to_tensor.builder import Emitter
from unframe.registry import Registry

ML_DOMAIN = "ai.onnx.ml"
_FAMILIES = ("trees", "linear", "svm", "preprocess", "maps")


@dataclass
class LowerContext:
    node: ir.Node
    emit: Emitter
    options: dict[str, Any] = field(default_factory=dict)
    # what the lowering decided, for the route and provenance (e.g. the tree strategy)
    notes: list[str] = field(default_factory=list)
    zipmap_columns: list[Any] | None = None  # a ZipMap's labels: the columns of its tensor

    def attr(self, name: str, default: Any = None) -> Any:
        return attr_value(self.node, name, default)

    def floats(self, name: str) -> np.ndarray | None:
        """A float list attribute, or its ``<name>_as_tensor`` (double) form."""
        return float_attr(self.node, name)

    @property
    def x(self) -> ir.Value:
        value = self.node.inputs[0]
        if value is None:
            raise Unsupported("the input is missing")
        return value


LowerFn = Callable[[LowerContext], Sequence[ir.Value | None]]
CheckFn = Callable[[ir.Node], list[str]]


@dataclass(frozen=True)
class Lowering:
    op_type: str
    fn: LowerFn
    check: CheckFn | None = None
    summary: str = ""  # what the rewrite becomes, for docs/support.md


LOWERINGS: Registry[Lowering] = Registry(
    "ml_to_tensor lowering",
    builtins=[f"unframe.passes.ml_to_tensor.{family}" for family in _FAMILIES])


def lowering(*op_types: str, check: CheckFn | None = None,
             summary: str = "") -> Callable[[LowerFn], LowerFn]:
    """Register ``fn`` as the lowering of each ``ai.onnx.ml`` op type."""

    def deco(fn: LowerFn) -> LowerFn:
        for op_type in op_types:
            LOWERINGS.register(op_type, Lowering(op_type, fn, check, summary))
        return fn

    return deco


__all__ = ["LOWERINGS", "ML_DOMAIN", "LowerContext", "Lowering", "Unsupported", "attr_value",
           "float_attr", "lowering"]
