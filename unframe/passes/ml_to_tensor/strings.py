"""Strings at the edge of a model, for targets that hold none (Core ML, TensorRT).

Inputs: a string input read only by lookups (``OneHotEncoder`` ``cats_strings``,
``LabelEncoder`` ``keys_strings``), directly or through ops that only select or reshape values
(``Gather`` of columns, ``Slice``, ``Reshape``...), becomes an int64 input holding the index of
each value in a vocabulary, the union of those lookups' keys (-1 for any other value, which every
lookup treats as unknown); the lookups are rewritten to take the indices::

    Before::  city: string [N, 1] -> OneHotEncoder(cats_strings=[LA, NY])
    After::   city: int64 [N, 1]  -> OneHotEncoder(cats_int64s=[0, 1])   vocabulary [LA, NY]

Outputs: a string output that is a lookup into a constant table of strings (a classifier's
labels, after lowering: ``Gather(labels, index)``), possibly reshaped, becomes that index::

    Before::  index -> Gather(["cat", "dog"]) -> Reshape -> label: string
    After::   index -> Reshape -> label: int64                 labels ["cat", "dog"]

Either way the mapping is stated (the report, model metadata and provenance), applied on the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.errors import Blocker
from unframe.passes.ml_to_tensor.builder import Names
from unframe.passes.ml_to_tensor.registry import ML_DOMAIN, attr_value

S = ir.DataType.STRING
I64 = ir.DataType.INT64
# ops that only carry values to another shape: a label index passes through them unchanged
SHAPE_ONLY = frozenset({"Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten"})
# ML ops whose string output is a lookup into a constant table once lowered
STRING_TABLES = frozenset({"TreeEnsembleClassifier", "LinearClassifier", "SVMClassifier",
                           "LabelEncoder", "ArrayFeatureExtractor"})
LOOKUPS = {"OneHotEncoder": "cats_strings", "LabelEncoder": "keys_strings"}
# ops that pick or reshape values of their first input: indices travel through them unchanged
SELECTS = SHAPE_ONLY | {"Gather", "GatherElements", "Slice", "Transpose", "Expand", "Tile"}


def _is_string(value: ir.Value) -> bool:
    return value.dtype == S


def has_strings(model: ir.Model) -> bool:
    return any(_is_string(v) for v in [*model.graph.inputs, *model.graph.outputs])


def check(model: ir.Model) -> list[Blocker]:
    out = []
    for value in model.graph.inputs:
        if _is_string(value):
            out += _reach(value)[1]
    for value in model.graph.outputs:
        if _is_string(value) and _string_source(value) is None:
            out.append(Blocker("output", f"string output {value.name!r} is not a lookup into a "
                               "constant label table", hint="keep the onnx target"))
    return out


def _reach(value: ir.Value) -> tuple[list[tuple[ir.Node, int]], list[Blocker]]:
    """Every node the strings of ``value`` reach (through SELECTS) with the input index they
    arrive on, and the blockers: readers that are neither selections nor lookups."""
    reached, blockers, stack, seen = [], [], [value], set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        for node, index in v.uses():
            reached.append((node, index))
            standard = node.domain in ("", "ai.onnx")
            if standard and node.op_type in SELECTS and index == 0:
                stack.extend(node.outputs)
            elif not (node.domain == ML_DOMAIN and node.op_type in LOOKUPS
                      and attr_value(node, LOOKUPS[node.op_type])):
                blockers.append(Blocker(node.op_type, f"string input {value.name!r} is read by "
                                        f"{node.op_type}, which no host-side index mapping covers",
                                        node.name, node.domain,
                                        "encode the strings before the model, or keep the onnx target"))
    return reached, blockers


def _string_source(value: ir.Value) -> ir.Node | None:
    """The node that picks the strings of ``value`` from a constant table, through shape-only ops."""
    node = value.producer()
    while node is not None and node.domain in ("", "ai.onnx") and node.op_type in SHAPE_ONLY:
        node = node.inputs[0].producer() if node.inputs and node.inputs[0] is not None else None
    if node is None:
        return None
    if node.domain == ML_DOMAIN and node.op_type in STRING_TABLES:
        return node
    if node.domain in ("", "ai.onnx") and node.op_type == "Gather" and _constant(node.inputs[0]) is not None:
        return node
    return None


def _constant(value: ir.Value | None) -> np.ndarray | None:
    if value is None:
        return None
    if value.const_value is not None and not value.is_graph_input():
        return value.const_value.numpy()
    node = value.producer()
    if node is not None and node.op_type == "Constant" and "value" in node.attributes:
        return node.attributes["value"].value.numpy()
    return None


# -- inputs ----------------------------------------------------------------------------------------

def encode_inputs(model: ir.Model, names: Names, opset: int) -> dict[str, list[str]]:
    """Turn string inputs into vocabulary indices; return {input: vocabulary}."""
    vocab_of: dict[str, list[str]] = {}
    for value in model.graph.inputs:
        if not _is_string(value):
            continue
        reached, _ = _reach(value)
        lookups = [n for n, _ in reached if n.domain == ML_DOMAIN and n.op_type in LOOKUPS]
        vocab: list[str] = []
        for node in lookups:
            for key in attr_value(node, LOOKUPS[node.op_type]):
                if key not in vocab:
                    vocab.append(key)
        for node in lookups:
            _as_index_lookup(node, vocab)
        for node, _ in reached:
            if node.domain in ("", "ai.onnx") and node.op_type in SELECTS:
                for out in node.outputs:
                    out.type = ir.TensorType(I64)
        value.type = ir.TensorType(I64)
        vocab_of[value.name] = vocab
    return vocab_of


def _as_index_lookup(node: ir.Node, vocab: list[str]) -> None:
    attr = LOOKUPS[node.op_type]
    keys = [vocab.index(k) for k in attr_value(node, attr)]
    del node.attributes[attr]
    new = "cats_int64s" if node.op_type == "OneHotEncoder" else "keys_int64s"
    node.attributes[new] = ir.AttrInt64s(new, keys)


# -- outputs ---------------------------------------------------------------------------------------

def encode_outputs(model: ir.Model, names: Names, opset: int) -> dict[str, list[str]]:
    """Turn string outputs (lookups into constant tables) into indices; return {output: labels}."""
    labels_of: dict[str, list[str]] = {}
    for value in list(model.graph.outputs):
        if not _is_string(value):
            continue
        gather = _string_source(value)
        if gather is None or gather.op_type != "Gather":  # check() refused it before lowering
            continue
        table = _constant(gather.inputs[0])
        index = gather.inputs[1]
        labels = [s.decode() if isinstance(s, bytes) else str(s) for s in np.asarray(table).reshape(-1)]
        position = list(model.graph.outputs).index(value)
        name = value.name
        out = gather.outputs[0]
        index64 = _int64(model.graph, gather, index, names)
        out.replace_all_uses_with(index64, replace_graph_outputs=True)
        new_output = model.graph.outputs[position]
        _retype_chain(new_output)
        if new_output.name != name:  # the Gather fed the output directly: keep the output's name
            out.name = names.fresh(f"{name}_strings")
            if index64.is_graph_input() or any(o is index64 for o in model.graph.outputs[:position]):
                new_output = _identity(model.graph, index64, names)
                model.graph.outputs[position] = new_output
            new_output.name = name
        labels_of[name] = labels
    return labels_of


def _int64(graph: ir.Graph, anchor: ir.Node, index: ir.Value, names: Names) -> ir.Value:
    if index.dtype == I64:
        return index
    node = ir.Node("", "Cast", [index], [ir.AttrInt64("to", int(I64))],
                   name=names.fresh("mlt_label_index_cast"))
    node.outputs[0].name = names.fresh("mlt_label_index")
    node.outputs[0].type = ir.TensorType(I64)
    graph.insert_before(anchor, node)
    return node.outputs[0]


def _identity(graph: ir.Graph, value: ir.Value, names: Names) -> ir.Value:
    node = ir.Node("", "Identity", [value], name=names.fresh("mlt_label_identity"))
    node.outputs[0].type = ir.TensorType(I64)
    graph.append(node)
    return node.outputs[0]


def _retype_chain(value: ir.Value) -> None:
    """The shape-only ops between the index and the output now carry int64."""
    node: Any = value.producer()
    value.type = ir.TensorType(I64)
    while node is not None and node.op_type in SHAPE_ONLY:
        node.outputs[0].type = ir.TensorType(I64)
        node = node.inputs[0].producer() if node.inputs[0] is not None else None
