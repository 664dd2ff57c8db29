"""Scan 8 <-> 9: Scan-8 carries a batch axis (and optional sequence_lens); Scan-9 has neither and
adds per-input/output axes and directions. onnx's converter maps one to the other without touching
the batch axis, which silently changes results; here the batch axis is made explicit.

8->9 (batch size 1, no sequence_lens)::
    s, y = Scan_8("", s0, x, directions=d)
 -> s', y' = Scan_9(Squeeze(s0, 0), Squeeze(x, 0), scan_input_directions=d); s = Unsqueeze(s', 0) ...
9->8 (all scan axes 0, forward outputs)::
    s, y = Scan_9(s0, x, scan_input_directions=d)
 -> s', y' = Scan_8("", Unsqueeze(s0, 0), Unsqueeze(x, 0), directions=d); s = Squeeze(s', 0) ...
"""

from __future__ import annotations

import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.registry import adapter


@adapter("Scan", 8, 9)
def scan_8_9(node: ir.Node, step: Step) -> None:
    if node.inputs and node.inputs[0] is not None:
        step.refuse("sequence_lens has no equivalent at opset 9")
    carried = list(node.inputs[1:])
    for value in carried:
        shape = step.static_shape(value)
        if shape is None or not shape or shape[0] != 1:
            step.refuse("only a static batch size of 1 can drop Scan-8's batch axis")
    squeezed = [step.op("Squeeze", [v], {"axes": [0]}, version=8) for v in carried]
    attrs = {"body": node.attributes["body"],
             "num_scan_inputs": ir.AttrInt64("num_scan_inputs", step.attr("num_scan_inputs"))}
    directions = step.attr("directions")
    if directions is not None:
        attrs["scan_input_directions"] = ir.AttrInt64s("scan_input_directions", list(directions))
    new = step.add_node("Scan", squeezed, attrs, num_outputs=len(node.outputs))
    outs = [step.op("Unsqueeze", [o], {"axes": [0]}, version=8) for o in new.outputs]
    step.replace_with(outs)


@adapter("Scan", 9, 8)
def scan_9_8(node: ir.Node, step: Step) -> None:
    for name in ("scan_input_axes", "scan_output_axes", "scan_output_directions"):
        values = step.attr(name)
        if values is not None and any(v != 0 for v in values):
            step.refuse(f"{name}={list(values)} does not exist before opset 9")
    expanded = [step.op("Unsqueeze", [v], {"axes": [0]}, version=8) for v in node.inputs]
    attrs = {"body": node.attributes["body"],
             "num_scan_inputs": ir.AttrInt64("num_scan_inputs", step.attr("num_scan_inputs"))}
    directions = step.attr("scan_input_directions")
    if directions is not None:
        attrs["directions"] = ir.AttrInt64s("directions", list(directions))
    new = step.add_node("Scan", [None, *expanded], attrs, num_outputs=len(node.outputs))
    outs = [step.op("Squeeze", [o], {"axes": [0]}, version=8) for o in new.outputs]
    step.replace_with(outs)
