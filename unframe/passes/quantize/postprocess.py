"""The post-processing a quantizer leaves in float: what follows a data-dependent selection.

A detector ends in a selection whose output shape depends on the data (``NonZero`` on the scores
over a threshold, ``TopK``, ``NonMaxSuppression``), then gathers, decodes boxes in pixels, and
concatenates. int8 buys nothing there (no weights, few multiply-adds), costs precision where it
shows (a box corner in a 0-800 pixel range moves by 3 pixels a step), and the runtimes' int8
kernels are least tested on the empty tensors a selection can produce (onnxruntime 1.31's
quantized graph of torchvision's RetinaNet crashes on them). So every node downstream of such a
selection stays float, whichever quantizer runs, except weighted layers (``Conv``, ``MatMul``,
``Gemm``): a two-stage detector's box head after its proposals' NMS, or a mixture of experts
after its router's ``TopK``, is where the multiply-adds are, and it is quantized as usual.

Nodes are addressed by the names ``naming.name_nodes`` gives them (the names every quantizer
and ``QuantRequest.exclude`` use).
"""

from __future__ import annotations

import onnx_ir as ir

from unframe.passes.quantize.naming import node_names

SELECTING = frozenset({"NonZero", "NonMaxSuppression", "TopK", "Compress", "Unique"})
WEIGHTED_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})


def after_selection(model: ir.Model) -> list[str]:
    """The names of ``model``'s nodes that a data-dependent selection feeds, directly or through
    others (the selections included), weighted layers left out; in graph order."""
    names = node_names(model)
    reached: set[int] = set()
    frontier = [node for node in model.graph if node.op_type in SELECTING]
    while frontier:
        node = frontier.pop()
        if id(node) in reached:
            continue
        reached.add(id(node))
        frontier.extend(user for out in node.outputs for user, _ in out.uses() if id(user) not in reached)
    return [names[i] for i, node in enumerate(model.graph)
            if id(node) in reached and node.op_type not in WEIGHTED_OPS]


def describe(names: list[str], model: ir.Model) -> str:
    """One line for the notes: how many nodes stayed float after which selections."""
    found = sorted({node.op_type for node in model.graph if node.op_type in SELECTING})
    return (f"post-processing kept in float: the {len(names)} node(s) after the data-dependent "
            f"selection ({', '.join(found)}), weighted layers aside")
