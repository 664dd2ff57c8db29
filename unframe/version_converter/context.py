"""What an adapter sees: the node, the step it is taking, and helpers to fold, build and refuse."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np
import onnx_ir as ir

import unframe.version_converter.fold as _fold

if TYPE_CHECKING:
    from onnx.defs import OpSchema

    from unframe.version_converter.walker import Walker


class Refused(Exception):
    """An adapter can't express the node at the next opset; ``reason`` says why (one line)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Step:
    """One schema step of one node, e.g. ``Split`` from opset 18 to 17."""

    walker: Walker
    node: ir.Node
    domain: str
    from_version: int
    to_version: int
    from_schema: OpSchema | None
    to_schema: OpSchema | None
    replaced: bool = False
    new_nodes: list[ir.Node] = field(default_factory=list)
    # generic.node_key(node) when the walker already knows it (unchanged since the node's last step)
    node_key: tuple[Any, ...] | None = None

    # -- facts ----------------------------------------------------------------------------------
    @property
    def upgrade(self) -> bool:
        return self.to_version > self.from_version

    @property
    def graph(self) -> Any:
        return self.node.graph

    def refuse(self, reason: str) -> NoReturn:
        raise Refused(reason)

    def fold(self, value: ir.Value | None) -> np.ndarray | None:
        """The value as a numpy array when it is a constant or computable from constants/static shapes."""
        return _fold.fold(value, self.walker.opset_of)

    def rank(self, value: ir.Value | None) -> int | None:
        if value is None or value.shape is None:
            return None
        return len(value.shape)

    def static_shape(self, value: ir.Value | None) -> tuple[int, ...] | None:
        if value is None or value.shape is None:
            return None
        dims = tuple(value.shape)
        if all(isinstance(d, int) for d in dims):
            return dims  # type: ignore[return-value]
        return None

    def input(self, index: int) -> ir.Value | None:
        ins = self.node.inputs
        return ins[index] if index < len(ins) else None

    # -- building -------------------------------------------------------------------------------
    def add_node(self, op: str, inputs: Sequence[ir.Value | None],
                 attributes: Mapping[str, Any] | Iterable[ir.Attr] = (), *, num_outputs: int = 1,
                 domain: str = "", version: int | None = None) -> ir.Node:
        """Insert a node before the current one; it is valid at ``version`` (default: this step's
        target) and the walker converts it on to the final target."""
        attrs = _to_attrs(attributes)
        new = ir.Node(domain, op, list(inputs), attrs, num_outputs=num_outputs,
                      name=self.walker.fresh_name(f"{self.node.name or self.node.op_type}_{op}"))
        for out in new.outputs:
            out.name = self.walker.fresh_name(f"{new.name}_out")
        self.graph.insert_before(self.node, new)
        self.walker.register_new(new, self.to_version if version is None else version)
        self.new_nodes.append(new)
        return new

    def op(self, op: str, inputs: Sequence[ir.Value | None], attributes: Mapping[str, Any] | Iterable[ir.Attr] = (),
           **kw: Any) -> ir.Value:
        """``add_node`` returning its single output."""
        return self.add_node(op, inputs, attributes, **kw).outputs[0]

    def const(self, array: Any, dtype: Any = None) -> ir.Value:
        arr = np.asarray(array, dtype=dtype)
        # ir.Tensor, not ir.tensor(): the convenience function's Protocol checks cost ~0.1 ms a call
        tensor = ir.Tensor(arr) if arr.dtype.kind in "biuf" else ir.tensor(arr)
        graph = self.graph
        if self.walker.targets.get("", 99) < 9 and arr.dtype.kind != "f" and isinstance(graph, ir.Graph):
            # Constant only holds float tensors before opset 9: an initializer holds anything
            value = ir.Value(name=self.walker.fresh_name(f"{self.node.name or self.node.op_type}_const"),
                             const_value=tensor, type=ir.TensorType(tensor.dtype), shape=ir.Shape(arr.shape))
            graph.register_initializer(value)
            return value
        out = self.op("Constant", [], {"value": tensor})
        out.type, out.shape = ir.TensorType(tensor.dtype), ir.Shape(arr.shape)
        return out

    def replace_with(self, outputs: Sequence[ir.Value | None]) -> None:
        """Make ``outputs`` take the place of the current node's outputs and remove the node."""
        replace_node_outputs(self.node, outputs)
        self.replaced = True

    def set_attr(self, name: str, value: Any) -> None:
        self.node.attributes[name] = _to_attrs({name: value})[0]

    def drop_attr(self, name: str) -> Any:
        attr = self.node.attributes.pop(name, None)
        return None if attr is None else attr.value

    def attr(self, name: str, default: Any = None) -> Any:
        attr = self.node.attributes.get(name)
        if attr is None:
            return default
        return attr.value


def _to_attrs(attributes: Mapping[str, Any] | Iterable[ir.Attr]) -> list[ir.Attr]:
    if not isinstance(attributes, Mapping):
        return list(attributes)
    out = []
    for name, value in attributes.items():
        if isinstance(value, ir.Attr):
            out.append(value)
        elif isinstance(value, (bool, int, np.integer)):  # a DataType too (an IntEnum): Cast's "to"
            out.append(ir.AttrInt64(name, int(value)))  # the common cases without Protocol checks
        elif isinstance(value, (float, np.floating)):
            out.append(ir.AttrFloat32(name, float(value)))
        elif isinstance(value, str):
            out.append(ir.AttrString(name, value))
        elif isinstance(value, ir.Tensor):
            out.append(ir.AttrTensor(name, value))
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, np.integer)) for v in value):
            out.append(ir.AttrInt64s(name, [int(v) for v in value]))
        elif isinstance(value, (list, tuple)) and all(isinstance(v, (float, np.floating, int)) for v in value):
            out.append(ir.AttrFloat32s(name, [float(v) for v in value]))
        elif isinstance(value, (list, tuple)):
            out.append(ir.AttrStrings(name, [str(v) for v in value]))
        else:
            out.append(ir.convenience.convert_attribute(name, value))
    return out


def replace_node_outputs(node: ir.Node, outputs: Sequence[ir.Value | None]) -> None:
    """Rewire every use of ``node``'s outputs (graph outputs included, names kept) and remove it."""
    graph = node.graph
    for old, new in zip(node.outputs, outputs, strict=False):
        if new is None:
            if old.uses() or old.is_graph_output():
                raise Refused(f"output {old.name!r} has no equivalent at the target opset")
            continue
        name = old.name
        if new.type is None:
            new.type = old.type
        if new.shape is None and old.shape is not None:
            new.shape = old.shape
        old.replace_all_uses_with(new, replace_graph_outputs=True)
        if name:
            old.name = f"{name}__replaced"
            new.name = name
    graph.remove(node, safe=True)
