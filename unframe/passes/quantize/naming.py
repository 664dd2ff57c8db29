"""The names quantizers address ONNX nodes by: a node's own name, else its op and place.

``QuantRequest.exclude``, the sensitivity pass, the post-processing kept float and the backends'
maps to their own ops (OpenVINO's, Core ML's) all use these names.
"""

from __future__ import annotations

import onnx_ir as ir


def name_nodes(model: ir.Model) -> None:
    """Every node gets a name (the quantizers and the sensitivity pass address nodes by it)."""
    for node, name in zip(model.graph, node_names(model), strict=True):
        node.name = name


def node_names(model: ir.Model) -> list[str]:
    """The name ``name_nodes`` gives each node, in graph order, the graph left as it is: its own,
    else its op and place (``Conv_3``)."""
    taken = {n.name for n in model.graph if n.name}
    names = []
    for i, node in enumerate(model.graph):
        name = node.name
        if not name:
            name = f"{node.op_type}_{i}"
            while name in taken:
                name += "_"
            taken.add(name)
        names.append(name)
    return names
