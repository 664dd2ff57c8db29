"""The graph checked at load: known domains and opsets, device configurations, type attributes,
graph inputs, every node against its schema (``checks_nodes.py``), and the dataflow (a value
nothing produces, a cycle).
"""

from __future__ import annotations

from typing import Any

import onnx
import onnx_ir as ir

from unframe.errors import InputError, UnsupportedError
from unframe.io.checks_nodes import all_nodes, check_schemas, node_label
from unframe.opset import DEFAULT_DOMAINS, ML_DOMAIN, main_opset, newest_opset

KNOWN_DOMAINS = {*DEFAULT_DOMAINS, ML_DOMAIN, "ai.onnx.preview.training", "com.microsoft",
                 "ai.onnx.training", "com.ms.internal.nhwc", "org.pytorch.aten", "pkg.onnxscript.torch_lib.common"}


def check_graph(proto: onnx.ModelProto, where: str) -> None:
    """Structural checks with one-line errors: opsets, domains, undefined inputs, cycles."""
    for o in [*proto.opset_import, *(o for f in proto.functions for o in f.opset_import)]:
        if not 0 < o.version < 1 << 31:
            raise InputError(f"{where}: imports opset {o.version} of {o.domain or 'ai.onnx'}, which no "
                             "version of ONNX has", "the model is broken; re-export it")
    newest = newest_opset()
    opset = main_opset(proto)
    if opset is not None and opset > newest:
        raise UnsupportedError(
            f"{where}: opset {opset} is newer than the installed "
            f"onnx {onnx.__version__} knows (up to {newest})",
            "upgrade onnx (pip install -U onnx) or export at an older opset")
    local_fns = {(f.domain, f.name) for f in proto.functions}
    local_domains = {f.domain for f in proto.functions}
    unknown = sorted({n.op_type if not n.domain else f"{n.domain}::{n.op_type}"
                      for n in all_nodes(proto.graph)
                      if n.domain not in KNOWN_DOMAINS and n.domain not in local_domains
                      and (n.domain, n.op_type) not in local_fns})
    if unknown:
        raise UnsupportedError(f"{where}: unknown op domain in {', '.join(unknown[:5])}",
                               "only ai.onnx, ai.onnx.ml and model-local functions are supported")
    if proto.graph.sparse_initializer:
        names = ", ".join(repr(t.values.name) for t in proto.graph.sparse_initializer[:3])
        raise UnsupportedError(f"{where}: sparse initializers ({names}) are not supported",
                               "store them dense (onnx.numpy_helper) and re-export")
    _check_inputs(proto.graph, where)
    check_schemas(proto, where, local_fns)
    _check_type_attributes(proto, where)
    _check_device_configurations(proto, where)
    _check_dataflow(proto, where)


def _check_device_configurations(proto: onnx.ModelProto, where: str) -> None:
    """Multi-device placement (IR 11): every configuration has a name and every node's entry
    names one (onnx-ir reads a missing one as nothing and then can't write the model back)."""
    names = {c.name for c in proto.configuration}
    if "" in names:
        raise InputError(f"{where}: a device configuration has no name", "the model is broken; re-export it")
    nodes = [*all_nodes(proto.graph), *(n for f in proto.functions for n in f.node)]
    for node in nodes:
        for config in node.device_configurations:
            if config.configuration_id not in names:
                raise InputError(f"{where}: {node_label(node)} is placed on device configuration "
                                 f"{config.configuration_id!r}, which the model doesn't define",
                                 "the model is broken; re-export it")


# ai.onnx attributes whose integer value is a TensorProto data type (Cast's "to", the Random*
# and EyeLike "dtype", the window functions' "output_datatype")
TYPE_ATTRIBUTES = frozenset({"to", "dtype", "output_datatype"})


def _check_type_attributes(proto: onnx.ModelProto, where: str) -> None:
    """A data-type attribute holds a data type ONNX defines: the checker lets any integer
    through, and every consumer (shape inference, the CoreML and TensorRT translators) would
    fail on it untyped."""
    nodes = [*all_nodes(proto.graph), *(n for f in proto.functions for n in f.node)]
    for node in nodes:
        if node.domain not in ("", "ai.onnx"):
            continue
        for a in node.attribute:
            if a.name in TYPE_ATTRIBUTES and a.type == onnx.AttributeProto.INT and not _is_data_type(a.i):
                raise InputError(f"{where}: {node.op_type} node {node.name or '(unnamed)'!r} has "
                                 f"{a.name}={a.i}, which is not an ONNX data type",
                                 "the model is broken or written by a newer onnx; re-export it")


def _is_data_type(code: int) -> bool:
    if code == 0:  # UNDEFINED
        return False
    try:
        ir.DataType(code)
    except (ValueError, TypeError):
        return False
    return True


def _check_inputs(graph: onnx.GraphProto, where: str) -> None:
    """Graph inputs have a type a runtime knows and no negative dimension: parity inputs are made
    from them."""
    known = set(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED}
    for v in graph.input:
        which = v.type.WhichOneof("value")
        if which is None:
            raise InputError(f"{where}: input {v.name!r} has no type", "the model is broken; re-export it")
        if which != "tensor_type":
            continue
        t = v.type.tensor_type
        if t.elem_type not in known:
            raise InputError(f"{where}: input {v.name!r} has element type {t.elem_type}, which ONNX doesn't define",
                             "the model is broken; re-export it")
        if any(d.HasField("dim_value") and d.dim_value < 0 for d in t.shape.dim):
            raise InputError(f"{where}: input {v.name!r} has a negative dimension", "the model is broken; re-export it")


def _check_dataflow(proto: onnx.ModelProto, where: str) -> None:
    """Every node input and every output is produced somewhere, once; no graph or function body
    has a cycle (unsorted is fine). Subgraphs see their outer scope; function bodies only their
    inputs."""
    stack: list[tuple[Any, set[str], frozenset[str], list[str]]] = []
    g = proto.graph
    local = {i.name for i in g.input} | {t.name for t in g.initializer}
    stack.append((g.node, local | {t.values.name for t in g.sparse_initializer}, frozenset(),
                  [o.name for o in g.output]))
    for f in proto.functions:
        stack.append((f.node, set(f.input), frozenset(), list(f.output)))
    while stack:  # explicit: subgraph depth is bounded by check_nesting, but stay iterative
        nodes, local, scope, outputs = stack.pop()
        available = set(scope) | local
        producers = _producers(nodes, where, local)
        for node in nodes:
            for name in node.input:
                if name and name not in available and name not in producers:
                    label = node.name or node.op_type
                    raise InputError(f"{where}: node {label!r} ({node.op_type}) reads {name!r}, "
                                     "which nothing produces", "the graph is broken; re-export the model")
        for name in outputs:
            if not name or (name not in available and name not in producers):
                raise InputError(f"{where}: output {name!r} is not produced by any node, input or initializer",
                                 "the graph is broken; re-export the model")
        if not _acyclic(nodes, producers, available):
            raise InputError(f"{where}: the graph has a cycle", "the graph is broken; re-export the model")
        inner = frozenset(available | set(producers))
        for index, node in enumerate(nodes):
            subgraphs = [sub for a in node.attribute for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs)]
            if not subgraphs:
                continue
            # a subgraph sees the values computed before its node, not the node's own outputs
            # nor anything computed from them (a hidden cycle no runtime can order)
            seen = inner - _downstream(nodes, index, producers)
            for sub in subgraphs:
                sub_local = {i.name for i in sub.input} | {t.name for t in sub.initializer}
                stack.append((sub.node, sub_local | {t.values.name for t in sub.sparse_initializer}, seen,
                              [o.name for o in sub.output]))


def _downstream(nodes: Any, start: int, producers: dict[str, int]) -> set[str]:
    """The values node ``start`` produces and every value computed from them in ``nodes``."""
    readers: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        for name in node.input:
            readers.setdefault(name, []).append(i)
    out: set[str] = set()
    todo, done = [start], {start}
    while todo:
        node = nodes[todo.pop()]
        for name in node.output:
            if name and producers.get(name) is not None:
                out.add(name)
                for reader in readers.get(name, ()):
                    if reader not in done:
                        done.add(reader)
                        todo.append(reader)
    return out


def _producers(nodes: Any, where: str, defined: set[str]) -> dict[str, int]:
    """Which node writes each value; a second writer (or a node writing over one of the graph's
    inputs or initializers) is a broken graph that every runtime would read differently."""
    producers: dict[str, int] = {}
    for idx, node in enumerate(nodes):
        for o in node.output:
            if not o:
                continue
            if o in producers or o in defined:
                label = node.name or node.op_type
                raise InputError(f"{where}: node {label!r} ({node.op_type}) writes {o!r}, which is "
                                 "already defined", "each value must have one producer; re-export the model")
            producers[o] = idx
    return producers


def _acyclic(nodes: Any, producers: dict[str, int], available: set[str]) -> bool:
    """Kahn's algorithm: linear in nodes and edges, so a hostile graph can't make it quadratic."""
    users: list[list[int]] = [[] for _ in range(len(nodes))]
    pending = [0] * len(nodes)
    for idx, node in enumerate(nodes):
        deps = {producers[i] for i in node.input if i and i in producers and i not in available}
        pending[idx] = len(deps)
        for d in deps:
            users[d].append(idx)
    ready = [i for i, n in enumerate(pending) if n == 0]
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        for u in users[i]:
            pending[u] -= 1
            if pending[u] == 0:
                ready.append(u)
    return done == len(nodes)
