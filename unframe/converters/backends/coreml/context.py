"""What the ONNX -> MIL translators share: the per-node :class:`TranslateContext` and the dtype
helpers, and the deployment target as coremltools names it. This module sits below ``translate``
(the graph walk), ``legalize`` and ``ops/`` (the translators), and imports none of them, so the
translators never import the walk that loads them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx_ir as ir

from unframe.errors import ConversionError
from unframe.opset import attribute_value

if TYPE_CHECKING:
    from coremltools.converters.mil.mil import Var

    from unframe.converters.backends.coreml.translate import GraphTranslator

_D = ir.DataType
# ONNX element types MIL can hold, and what they become.
MIL_DTYPES: dict[ir.DataType, str] = {
    _D.FLOAT: "fp32", _D.FLOAT16: "fp16", _D.DOUBLE: "fp32",
    _D.INT64: "int32", _D.INT32: "int32", _D.INT16: "int32", _D.INT8: "int32",
    _D.UINT8: "int32", _D.UINT16: "int32", _D.UINT32: "int32", _D.BOOL: "bool",
}


def mil_type(dtype: ir.DataType | None) -> Any:
    """The MIL builtin type for an ONNX element type (float32 when unknown)."""
    from coremltools.converters.mil.mil import types

    name = MIL_DTYPES.get(dtype, "fp32") if dtype is not None else "fp32"
    return {"fp32": types.fp32, "fp16": types.fp16, "int32": types.int32,
            "bool": types.bool}[name]


def np_const(value: np.ndarray) -> np.ndarray:
    """A constant as MIL can hold it: 64-bit ints to int32 (saturating), float64 to float32."""
    arr = np.asarray(value)
    if arr.dtype.kind in "iu" and arr.dtype != np.int32:
        info = np.iinfo(np.int32)
        return np.clip(arr.astype(np.int64), info.min, info.max).astype(np.int32)
    if arr.dtype == np.float64:
        return arr.astype(np.float32)
    return arr


# -- the per-node context ------------------------------------------------------------------------

@dataclass
class TranslateContext:
    """What a translator gets: the node, its inputs as MIL vars (None for an omitted optional
    input), the target iOS generation and the graph translator (for subgraphs)."""

    node: ir.Node
    inputs: list[Var | None]
    ios: int
    graph: GraphTranslator
    env: dict[str, Any] = field(default_factory=dict)  # every value visible here (for subgraphs)

    # -- attributes ----------------------------------------------------------------------------
    def attr(self, name: str, default: Any = None) -> Any:
        return attribute_value(self.node, name, default)

    # -- inputs --------------------------------------------------------------------------------
    def has(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def x(self, i: int = 0) -> Var:
        if not self.has(i):
            raise ConversionError(f"node {self.node.name!r} [{self.node.op_type}]: input {i} is missing")
        return self.inputs[i]  # type: ignore[return-value]

    def const(self, i: int) -> np.ndarray | None:
        """The input's value when it is known at conversion time (constants, folded shapes)."""
        if not self.has(i):
            return None
        val = self.inputs[i].val  # type: ignore[union-attr]
        return None if val is None else np.asarray(val)

    def need_const(self, i: int, what: str) -> np.ndarray:
        val = self.const(i)
        if val is None:
            raise ConversionError(
                f"node {self.node.name!r} [{self.node.op_type}]: {what} (input {i}) must be known "
                "at conversion time", "fold it to a constant (e.g. export with static shapes)")
        return val

    def ints(self, i: int) -> list[int] | None:
        val = self.const(i)
        return None if val is None else [int(v) for v in np.asarray(val).reshape(-1)]

    def rank(self, i: int = 0) -> int:
        shape = self.x(i).shape
        if shape is None:
            raise ConversionError(f"node {self.node.name!r} [{self.node.op_type}]: input {i} has an unknown rank")
        return len(shape)

    def shape(self, i: int = 0) -> tuple[Any, ...]:
        return tuple(self.x(i).shape)

    def onnx_in_type(self, i: int) -> ir.DataType | None:
        v = self.node.inputs[i] if i < len(self.node.inputs) else None
        return v.dtype if v is not None else None

    def onnx_out_type(self, i: int = 0) -> ir.DataType | None:
        return self.node.outputs[i].dtype

    def is_float(self, i: int = 0) -> bool:
        from coremltools.converters.mil.mil import types

        return types.is_float(self.x(i).dtype)

    def out_name(self, i: int = 0) -> str:
        return self.graph.names.add(self.node.outputs[i].name)

    def err(self, what: str, hint: str = "") -> ConversionError:
        return ConversionError(f"node {self.node.name!r} [{self.node.op_type}]: {what}", hint)


def ct_target(ios: int) -> Any:
    import coremltools as ct

    return {15: ct.target.iOS15, 16: ct.target.iOS16, 17: ct.target.iOS17,
            18: ct.target.iOS18}[ios]
