"""Saving the IR: fp16 weight compression (OpenVINO's default) or fp32 weights.

``ov.save_model(model, path)`` stores float32 constants as float16 followed by a
``decompression`` Convert (a constant with three quarters of its values out of fp16's range stays
float32); the CPU plugin computes in float32 from them when asked to (``INFERENCE_PRECISION_HINT
f32``). ``compress_to_fp16=False`` keeps float32.

Nodes the route asks to keep in float32 (``unframe.passes.KEEP_FP32``: planned after a 16-bit
parity failure) keep their weights in float32 too. OpenVINO's compression skips a constant marked
``DisablePrecisionConversion``, an attribute the Python API can't create but the IR reader does,
from ``<attribute name="precise" version="0"/>`` in a layer's rt_info: those constants are
marked in an uncompressed IR, which is read back and compressed.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import onnx_ir as ir

from unframe.converters.backends.openvino.runtime import core, import_openvino, quiet_openvino
from unframe.passes import keeps_fp32

# ops a weight passes through on its way to the op that reads it (the frontend's layout changes)
PASS_THROUGH = frozenset({"Convert", "Reshape", "Transpose", "Unsqueeze", "Squeeze"})


def save_ir(converted: Any, path: Path, precision: str, kept: set[str] = frozenset()) -> int:  # type: ignore[assignment]
    """Write ``converted`` as ``path`` (.xml) and its .bin; ``kept``: names of float constants that
    stay float32 in an fp16 IR. Returns how many of them were kept."""
    ov = import_openvino()
    path.parent.mkdir(parents=True, exist_ok=True)
    with quiet_openvino():
        if precision != "fp16" or not kept:
            ov.save_model(converted, str(path), compress_to_fp16=precision == "fp16")
            return 0
        plain = path.with_name(path.stem + ".fp32.xml")
        ov.save_model(converted, str(plain), compress_to_fp16=False)
        marked = _mark_precise(plain, kept)
        model = core().read_model(str(plain))
        ov.save_model(model, str(path), compress_to_fp16=True)
        del model
    plain.unlink()
    plain.with_suffix(".bin").unlink()
    return marked


def _mark_precise(xml: Path, names: set[str]) -> int:
    """Mark the Const layers named ``names`` in an IR written by ``save_model`` (unframe's own
    file, just written)."""
    tree = ET.parse(xml)  # noqa: S314 (an IR OpenVINO wrote a moment ago, in unframe's work dir)
    count = 0
    for layer in tree.getroot().iter("layer"):
        if layer.get("type") != "Const" or layer.get("name") not in names:
            continue
        rt = layer.find("rt_info")
        if rt is None:
            rt = ET.Element("rt_info")
            layer.insert(1, rt)  # after <data>
        ET.SubElement(rt, "attribute", {"name": "precise", "version": "0"})
        count += 1
    tree.write(xml, encoding="utf-8", xml_declaration=True)
    return count


def kept_constants(model: ir.Model, converted: Any) -> set[str]:
    """Names of the converted model's float constants that feed the ONNX nodes marked to stay in
    float32 (found by their output tensor names, which the frontend keeps)."""
    values = {v.name for node in ir.traversal.RecursiveGraphIterator(model.graph) if keeps_fp32(node)
              for v in node.outputs if v.name}
    if not values:
        return set()
    out: set[str] = set()
    for op in converted.get_ordered_ops():
        if not any(values & set(port.get_names()) for port in op.outputs()):
            continue
        for port in op.inputs():
            source = port.get_source_output().get_node()
            while source.get_type_name() in PASS_THROUGH and source.get_input_size() >= 1:
                source = source.input_value(0).get_node()
            if source.get_type_name() == "Constant" and source.get_element_type().is_real():
                out.add(source.get_friendly_name())
    return out


def weight_precisions(model: Any) -> dict[str, int]:
    """Bytes of constants by element type (``f16``, ``f32``...)."""
    out: dict[str, int] = {}
    for op in model.get_ordered_ops():
        if op.get_type_name() == "Constant":
            et = op.get_element_type()
            out[et.get_type_name()] = out.get(et.get_type_name(), 0) + op.get_byte_size()
    return out


__all__ = ["kept_constants", "save_ir", "weight_precisions"]
