"""Generic adapters, used for a step that has no dedicated adapter.

* compatible: the change does not touch this node (only new dtypes or new attributes/inputs the node
  does not use, attributes left at their default);
* type restriction: a dtype-only change; refused on a downgrade when the node's dtype is not allowed
  at the target.

Both check the node against the target schema: every attribute known (or at its default), the
input/output count in range, every known dtype allowed. Steps whose semantics change without a
signature change (e.g. Softmax at 13) are listed in ``SEMANTIC_CHANGES`` and never taken generically.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.types import check_types, type_string

if TYPE_CHECKING:
    from onnx.defs import OpSchema

# (domain, op, since_version): behaviour changes there without a visible signature change.
SEMANTIC_CHANGES: dict[tuple[str, str, int], str] = {
    ("", "Softmax", 13): "the axis semantics changed at opset 13 (input coerced to 2D before)",
    ("", "LogSoftmax", 13): "the axis semantics changed at opset 13 (input coerced to 2D before)",
    ("", "Hardmax", 13): "the axis semantics changed at opset 13 (input coerced to 2D before)",
    ("", "Resize", 11): "Resize-10 has fixed asymmetric coordinates; Resize-11 added modes",
    ("", "Scan", 9): "Scan-8 has a batch axis and sequence_lens; Scan-9 has neither",
    ("", "GridSample", 20): "GridSample modes were renamed at opset 20 (bilinear->linear, bicubic->cubic)",
    ("", "Max", 8): "multidirectional broadcasting was added at opset 8",
    ("", "Min", 8): "multidirectional broadcasting was added at opset 8",
    ("", "Sum", 8): "multidirectional broadcasting was added at opset 8",
    ("", "Mean", 8): "multidirectional broadcasting was added at opset 8",
    ("", "Upsample", 9): "Upsample's scales moved from an attribute to an input at opset 9",
    ("", "DFT", 20): "DFT's axis moved from an attribute to an input at opset 20",
    ("", "Dropout", 12): "Dropout's ratio moved from an attribute to an input at opset 12",
}

# Ops whose axis attribute counts dimensions of the output rather than of the first input.
_AXIS_OF_OUTPUT = {"Unsqueeze", "OneHot"}


def _count(values: Any) -> int:
    n = len(values)
    while n and values[n - 1] is None:
        n -= 1
    return n


def _attr_equals_default(attr: ir.Attr, schema: OpSchema | None) -> bool:
    if schema is None or attr.name not in schema.attributes:
        return False
    default = schema.attributes[attr.name].default_value
    if default is None or default.type == 0:
        return False
    import onnx

    value = onnx.helper.get_attribute_value(default)
    mine = attr.value
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(mine, (list, tuple)) or isinstance(value, (list, tuple)):
        return list(mine) == list(value)
    if isinstance(value, float):
        return abs(float(mine) - value) < 1e-7
    return mine == value


def generic_step(node: ir.Node, step: Step, *, semantics_handled: bool = False) -> None:
    """Take a step that doesn't affect this node, or refuse and say what the target can't express.

    ``semantics_handled``: an adapter that already dealt with a semantic change calls this for the
    structural checks.
    """
    if step.to_schema is None:
        step.refuse(f"{node.op_type} does not exist at opset {step.to_version}")
    why = SEMANTIC_CHANGES.get((step.domain, node.op_type, max(step.from_version, step.to_version)))
    if why and not semantics_handled:
        step.refuse(f"{why}; no adapter for this node")
    key = _cache_key(node, step)
    verdict = _VERDICTS.get(key)
    if verdict is None:
        verdict = _VERDICTS[key] = _structural_verdict(node, step)
    problems, droppable = list(verdict[0]), verdict[1]
    negative = _negative_axes_fix(node, step)
    if isinstance(negative, str):
        problems.append(negative)
    if problems:
        if not droppable and len(check_types(node, step.to_schema)) == len(problems):
            # dtypes are the only problems: an exact wider type may do
            from unframe.version_converter.widen import widen

            if widen(node, step):  # computed in an exactly wider type instead
                return
        step.refuse("; ".join(problems))
    for name in droppable:
        node.attributes.pop(name)
    if isinstance(negative, tuple):
        step.set_attr(*negative)


def clean_verdict(node: ir.Node, step: Step) -> tuple[str, ...] | None:
    """The attributes the step would drop when it is a clean generic step for ``node`` (no semantic
    change, nothing the target lacks, no negative axes to fix); None when it is not. Changes nothing."""
    if step.to_schema is None or step.to_schema.deprecated:
        return None
    if (step.domain, node.op_type, max(step.from_version, step.to_version)) in SEMANTIC_CHANGES:
        return None
    if not step.upgrade and step.from_version == 11:
        return None  # negative axes may need the input rank
    key = _cache_key(node, step)
    verdict = _VERDICTS.get(key)
    if verdict is None:
        verdict = _VERDICTS[key] = _structural_verdict(node, step)
    return None if verdict[0] else verdict[1]


# the structural verdict only depends on the op, the step, the attributes the target lacks, the
# input/output counts and the dtypes: cached, as big models repeat the same few node kinds
_VERDICTS: dict[tuple[Any, ...], tuple[tuple[str, ...], tuple[str, ...]]] = {}
# list attributes whose schema has no default but whose implicit value is "all ones"
_IMPLICIT_ONES = {"dilations", "strides"}


def node_key(node: ir.Node) -> tuple[Any, ...]:
    """The part of a verdict's cache key that only depends on the node: its op, attribute names,
    input/output counts and dtypes (the same for every generic step of one node's walk)."""
    types = tuple(type_string(v.type) if v is not None else None for v in (*node.inputs, *node.outputs))
    return (node.op_type, tuple(sorted(node.attributes)), _count(node.inputs), len(node.outputs),
            _count(node.outputs), types)


def _cache_key(node: ir.Node, step: Step) -> tuple[Any, ...]:
    new = step.to_schema
    extra = tuple((n, repr(a.value)) for n, a in node.attributes.items() if n not in new.attributes)
    mine = step.node_key if step.node_key is not None else node_key(node)
    return (step.domain, step.from_version, step.to_version, tuple(sorted(extra)), mine)


def _structural_verdict(node: ir.Node, step: Step) -> tuple[tuple[str, ...], tuple[str, ...]]:
    old, new = step.from_schema, step.to_schema
    problems: list[str] = []
    droppable = []
    for name, attr in node.attributes.items():
        if name in new.attributes:
            continue
        if _attr_equals_default(attr, old) or (
                name in _IMPLICIT_ONES and isinstance(attr.value, (list, tuple)) and all(v == 1 for v in attr.value)):
            droppable.append(name)
        else:
            problems.append(f"attribute {name!r} does not exist at opset {step.to_version}")
    for name, a in new.attributes.items():
        if a.required and name not in node.attributes:
            problems.append(f"attribute {name!r} is required at opset {step.to_version}")
    n_in, n_out = _count(node.inputs), _count(node.outputs)
    if not new.min_input <= n_in <= new.max_input:
        problems.append(f"{n_in} inputs, opset {step.to_version} takes {new.min_input}..{new.max_input}")
    if n_out > new.max_output or len(node.outputs) < new.min_output:
        problems.append(f"{n_out} outputs, opset {step.to_version} gives {new.min_output}..{new.max_output}")
    problems += check_types(node, new)
    return tuple(problems), tuple(droppable)


def _negative_axes_fix(node: ir.Node, step: Step) -> tuple[str, Any] | str | None:
    """Negative axes are only allowed from opset 11: make them positive on the way down."""
    if step.upgrade or step.from_version != 11:
        return None
    for name in ("axis", "axes"):
        value = step.attr(name)
        if value is None:
            continue
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if all(v >= 0 for v in values):
            return None
        ref = node.outputs[0] if node.op_type in _AXIS_OF_OUTPUT else (node.inputs[0] if node.inputs else None)
        rank = step.rank(ref)
        if rank is None:
            return f"negative {name} needs a known rank below opset 11"
        fixed = [v + rank if v < 0 else v for v in values]
        return (name, fixed if isinstance(value, (list, tuple)) else fixed[0])
    return None
