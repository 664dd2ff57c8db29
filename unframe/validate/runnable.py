"""What running a model for parity needs, checked before a runtime is handed it.

Its weights must fit the memory budget (``--max-memory``), and no Loop may run a constant trip
count past ``limits.MAX_LOOP_TRIPS`` with nothing that can end it early (a runtime would run it to
the end, however long that takes).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from unframe import io, limits
from unframe.errors import ResourceLimitError

if TYPE_CHECKING:
    import onnx_ir as ir


def check_runnable(model: ir.Model, where: str) -> None:
    """What running ``model`` for parity needs, before a runtime is asked to: its weights within
    the memory budget, and no Loop whose constant trip count runs without an exit condition."""
    weights = io.tensor_bytes(model)
    limits.check_alloc(weights, f"running {where} for parity (its weights)",
                       "pass --no-validate to convert without running it, or raise --max-memory")
    for node in _loops(model):
        trips = _constant_trips(node)
        if trips is not None and trips > limits.MAX_LOOP_TRIPS and _runs_to_count(node):
            label = node.name or "Loop"
            raise ResourceLimitError(
                f"{where}: Loop {label!r} runs {trips} iterations (a constant trip count with no exit "
                f"condition; parity runs at most {limits.MAX_LOOP_TRIPS})",
                "pass --no-validate to convert without running it")


def _loops(model: ir.Model) -> Iterator[ir.Node]:
    import onnx_ir as ir

    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.op_type == "Loop" and node.domain in ("", "ai.onnx"):
            yield node


def _constant_trips(node: ir.Node) -> int | None:
    if not node.inputs or node.inputs[0] is None or node.inputs[0].const_value is None:
        return None
    try:
        values = node.inputs[0].const_value.numpy().reshape(-1)
    except Exception:  # noqa: BLE001 - unreadable constants are reported by the runtime itself
        return None
    return int(values[0]) if values.size == 1 and values.dtype.kind in "iu" else None


def _runs_to_count(node: ir.Node) -> bool:
    """True when nothing can end the Loop early: no condition input (or a constant true one) and
    a body whose condition output is its condition input passed through (or constant true)."""
    cond = node.inputs[1] if len(node.inputs) > 1 else None
    if cond is not None and not _const_true(cond):
        return False
    body = node.attributes.get("body")
    if body is None or not body.value.outputs or len(body.value.inputs) < 2:
        return False
    out = body.value.outputs[0]
    while out.producer() is not None and out.producer().op_type == "Identity" and out.producer().inputs:
        out = out.producer().inputs[0]
        if out is None:
            return False
    return out is body.value.inputs[1] or _const_true(out)


def _const_true(value: ir.Value) -> bool:
    const = value.const_value
    if const is None:
        return False
    try:
        arr = const.numpy()
    except Exception:  # noqa: BLE001
        return False
    return arr.size == 1 and bool(arr.reshape(-1)[0])
