"""RNN / GRU / LSTM: the batch-first ``layout`` attribute (added at opset 14).

14->13, layout=1 (batch first) becomes the sequence-first layout with Transposes around the node::

    Y, Y_h, Y_c = LSTM(X[b,s,i], ..., initial_h[b,d,h], initial_c[b,d,h], layout=1)
->  Y', Y_h', Y_c' = LSTM(Transpose(X, [1,0,2]), ..., Transpose(initial_h, [1,0,2]),
                          Transpose(initial_c, [1,0,2]))
    Y = Transpose(Y'[s,d,b,h], [2,0,1,3]);  Y_h = Transpose(Y_h', [1,0,2]);  Y_c = Transpose(Y_c', [1,0,2])

W, R, B, sequence_lens and P carry no batch/sequence axes and go through unchanged.
layout=0 (or absent) changes nothing: the generic step drops it.
"""

from __future__ import annotations

import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.generic import generic_step
from unframe.version_converter.moves import require_types
from unframe.version_converter.registry import adapter

# input index -> its permutation between the two layouts (X, initial_h, initial_c)
_INPUT_PERMS = {0: [1, 0, 2], 5: [1, 0, 2], 6: [1, 0, 2]}
# output index -> the permutation from the sequence-first output to the batch-first one (Y, Y_h, Y_c)
_OUTPUT_PERMS = {0: [2, 0, 1, 3], 1: [1, 0, 2], 2: [1, 0, 2]}


def _permuted(value: ir.Value, perm: list[int]) -> ir.Shape | None:
    if value.shape is None or len(value.shape) != len(perm):
        return None
    dims = list(value.shape)
    return ir.Shape([dims[p] for p in perm])


def _transpose(step: Step, value: ir.Value, perm: list[int], shape: ir.Shape | None) -> ir.Value:
    out = step.op("Transpose", [value], {"perm": perm})
    out.type, out.shape = value.type, shape
    return out


def _is_used(value: ir.Value) -> bool:
    return bool(value.uses()) or value.is_graph_output()


def _inverse(perm: list[int]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def _rnn_14_13(node: ir.Node, step: Step) -> None:
    if not step.attr("layout", 0):
        generic_step(node, step)
        return
    require_types(step)
    inputs = list(node.inputs)
    for index, perm in _INPUT_PERMS.items():
        if index < len(inputs) and inputs[index] is not None:
            inputs[index] = _transpose(step, inputs[index], perm, _permuted(inputs[index], perm))
    attrs = [a for name, a in node.attributes.items() if name != "layout"]
    new = step.add_node(node.op_type, inputs, attrs, num_outputs=len(node.outputs))
    outputs: list[ir.Value | None] = []
    for index, old in enumerate(node.outputs):
        if not _is_used(old):
            outputs.append(None)
            continue
        perm = _OUTPUT_PERMS[index]
        seq_first = new.outputs[index]
        seq_first.type, seq_first.shape = old.type, _permuted(old, _inverse(perm))
        outputs.append(_transpose(step, seq_first, perm, old.shape))
    step.replace_with(outputs)


for _op in ("RNN", "GRU", "LSTM"):
    adapter(_op, 14, 13)(_rnn_14_13)
