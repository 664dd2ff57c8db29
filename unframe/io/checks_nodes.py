"""Every node of a loaded graph against its operator's schema: its arity, attributes and their
types, model-local function calls, and the attributes native kernels trust without checking
(attention head counts, axes, Split sizes, Einsum equations).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import onnx

from unframe.errors import InputError
from unframe.opset import ML_DOMAIN


def all_nodes(g: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in g.node:
        yield node
        for a in node.attribute:
            if a.HasField("g"):
                yield from all_nodes(a.g)
            for sub in a.graphs:
                yield from all_nodes(sub)


# AttributeProto fields that must be set for each attribute type
_ATTR_FIELD = {onnx.AttributeProto.GRAPH: "g", onnx.AttributeProto.TENSOR: "t",
               onnx.AttributeProto.SPARSE_TENSOR: "sparse_tensor", onnx.AttributeProto.TYPE_PROTO: "tp"}


def check_schemas(proto: onnx.ModelProto, where: str, local_fns: set[tuple[str, str]]) -> None:
    """Every ai.onnx / ai.onnx.ml node exists at the opset the model imports and matches its
    schema: input and output counts, attribute names, types and required attributes. What
    reads a node after loading (passes, translators, runtimes) relies on this."""
    imports = _imports(proto.opset_import)
    for node in all_nodes(proto.graph):
        _check_node(node, imports, where, local_fns)
    for f in proto.functions:
        f_imports = _imports(f.opset_import)
        for node in f.node:
            _check_node(node, f_imports, where, local_fns, in_function=True)
    _check_function_calls(proto, where)


def _check_function_calls(proto: onnx.ModelProto, where: str) -> None:
    """A call of a model-local function may omit an input (empty or past the end) only where
    the body doesn't need it: inlined, ``Max(a, b, "")`` is what crashed onnxruntime before."""
    from unframe.opset import FALLBACK_OPSET, norm_domain

    functions = {(f.domain, f.name): f for f in proto.functions}
    callers = [*all_nodes(proto.graph), *(n for f in proto.functions for n in f.node)]
    for call in callers:
        f = functions.get((call.domain, call.op_type))
        if f is None:
            continue
        omitted = {name for k, name in enumerate(f.input) if k >= len(call.input) or not call.input[k]}
        if not omitted:
            continue
        imports = _imports(f.opset_import)
        for body in f.node:
            domain = norm_domain(body.domain)
            if domain not in ("", ML_DOMAIN) or (body.domain, body.op_type) in functions:
                continue
            sig = _signature(body.op_type, imports.get(domain, FALLBACK_OPSET), domain)
            if sig is None:
                continue
            needed = set(sig.required_inputs)
            if sig.variadic_from is not None:
                needed |= set(range(sig.variadic_from, len(body.input)))
            bad = [body.input[i] for i in sorted(needed) if i < len(body.input) and body.input[i] in omitted]
            if bad:
                raise InputError(f"{where}: {node_label(call)} calls function {f.name!r} without its input "
                                 f"{bad[0]!r}, which the function's {body.op_type} needs",
                                 "the model is broken; re-export it")


def _imports(opset_import: Any) -> dict[str, int]:
    from unframe.opset import norm_domain

    return {norm_domain(o.domain): o.version for o in opset_import}


def _check_node(node: onnx.NodeProto, imports: dict[str, int], where: str,
                local_fns: set[tuple[str, str]], in_function: bool = False) -> None:
    from unframe.opset import FALLBACK_OPSET, norm_domain

    for a in node.attribute:  # in every domain: onnx-ir reads a missing one as an empty value
        field = _ATTR_FIELD.get(a.type)
        if field and not a.HasField(field) and not (in_function and a.ref_attr_name):
            raise InputError(f"{where}: {node_label(node)} has attribute {a.name!r} without its value",
                             "the model is broken; re-export it")
    domain = norm_domain(node.domain)
    if domain not in ("", ML_DOMAIN) or (node.domain, node.op_type) in local_fns:
        return
    version = imports.get(domain, FALLBACK_OPSET if domain == "" else None)
    if version is None:
        raise InputError(f"{where}: {node_label(node)} is in {domain}, which the model doesn't import",
                         "the model is broken; re-export it")
    sig = _signature(node.op_type, version, domain)
    if sig is None:
        raise InputError(f"{where}: {node_label(node)} doesn't exist in {domain or 'ai.onnx'} opset {version}",
                         "the model is broken or uses another opset; re-export it")
    given = len(node.input)  # omitted optional inputs are "" and count: min_input includes them
    if not sig.min_input <= given <= sig.max_input:
        raise InputError(f"{where}: {node_label(node)} has {given} inputs; opset {version} takes "
                         f"{_arity(sig.min_input, sig.max_input)}", "the model is broken; re-export it")
    empty = [i for i in sig.required_inputs if i < given and not node.input[i]]
    if sig.variadic_from is not None:  # (onnxruntime crashes on Max(a, b, ""))
        empty += [i for i in range(sig.variadic_from, given) if not node.input[i]]
    if empty:
        raise InputError(f"{where}: {node_label(node)} leaves its required input {empty[0]} empty",
                         "the model is broken; re-export it")
    outs = len(node.output)
    if not sig.min_output <= outs <= sig.max_output:
        raise InputError(f"{where}: {node_label(node)} has {outs} outputs; opset {version} gives "
                         f"{_arity(sig.min_output, sig.max_output)}", "the model is broken; re-export it")
    _check_attributes(node, sig, where, in_function)


def node_label(node: onnx.NodeProto) -> str:
    return f"node {node.name or node.op_type!r} ({node.op_type})"


@dataclass(frozen=True)
class _Signature:
    """What the node checks read of an op's schema (the pybind schema object is slow to ask)."""

    min_input: int
    max_input: int
    min_output: int
    max_output: int
    attributes: dict[str, tuple[int, str, bool]]  # name -> (AttributeProto type, type name, required)
    required_inputs: tuple[int, ...] = ()  # positions that may not be left empty ("")
    variadic_from: int | None = None  # a variadic last input: none of its entries may be empty


@functools.lru_cache(maxsize=4096)
def _signature(op: str, version: int, domain: str) -> _Signature | None:
    try:
        schema = onnx.defs.get_schema(op, version, domain)
    except onnx.defs.SchemaError:
        return None
    attrs = {name: (int(a.type), a.type.name, bool(a.required)) for name, a in schema.attributes.items()}
    option = onnx.defs.OpSchema.FormalParameterOption
    required = tuple(i for i, p in enumerate(schema.inputs) if p.option == option.Single)
    variadic = next((i for i, p in enumerate(schema.inputs) if p.option == option.Variadic), None)
    return _Signature(schema.min_input, schema.max_input, schema.min_output, schema.max_output, attrs,
                      required, variadic)


def _arity(low: int, high: int) -> str:
    return str(low) if low == high else f"{low} to {high}" if high < 2**30 else f"at least {low}"


def _check_attributes(node: onnx.NodeProto, sig: _Signature, where: str, in_function: bool) -> None:
    seen: set[str] = set()
    for a in node.attribute:
        spec = sig.attributes.get(a.name)
        if spec is None:
            raise InputError(f"{where}: {node_label(node)} has an attribute {a.name!r} its schema doesn't define",
                             "the model is broken; re-export it")
        if a.name in seen:
            raise InputError(f"{where}: {node_label(node)} sets attribute {a.name!r} twice",
                             "the model is broken; re-export it")
        seen.add(a.name)
        if in_function and a.ref_attr_name:
            continue  # bound to the caller's attribute when the function is called
        if a.type != spec[0]:
            given = onnx.AttributeProto.AttributeType.Name(a.type) \
                if a.type in onnx.AttributeProto.AttributeType.values() else str(a.type)
            raise InputError(f"{where}: {node_label(node)} has attribute {a.name!r} of type {given}, expected "
                             f"{spec[1]}", "the model is broken; re-export it")
    missing = [name for name, spec in sig.attributes.items() if spec[2] and name not in seen]
    if missing:
        raise InputError(f"{where}: {node_label(node)} lacks the required attribute {missing[0]!r}",
                         "the model is broken; re-export it")
    if node.op_type == "Einsum" and not (in_function and any(a.ref_attr_name for a in node.attribute)):
        _check_einsum(node, where)
    _check_head_counts(node, where)
    _check_split(node, where)
    _check_axis(node, where)


# attention head counts: onnxruntime reads them as 32-bit ints and divides by them (Attention with
# kv_num_heads = 2**32 killed the process with SIGFPE, found by the opset campaign)
_HEAD_COUNTS = ("num_heads", "q_num_heads", "kv_num_heads")


def _check_head_counts(node: onnx.NodeProto, where: str) -> None:
    for a in node.attribute:
        if a.name in _HEAD_COUNTS and a.type == onnx.AttributeProto.INT and not a.ref_attr_name \
                and not 0 <= a.i < 2**31:
            raise InputError(f"{where}: {node_label(node)} has {a.name}={a.i}, which no model has",
                             "the model is broken; re-export it")
    heads = {a.name: a.i for a in node.attribute if a.name in _HEAD_COUNTS and a.type == onnx.AttributeProto.INT}
    q, kv = heads.get("q_num_heads", 0), heads.get("kv_num_heads", 0)
    if bool(q) != bool(kv):  # onnxruntime divides one by the other (kv_num_heads = 0: SIGFPE)
        raise InputError(f"{where}: {node_label(node)} has q_num_heads={q} but kv_num_heads={kv}: "
                         "3-D attention needs both", "the model is broken; re-export it")
    if q and kv and q % kv:
        raise InputError(f"{where}: {node_label(node)} has q_num_heads={q}, not a multiple of kv_num_heads={kv}",
                         "the model is broken; re-export it")


def _check_axis(node: onnx.NodeProto, where: str) -> None:
    """An ``axis`` past 32 bits names no axis of any tensor; onnx's shape inference overflows on
    one (LayerNormalization with axis = 2^63 - 1 and its Mean output segfaulted the process,
    found by the opset campaign)."""
    for a in node.attribute:
        if a.name == "axis" and a.type == onnx.AttributeProto.INT and not a.ref_attr_name \
                and not -(2**31) <= a.i < 2**31:
            raise InputError(f"{where}: {node_label(node)} has axis={a.i}, which no tensor has",
                             "the model is broken; re-export it")


def _check_split(node: onnx.NodeProto, where: str) -> None:
    """Split's num_outputs must count its outputs: onnx's shape inference indexes past its
    vector otherwise and aborts the process (found by the opset campaign: num_outputs=3, four
    outputs)."""
    if node.op_type != "Split" or node.domain not in ("", "ai.onnx"):
        return
    given = next((a for a in node.attribute if a.name == "num_outputs" and not a.ref_attr_name), None)
    if given is not None and given.type == onnx.AttributeProto.INT and given.i != len(node.output):
        raise InputError(f"{where}: {node_label(node)} has num_outputs={given.i} but {len(node.output)} outputs",
                         "the model is broken; re-export it")


# Einsum's notation: comma-separated terms of letters and at most one ellipsis each, then
# optionally "->" and the output's term; spaces anywhere. onnx's shape inference loops forever on
# some strings outside it ("%s%n", found by the check campaign), so nothing else reaches it.
_EINSUM_TERM = r"[A-Za-z ]*(?:\.\.\.[A-Za-z ]*)?"  # one reading of any string: no backtracking


_EINSUM = re.compile(rf"{_EINSUM_TERM}(?:,{_EINSUM_TERM})*(?:->{_EINSUM_TERM})?")


def _check_einsum(node: onnx.NodeProto, where: str) -> None:
    equation = next((a.s for a in node.attribute if a.name == "equation"), b"")
    text = equation.decode("utf-8", "replace")
    if not _EINSUM.fullmatch(text):
        raise InputError(f"{where}: {node_label(node)} has equation {text[:60]!r}, which is not Einsum "
                         "notation (letters, ',', '...' and one '->')", "the model is broken; re-export it")
