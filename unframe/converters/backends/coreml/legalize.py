"""Dtype legalization: move every tensor to an element type the MIL op it feeds accepts, once,
before translation.

MIL has four element types a translated graph carries: fp16, fp32, int32 and bool (ONNX int64,
int8, uint8... all travel as int32 and float64 as fp32: see ``context.MIL_DTYPES``). Each MIL op
states which of them each input takes (its *type domain*, in coremltools' op specs); ONNX is
more permissive (``GatherND`` takes a bool tensor, ``Relu`` and ``Pad`` take integers, ``ReduceMax``
takes bool...). This pass reads the domains from coremltools' registry for the deployment target,
and where a node's ONNX inputs hold a type the MIL op refuses, it wraps the node in ONNX ``Cast``
nodes: the inputs that share the type variable move to a type the op takes, and the outputs of that
type variable are cast back, so the rest of the graph sees the types it had::

    before:  mask(bool)  ─► GatherND(indices) ─► picked(bool) ─► Where ...
    after:   mask(bool)  ─► Cast(to=INT32) ─► GatherND(indices) ─► picked'(int32)
                                                    ─► Cast(to=BOOL) ─► picked(bool) ─► Where ...

    before:  ids(int64) ─► Relu ─► out(int64)
    after:   ids(int64) ─► Cast(to=FLOAT) ─► Relu ─► out'(float) ─► Cast(to=INT64) ─► out(int64)

bool moves through int32 where the op takes it (exact), else through fp32 (0/1 are exact in any
float type); integers move to fp32 (exact up to 2**24 in magnitude), and such a node and its casts stay in
float32 when Core ML computes the rest of the program in fp16 (``KEEP_FP32``), where integers
past 2048 would not survive. What a node's translator
feeds each ONNX input into is stated once, in :data:`MIL_INPUTS`; an op not listed there is left
as is (its translator takes every type ONNX allows, or the dry translation of ``check`` reports it).

Float constants under fp16 compute (the default precision): a finite constant beyond fp16's range
(a mask's ``finfo(float32).min``) would become -inf when Core ML computes in fp16, and a row whose
every score is -inf softmaxes to NaN where float32 gives a uniform row; such constants saturate to
+/-65504 instead, which keeps the masking and float32's behaviour (infinities stay infinite)::

    before:  Where(keep, scores, -3.4e38)      after:  Where(keep, scores, -65504)

64-bit integers: MIL has none. A 64-bit integer *constant* whose values fit in int32 is narrowed
as it is (the translators' ``np_const``); one that does not fit is accepted only where saturating
it to the int32 range keeps its meaning (``Slice`` starts/ends, ``Clip`` bounds, ``Min``/``Max``:
ONNX uses INT64_MAX for "to the end"; ``NonMaxSuppression``'s max_output_boxes_per_class, which the
translation caps at the number of boxes), directly or through ops that only carry it there
(``Unsqueeze``, ``Concat``...). Anywhere else it is a blocker: the pass has no proof the value
survives. 64-bit graph inputs come in as int32 (a note says so).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from unframe.converters.backends.coreml.context import MIL_DTYPES
from unframe.errors import Blocker
from unframe.opset import is_default_domain
from unframe.passes import KEEP_FP32, keeps_fp32

# ONNX op -> (the MIL op its translator hands the ONNX inputs to, {ONNX input index: MIL input
# name}); "*" stands for every input of a variadic op. Only inputs passed straight through are
# listed: a translator that already picks its own types (Div, Pow, Mod, Sign, Clip on integers)
# needs no entry.
MIL_INPUTS: dict[str, tuple[str, dict[int | str, str]]] = {
    "Add": ("add", {0: "x", 1: "y"}),
    "Sub": ("sub", {0: "x", 1: "y"}),
    "Mul": ("mul", {0: "x", 1: "y"}),
    "Max": ("maximum", {"*": "x"}),
    "Min": ("minimum", {"*": "x"}),
    "Sum": ("add", {"*": "x"}),
    "Mean": ("real_div", {"*": "x"}),
    "Abs": ("abs", {0: "x"}),
    "Neg": ("mul", {0: "x"}),
    "Equal": ("equal", {0: "x", 1: "y"}),
    "Greater": ("greater", {0: "x", 1: "y"}),
    "Less": ("less", {0: "x", 1: "y"}),
    "GreaterOrEqual": ("greater_equal", {0: "x", 1: "y"}),
    "LessOrEqual": ("less_equal", {0: "x", 1: "y"}),
    "Where": ("select", {1: "a", 2: "b"}),
    "Relu": ("relu", {0: "x"}),
    "LeakyRelu": ("leaky_relu", {0: "x"}),
    "PRelu": ("prelu", {0: "x"}),
    "MatMul": ("matmul", {0: "x", 1: "y"}),
    "Gemm": ("matmul", {0: "x", 1: "y"}),
    "Gather": ("gather", {0: "x"}),
    "GatherElements": ("gather_along_axis", {0: "x"}),
    "GatherND": ("gather_nd", {0: "x"}),
    "ScatterElements": ("scatter_along_axis", {0: "data", 2: "updates"}),
    "ScatterND": ("scatter_nd", {0: "data", 2: "updates"}),
    "TopK": ("topk", {0: "x"}),
    "CumSum": ("cumsum", {0: "x"}),
    "ArgMax": ("reduce_argmax", {0: "x"}),
    "ArgMin": ("reduce_argmin", {0: "x"}),
    **{op: (mil, {0: "x"}) for op, mil in {
        "ReduceSum": "reduce_sum", "ReduceMean": "reduce_mean", "ReduceMax": "reduce_max",
        "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod", "ReduceL1": "reduce_l1_norm",
        "ReduceL2": "reduce_l2_norm", "ReduceLogSum": "reduce_log_sum",
        "ReduceLogSumExp": "reduce_log_sum_exp", "ReduceSumSquare": "reduce_sum_square"}.items()},
    "Reshape": ("reshape", {0: "x"}),
    "Flatten": ("reshape", {0: "x"}),
    "Squeeze": ("squeeze", {0: "x"}),
    "Unsqueeze": ("expand_dims", {0: "x"}),
    "Transpose": ("transpose", {0: "x"}),
    "Split": ("split", {0: "x"}),
    "Slice": ("slice_by_index", {0: "x"}),
    "Expand": ("add", {0: "x"}),
    "Tile": ("tile", {0: "x"}),
    "Pad": ("pad", {0: "x"}),
    "DepthToSpace": ("depth_to_space", {0: "x"}),
    "SpaceToDepth": ("space_to_depth", {0: "x"}),
    "ReverseSequence": ("reverse_sequence", {0: "x"}),
    "MaxPool": ("max_pool", {0: "x"}),
    "Resize": ("resize_bilinear", {0: "x"}),
    "NonZero": ("non_zero", {0: "x"}),
}

# The element types a translated graph carries, as MIL names, and the ONNX type that stands for each.
_ONNX_OF = {"fp32": ir.DataType.FLOAT, "fp16": ir.DataType.FLOAT16, "int32": ir.DataType.INT32,
            "bool": ir.DataType.BOOL}
# Where a type moves when the op refuses it: first choice first.
_MOVES = {"bool": ("int32", "fp32", "fp16"), "int32": ("fp32", "fp16"), "fp16": ("fp32",),
          "fp32": ("fp16",)}
# (op, input index) where an out-of-range 64-bit constant may be saturated to int32 without
# changing the result ("*": any input).
_SATURATING: set[tuple[str, int | str]] = {("Slice", 1), ("Slice", 2), ("Clip", 1), ("Clip", 2),
                                           ("Max", "*"), ("Min", "*"),
                                           # max_output_boxes_per_class: capped at the box count
                                           ("NonMaxSuppression", 2)}
_I32 = np.iinfo(np.int32)
_WIDE_INTS = {ir.DataType.INT64, ir.DataType.UINT64, ir.DataType.UINT32}


@dataclass
class Legalized:
    """What the pass did: casts inserted (one line per node), notes and blockers."""

    moved: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    blockers: list[Blocker] = field(default_factory=list)


def legalize(model: ir.Model, ios: int, precision: str = "fp16") -> Legalized:
    """Insert the casts (in place), saturate float constants to fp16's range under fp16 compute
    and check 64-bit integer constants; see the module docstring."""
    from unframe.version_converter.types import infer_types

    out = Legalized()
    nodes = [n for n in ir.traversal.RecursiveGraphIterator(model.graph)
             if is_default_domain(n.domain) and n.op_type in MIL_INPUTS]
    untyped = [v for n in nodes for v in (*n.inputs, *n.outputs) if v is not None and v.dtype is None]
    if untyped:
        infer_types(model, untyped)
    for node in nodes:
        _legalize_node(node, ios, out)
    out.blockers.extend(_wide_constant_blockers(model))
    out.notes.extend(_wide_input_notes(model))
    if precision == "fp16":
        saturated = _fit_fp16(model)
        if saturated:
            out.notes.append(f"{len(saturated)} float constant(s) beyond fp16's range saturated to "
                             f"+/-65504 for fp16 compute ({', '.join(saturated[:3])})")
    return out


# -- one node -----------------------------------------------------------------------------------

def _legalize_node(node: ir.Node, ios: int, out: Legalized) -> None:
    mil_op, params = MIL_INPUTS[node.op_type]
    groups = _type_groups(node)
    for type_str, (inputs, outputs) in groups.items():
        listed = [i for i in inputs if _param(params, i) is not None]
        if not listed:
            continue
        held = {_mil_name(node.inputs[i]) for i in inputs if node.inputs[i] is not None}
        held.discard(None)
        if len(held) != 1:
            continue  # unknown or mixed (an invalid graph): the translator decides
        have = held.pop()
        allowed = _allowed(mil_op, [_param(params, i) for i in listed], ios)
        if allowed is None or have in allowed:
            continue
        to = next((t for t in _MOVES.get(have, ()) if t in allowed), None)
        if to is None:
            out.blockers.append(Blocker(node.op_type, f"{mil_op} takes {'/'.join(sorted(allowed))} "
                                        f"and this node's {type_str} is {have}", node.name,
                                        hint="cast the tensor in the model to a type the op takes"))
            continue
        _wrap(node, inputs, outputs, _ONNX_OF[to], keep_fp32=have == "int32" and to == "fp32")
        out.moved.append(f"{node.op_type} {node.name or ''} {have} -> {to}".replace("  ", " "))


def _param(params: dict[int | str, str], index: int) -> str | None:
    return params.get(index) or params.get("*")


def _type_groups(node: ir.Node) -> dict[str, tuple[list[int], list[int]]]:
    """ONNX type variable -> (input indices, output indices) bound to it, from the op's schema."""
    import onnx

    try:
        schema = onnx.defs.get_schema(node.op_type, 21, "")
    except Exception:  # no schema: nothing to group by
        return {}
    groups: dict[str, tuple[list[int], list[int]]] = {}
    for i in range(len(node.inputs)):
        formal = schema.inputs[min(i, len(schema.inputs) - 1)] if schema.inputs else None
        if formal is not None and (i < len(schema.inputs) or _variadic(formal)):
            groups.setdefault(formal.type_str, ([], []))[0].append(i)
    for j in range(len(node.outputs)):
        if j < len(schema.outputs):
            groups.setdefault(schema.outputs[j].type_str, ([], []))[1].append(j)
    return groups


def _variadic(formal: object) -> bool:
    import onnx

    return getattr(formal, "option", None) == onnx.defs.OpSchema.FormalParameterOption.Variadic


def _mil_name(value: ir.Value | None) -> str | None:
    if value is None or value.dtype is None:
        return None
    return MIL_DTYPES.get(value.dtype)


@functools.cache
def _domain(mil_op: str, param: str, ios: int) -> frozenset[str] | None:
    """The MIL types ``mil_op``'s input ``param`` takes at ``ios``, from coremltools' op spec
    (None where the spec states none, e.g. a tuple input)."""
    from coremltools.converters.mil.mil import types
    from coremltools.converters.mil.mil.input_type import TensorInputType
    from coremltools.converters.mil.mil.ops.helper import _get_version_of_op
    from coremltools.converters.mil.mil.ops.registry import SSAOpRegistry

    from unframe.converters.backends.coreml.context import ct_target

    cls = _get_version_of_op(SSAOpRegistry.core_ops[mil_op], ct_target(ios))
    spec = cls.input_spec.input_types.get(param)
    if not isinstance(spec, TensorInputType):
        return None
    domain = spec.type_domain or getattr(cls, "type_domains", {}).get(spec.type_domain_id, ())
    names = {types.builtin_to_string(t) for t in domain}
    return frozenset(names & set(_ONNX_OF)) or None


def _allowed(mil_op: str, params: Iterable[str | None], ios: int) -> frozenset[str] | None:
    found = [_domain(mil_op, p, ios) for p in params if p is not None]
    found = [d for d in found if d is not None]
    if not found:
        return None
    return frozenset.intersection(*found)


def _wrap(node: ir.Node, inputs: list[int], outputs: list[int], to: ir.DataType, *, keep_fp32: bool = False) -> None:
    """Cast ``node``'s ``inputs`` to ``to`` and its ``outputs`` back to their own types.
    ``keep_fp32``: integers moved to float32 stay there in an fp16 program (the node and its
    casts marked ``KEEP_FP32``), where they are exact below 2**24 instead of 2048: a detector's
    anchor indices of up to 9,207 went through fp16 otherwise."""
    graph = node.graph
    assert graph is not None
    if keep_fp32:
        node.metadata_props[KEEP_FP32] = "1"
    for i in inputs:
        value = node.inputs[i]
        if value is None:
            continue
        cast = ir.node("Cast", [value], {"to": to}, name=f"{node.name or node.op_type}_legal_in{i}")
        cast.outputs[0].type, cast.outputs[0].shape = ir.TensorType(to), value.shape
        cast.outputs[0].name = f"{value.name}_as_{to.name.lower()}_{node.name or id(node)}"
        if keep_fp32:
            cast.metadata_props[KEEP_FP32] = "1"
        graph.insert_before(node, cast)
        node.replace_input_with(i, cast.outputs[0])
    for j in outputs:
        back = _cast_back(node, node.outputs[j], to)
        if keep_fp32:
            back.metadata_props[KEEP_FP32] = "1"


def _cast_back(node: ir.Node, value: ir.Value, computed: ir.DataType) -> ir.Node:
    """``value`` is now computed as ``computed``: a Cast after the node restores its old type
    under its old name, for every consumer and graph output."""
    graph = node.graph
    assert graph is not None
    original, name = value.dtype, value.name
    uses = [(user, index) for user, index in value.uses()]
    value.name = f"{name}_as_{computed.name.lower()}"
    # a new type object: a clone shares its types with the model it was cloned from
    value.type = ir.TensorType(computed)
    back = ir.node("Cast", [value], {"to": original}, name=f"{node.name or node.op_type}_legal_out")
    restored = back.outputs[0]
    restored.name, restored.type, restored.shape = name, ir.TensorType(original), value.shape
    graph.insert_after(node, back)
    for user, index in uses:
        user.replace_input_with(index, restored)
    outputs = graph.outputs
    for k, graph_output in enumerate(outputs):
        if graph_output is value:
            outputs[k] = restored
    return back


# -- float constants under fp16 compute ---------------------------------------------------------

_FP16_MAX = float(np.finfo(np.float16).max)
_FLOATS = {ir.DataType.FLOAT, ir.DataType.DOUBLE}


def _fit_fp16(model: ir.Model) -> list[str]:
    """Saturate finite float constants beyond fp16's range; the names of those changed. The model
    is a clone whose tensors are shared with the caller's: each is replaced, never written to."""
    changed = []
    for graph in (model.graph, *_subgraphs(model)):
        for value in graph.initializers.values():
            if _read_in_fp32(value):
                continue  # every reader computes in float32 (kept, or FLOAT32_INSIDE): it holds the value
            if value.dtype in _FLOATS and value.const_value is not None:
                fitted = _fitted(value.const_value.numpy())
                if fitted is not None:
                    value.const_value = ir.tensor(fitted, name=value.name)
                    changed.append(value.name)
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        attr = node.attributes.get("value") if node.op_type == "Constant" else None
        if attr is not None and attr.type == ir.AttributeType.TENSOR and attr.value.dtype in _FLOATS:
            fitted = _fitted(attr.value.numpy())
            if fitted is not None:
                node.attributes["value"] = ir.AttrTensor("value", ir.tensor(fitted))
                changed.append(node.outputs[0].name)
    return changed


def _read_in_fp32(value: ir.Value) -> bool:
    from unframe.validate.rounding import computes_in_fp32

    uses = list(value.uses())
    return bool(uses) and all(keeps_fp32(user) or computes_in_fp32(user) for user, _ in uses)


def _fitted(array: np.ndarray) -> np.ndarray | None:
    """``array`` with finite values beyond fp16's range saturated, or None if none are (checked
    in slices: a 1 GB embedding makes no tensor-sized temporaries)."""
    from unframe.converters.backends.coreml.passes import magnitudes

    if not any(np.any(np.isfinite(part) & (part > _FP16_MAX)) for part in magnitudes(array)):
        return None
    finite = np.isfinite(array)
    return np.where(finite, np.clip(array, -_FP16_MAX, _FP16_MAX), array).astype(array.dtype)


# -- 64-bit integers ---------------------------------------------------------------------------

def _constant_values(model: ir.Model) -> Iterable[tuple[ir.Value, np.ndarray]]:
    for graph in (model.graph, *_subgraphs(model)):
        for value in graph.initializers.values():
            if value.dtype in _WIDE_INTS and value.const_value is not None:
                yield value, value.const_value.numpy()
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.op_type == "Constant" and is_default_domain(node.domain) and "value" in node.attributes:
            tensor = node.attributes["value"].value
            if tensor.dtype in _WIDE_INTS:
                yield node.outputs[0], tensor.numpy()


def _subgraphs(model: ir.Model) -> list[ir.Graph]:
    found = []
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                found.append(attr.value)
            elif attr.type == ir.AttributeType.GRAPHS:
                found.extend(attr.value)
    return found


def _wide_constant_blockers(model: ir.Model) -> list[Blocker]:
    """A 64-bit constant beyond int32 is a blocker unless every consumer saturates it safely."""
    out = []
    for value, array in _constant_values(model):
        if array.size == 0 or (array.min() >= _I32.min and array.max() <= _I32.max):
            continue
        unsafe = _unsafe_use(value)
        if unsafe is None:
            continue
        user = unsafe
        worst = array.max() if array.max() > _I32.max else array.min()
        out.append(Blocker(user.op_type, f"64-bit constant {value.name!r} holds {int(worst)}, beyond "
                           "int32 (CoreML has no 64-bit integers)", user.name,
                           hint="keep integer values within +/-2**31 in the model"))
    return out


# Ops that carry a value through unchanged (in position): a saturated constant stays safe through
# them when their own result is used safely (Slice ends built by Unsqueeze + Concat, for one).
_CARRIERS = {("Identity", 0), ("Unsqueeze", 0), ("Squeeze", 0), ("Reshape", 0), ("Concat", "*"),
             ("Cast", 0), ("Expand", 0), ("Tile", 0)}


def _unsafe_use(value: ir.Value, depth: int = 0) -> ir.Node | None:
    """The first consumer of ``value`` where saturating it to int32 could change the result."""
    for user, index in value.uses():
        if (user.op_type, index) in _SATURATING or (user.op_type, "*") in _SATURATING:
            continue
        carried = (user.op_type, index) in _CARRIERS or (user.op_type, "*") in _CARRIERS
        if not carried or depth > 8:
            return user
        for out in user.outputs:
            found = _unsafe_use(out, depth + 1)
            if found is not None:
                return found
    return None


def _wide_input_notes(model: ir.Model) -> list[str]:
    wide = [v.name for v in model.graph.inputs
            if v.dtype in _WIDE_INTS and v.name not in model.graph.initializers]
    if not wide:
        return []
    return [f"64-bit integer input(s) {', '.join(wide)} come in as int32 (values must lie within "
            "+/-2**31)"]
