"""The pass: every ``ai.onnx.ml`` node of the main graph replaced by standard ONNX nodes.

Before::   X -> Scaler -> TreeEnsembleClassifier -> (label, probabilities)      [ai.onnx.ml]
After::    X -> Sub/Mul -> Gather/LessOrEqual/... -> (label, probabilities)       [ai.onnx only]

``check`` lists every node no lowering takes (with the reason) before anything changes;
``lower`` rewrites the model in place and reports what it decided: the tree strategy of each
ensemble, and the host-side mappings that stand in for strings where the target holds none
(``encode_strings``): a string input becomes the int64 index of its value in a stated vocabulary
(-1 for a value outside it), a string output the int64 index into a stated label list, and a
ZipMap output the plain probability matrix with a stated column order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import onnx_ir as ir

import unframe.passes.ml_to_tensor.strings as string_io
from unframe.errors import Blocker, UnsupportedError
from unframe.opset import main_opset
from unframe.passes import KEEP_FP32
from unframe.passes.ml_to_tensor.builder import MIN_OPSET, Emitter, Names
from unframe.passes.ml_to_tensor.compile import GEMM_MAX_DEPTH
from unframe.passes.ml_to_tensor.registry import LOWERINGS, ML_DOMAIN, LowerContext, Unsupported
from unframe.version_converter.context import replace_node_outputs

MAPPING_KEY = "unframe.host_mappings"  # metadata_props of the lowered model


@dataclass
class LowerReport:
    lowered: list[dict[str, Any]] = field(default_factory=list)  # node, op, notes
    input_vocab: dict[str, list[str]] = field(default_factory=dict)
    output_labels: dict[str, list[str]] = field(default_factory=dict)
    zipmap_columns: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.lowered or self.input_vocab or self.output_labels)

    @property
    def mappings(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.input_vocab:
            out["inputs"] = {k: {"encoding": "int64 index into vocabulary, -1 outside it",
                                 "vocabulary": v} for k, v in self.input_vocab.items()}
        if self.output_labels:
            out["outputs"] = {k: {"encoding": "int64 index into labels", "labels": v}
                              for k, v in self.output_labels.items()}
        if self.zipmap_columns:
            out["zipmap"] = {k: {"encoding": "probability matrix, one column per label",
                                 "columns": v} for k, v in self.zipmap_columns.items()}
        return out

    def strategies(self) -> list[str]:
        return [f"{item['node']}: {note}" for item in self.lowered for note in item["notes"]]


def ml_nodes(model: ir.Model) -> list[ir.Node]:
    return [n for n in ir.traversal.RecursiveGraphIterator(model.graph) if n.domain == ML_DOMAIN]


def has_ml_ops(model: ir.Model) -> bool:
    return bool(ml_nodes(model))


def preview(model: ir.Model, gemm_max_depth: int = GEMM_MAX_DEPTH) -> list[str]:
    """The strategy each tree ensemble would get, without lowering (for --explain)."""
    from unframe.passes.ml_to_tensor import trees

    out = []
    for node in ml_nodes(model):
        if node.op_type not in trees.TREE_OPS:
            continue
        try:
            forest = trees.read(node).forest
        except Unsupported:
            continue
        options = {"gemm_max_depth": gemm_max_depth}
        out.append(f"{node.name or node.op_type}: {trees.describe(forest, options)}")
    return out


def check(model: ir.Model, *, encode_strings: bool = False) -> list[Blocker]:
    """Every reason the pass can't lower this model, without changing it."""
    nodes = ml_nodes(model)
    blockers: list[Blocker] = string_io.check(model) if encode_strings else []
    if not nodes:
        return blockers
    opset = main_opset(model)
    if opset is not None and opset < MIN_OPSET:
        blockers.append(Blocker("opset", f"lowering ai.onnx.ml ops needs ONNX opset {MIN_OPSET} or "
                                f"newer, the model has {opset}", hint=f"convert with --opset {MIN_OPSET}"))
    for node in nodes:
        if node.graph is not model.graph:
            blockers.append(_blocker(node, "ai.onnx.ml op inside a subgraph (If/Loop body)"))
            continue
        spec = LOWERINGS.get(node.op_type, None)
        if spec is None:
            blockers.append(_blocker(node, "no lowering to standard ONNX ops for this op",
                                     "keep the model on the onnx target"))
            continue
        for reason in spec.check(node) if spec.check is not None else []:
            blockers.append(_blocker(node, reason))
    return blockers


def _blocker(node: ir.Node, reason: str, hint: str = "") -> Blocker:
    return Blocker(node.op_type, reason, node.name, ML_DOMAIN, hint)


def lower(model: ir.Model, *, encode_strings: bool = False, tree_strategy: str | None = None,
          pin_fp32: bool = False, gemm_max_depth: int = GEMM_MAX_DEPTH) -> LowerReport:
    """Rewrite ``model`` in place (raises UnsupportedError with every blocker). Trees get
    ``tree_strategy``, else the rule of ``compile.choose_strategy`` (GEMM up to
    ``gemm_max_depth``, then perfect traversal to depth 10, then traversal). ``pin_fp32``
    marks every node of the graph ``KEEP_FP32``: a model that held ai.onnx.ml ops decides its
    labels by comparing scores (trees, SVM signs, argmaxes after the ML ops), and a 16-bit
    backend would move those decisions; the lowered nodes are marked either way."""
    report = LowerReport()
    if not has_ml_ops(model) and not (encode_strings and string_io.has_strings(model)):
        return report
    blockers = check(model, encode_strings=encode_strings)
    if blockers:
        raise UnsupportedError(f"ai.onnx.ml ops can't all be lowered to standard ONNX: "
                               f"{len(blockers)} blocker(s)", "see the list",
                               blockers=blockers)
    graph = model.graph
    names = Names(graph)
    opset = main_opset(model) or MIN_OPSET
    if encode_strings:
        report.input_vocab = string_io.encode_inputs(model, names, opset)
    options = {"tree_strategy": tree_strategy, "gemm_max_depth": gemm_max_depth}
    for node in [n for n in graph if n.domain == ML_DOMAIN]:
        ctx = LowerContext(node, Emitter(graph, node, opset, names), options)
        try:
            outputs = LOWERINGS.get(node.op_type).fn(ctx)
        except Unsupported as why:  # check() passed, so this is a gap between check and lowering
            raise UnsupportedError(f"node {node.name!r} [{ML_DOMAIN}::{node.op_type}]: {why.reason}",
                                   "keep the model on the onnx target") from None
        if ctx.zipmap_columns is not None and node.outputs[0].is_graph_output():
            report.zipmap_columns[node.outputs[0].name] = ctx.zipmap_columns
        replace_node_outputs(node, outputs)
        for value in outputs:  # converters declare shapes onnxruntime never checked for ML
            if value is None or value.shape is None:  # ops (skl2onnx's ArrayFeatureExtractor:
                continue  # [N, 2] for [N, 1]): inference decides; an output keeps its rank
            value.shape = ir.Shape([None] * len(value.shape)) if value.is_graph_output() else None
        report.lowered.append({"node": node.name or node.op_type, "op": node.op_type,
                               "notes": list(ctx.notes)})
    if encode_strings:
        report.output_labels = string_io.encode_outputs(model, names, opset)
    _drop_ml_import(model)
    _drop_dead(model)
    if pin_fp32 and report.lowered:
        for node in graph:
            node.metadata_props[KEEP_FP32] = "1"
    if report.mappings:
        model.metadata_props[MAPPING_KEY] = json.dumps(report.mappings, sort_keys=True)
    return report


def _drop_dead(model: ir.Model) -> None:
    """Nodes and tables nothing reads any more: the string tables an index output replaced, a
    constant an alternative did not use (a backend's pre-flight would still see them)."""
    from onnx_ir.passes.common import RemoveUnusedNodesPass

    RemoveUnusedNodesPass()(model)


def _drop_ml_import(model: ir.Model) -> None:
    if not has_ml_ops(model):
        model.graph.opset_imports.pop(ML_DOMAIN, None)
        model.opset_imports.pop(ML_DOMAIN, None)


class MLToTensorPass(ir.passes.InPlacePass):
    """``lower`` as an onnx-ir pass (the report is kept on the pass)."""

    def __init__(self, *, encode_strings: bool = False, tree_strategy: str | None = None,
                 pin_fp32: bool = False) -> None:
        super().__init__()
        self.encode_strings = encode_strings
        self.tree_strategy = tree_strategy
        self.pin_fp32 = pin_fp32
        self.report = LowerReport()

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.report = lower(model, encode_strings=self.encode_strings,
                            tree_strategy=self.tree_strategy, pin_fp32=self.pin_fp32)
        return ir.passes.PassResult(model, modified=self.report.changed)
