"""``--quantize`` for OpenVINO IR: NNCF (Intel's quantizer for OpenVINO) on the converted model.

- ``int8``: ``nncf.quantize`` with the calibration sets: activations get FakeQuantize ops with
  calibrated ranges, weights are stored int8 (per output channel) with their scales; the CPU
  plugin runs the quantized ops in int8. A transformer (attention's Softmax beside layer norms,
  ``is_transformer``) is quantized with ``model_type=TRANSFORMER``, as NNCF asks for such models:
  its transformer rules (SmoothQuant on the MatMuls' inputs, the layer norms and attention's
  score arithmetic left in float) in place of the CNN defaults.
- ``w8``: ``nncf.compress_weights`` (int8 asymmetric per output channel: u8 weights, a u8 zero
  point and an fp16 scale each), float activations.
- ``w4``: ``nncf.compress_weights`` in ``INT4_SYM`` mode, groups of 32 along the input axis, every
  layer asked for (``ratio=1.0``, ``all_layers=True``; NNCF keeps the first and last in int8
  otherwise). A weight NNCF can't cut into groups of 32 (a convolution's, or an input size not a
  multiple of 32) falls back to int8 asymmetric per channel, NNCF's backup mode: the notes count both.
  No dataset is needed for this (a data-aware mode, AWQ or a mixed ``ratio``, would need one).

NNCF quantizes the weights itself, so the IR is saved without OpenVINO's fp16 compression: the
int8/int4 constants stay as NNCF wrote them, with the scales in the precision NNCF chose (fp16 for
compressed weights, fp32 for int8's), and the few float constants left (biases) stay fp32.

Layers kept in float (``QuantRequest.exclude``, ONNX node names) become NNCF's ``IgnoredScope``:
OpenVINO's ONNX frontend names the ops of a node after the node (``/0/Conv``, with the ops it
decomposes into named ``/0/Conv/WithoutBiases``) or, for a node without a name or one writing a
graph output, after its output tensor (``16``, ``16/WithoutBiases``): ``ov_names`` matches both.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from unframe.converters.backends.openvino.runner import NUMPY_OF

GROUP = 32  # w4: weights in groups of 32 along the input axis, as the ONNX route's blocks
FLOAT_TYPES = ("f32", "f16", "bf16", "f64")


def ov_names(model: Any, converted: Any, exclude: Sequence[str]) -> tuple[list[str], list[str]]:
    """The op names of ``converted`` (an ``openvino.Model`` from ``model``, an ``ir.Model``)
    that come from the ONNX nodes ``exclude`` names, and the names that matched no op. A node
    without a name is addressed as ``name_nodes`` names it (``Conv_3``: its place in the graph)."""
    from unframe.passes.quantize.naming import name_nodes

    named = model.clone()
    name_nodes(named)  # the same rule the sensitivity pass addressed the nodes by
    wanted = set(exclude)
    keys: dict[str, set[str]] = {}  # a name OpenVINO may have given an op -> the exclude names it stands for
    for original, node in zip(model.graph, named.graph, strict=True):
        if node.name in wanted:
            for n in (original.name, *(v.name for v in original.outputs)):
                if n:
                    keys.setdefault(n, set()).add(node.name)
    found: list[str] = []
    matched: set[str] = set()
    for op in converted.get_ordered_ops():
        name = op.get_friendly_name()
        # the op's own name, or a prefix of it up to a "/" (OpenVINO names a node's parts "node/part")
        prefixes = [name] + [name[:i] for i, ch in enumerate(name) if ch == "/"]
        hits = set().union(*(keys.get(p, set()) for p in prefixes))
        if hits:
            found.append(name)
            matched |= hits
    return found, [n for n in exclude if n not in matched]


def is_transformer(converted: Any) -> bool:
    """Whether an OpenVINO model holds attention, as NNCF's transformer rules expect: a Softmax
    whose output a MatMul reads within ``ATTENTION_HOPS`` ops (the weights times the values,
    past the masking torch's exporter puts between: IsNaN, Select), where a classifier's
    Softmax is its answer; or OpenVINO's own fused ``ScaledDotProductAttention``."""
    for op in converted.get_ordered_ops():
        if op.get_type_name() == "ScaledDotProductAttention":
            return True
        if op.get_type_name() != "Softmax":
            continue
        frontier = [op]
        for _ in range(ATTENTION_HOPS):
            frontier = [t.get_node() for node in frontier for out in node.outputs()
                        for t in out.get_target_inputs()]
            if any(node.get_type_name() == "MatMul" for node in frontier):
                return True
    return False


ATTENTION_HOPS = 3


def float_bytes(converted: Any) -> int:
    """Bytes of the model's constants with every float one counted as float32 (the size of the
    unquantized weights)."""
    total = 0
    for op in converted.get_ordered_ops():
        if op.get_type_name() == "Constant":
            et = op.get_element_type().get_type_name()
            total += int(np.prod(op.get_output_shape(0))) * 4 if et in FLOAT_TYPES else op.get_byte_size()
    return total


def onnx_float_bytes(model: Any) -> int:
    """Bytes of an ONNX graph's initializers with every float one counted as float32 (as
    ``float_bytes`` counts an IR's constants)."""
    from unframe import io

    total = 0
    for value in io.all_initializers(model):
        tensor = value.const_value
        if tensor is not None:
            floating = tensor.dtype.is_floating_point()
            total += int(tensor.size) * 4 if floating else int(tensor.nbytes)
    return total


def quantize_ov(converted: Any, request: Any, ignored: Sequence[str] = ()) -> tuple[Any, list[str]]:
    """``converted`` quantized as ``request`` asks (see the module's doc), and notes."""
    import nncf

    from unframe.cpu import saturates_int8

    scope = nncf.IgnoredScope(names=list(ignored), validate=False) if ignored else None
    scheme = request.scheme.name
    with _quiet_nncf():
        if scheme == "int8":
            feeds = _dataset(converted, request.calibration)
            kwargs: dict[str, Any] = {"ignored_scope": scope} if scope else {}
            transformer = is_transformer(converted)
            if transformer:
                kwargs["model_type"] = nncf.ModelType.TRANSFORMER
            seven = saturates_int8()
            if seven:  # the CPU plugin's int8 kernels here saturate 8-bit weights (unframe.cpu)
                from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, OverflowFix

                kwargs["advanced_parameters"] = AdvancedQuantizationParameters(overflow_fix=OverflowFix.ENABLE)
            quantized = nncf.quantize(converted, nncf.Dataset(feeds), subset_size=len(feeds), **kwargs)
            tool = (f"nncf.quantize{' (model_type=TRANSFORMER)' if transformer else ''}, calibrated on {request.origin}"
                    + ("; weights held to 7 bits in every layer (OverflowFix.ENABLE): this CPU has no VNNI, "
                       "and OpenVINO's int8 kernels on it saturate 8-bit weights" if seven else ""))
        elif scheme == "w8":
            quantized = nncf.compress_weights(converted, ignored_scope=scope)
            tool = "nncf.compress_weights (int8 asymmetric, per output channel)"
        elif scheme == "w4":
            quantized = nncf.compress_weights(converted, mode=nncf.CompressWeightsMode.INT4_SYM,
                                              group_size=GROUP, ratio=1.0, all_layers=True,
                                              ignored_scope=scope)
            tool = f"nncf.compress_weights (int4 symmetric, groups of {GROUP})"
        else:  # the backend's quantize_schemes keeps any other scheme from reaching here
            raise ValueError(f"OpenVINO: no NNCF recipe for {scheme}")
    notes = [f"quantized {scheme} by NNCF {_version()}: {tool}; {summary(quantized)}"]
    if ignored:
        notes.append(f"kept in float: {len(ignored)} OpenVINO op(s) of the excluded ONNX nodes "
                     f"({', '.join(ignored[:6])}{', ...' if len(ignored) > 6 else ''})")
    return quantized, notes


def summary(model: Any) -> str:
    """What the quantized IR holds: its FakeQuantize ops and its constants by element type."""
    fq = sum(op.get_type_name() == "FakeQuantize" for op in model.get_ordered_ops())
    held: dict[str, int] = {}
    for op in model.get_ordered_ops():
        if op.get_type_name() == "Constant":
            et = op.get_element_type().get_type_name()
            held[et] = held.get(et, 0) + op.get_byte_size()
    parts = [f"{fq} FakeQuantize op(s)"] if fq else []
    parts.append("constants " + ", ".join(f"{k} {v:,} B" for k, v in sorted(held.items(), key=lambda kv: -kv[1])))
    return "; ".join(parts)


def _dataset(converted: Any, calibration: Sequence[dict[str, Any]]) -> list[dict[str, np.ndarray]]:
    """The calibration sets as the IR's inputs take them: by input name, in its element types."""
    out = []
    for feed in calibration:
        item = {}
        for port in converted.inputs:
            name = next((n for n in port.get_names() if n in feed), None)
            if name is None:
                raise KeyError(f"no calibration array for OpenVINO input {port.get_any_name()!r}")
            dtype = NUMPY_OF.get(port.get_element_type().get_type_name())
            value = np.asarray(feed[name])
            item[port.get_any_name()] = np.ascontiguousarray(value.astype(dtype, copy=False) if dtype else value)
        out.append(item)
    return out


@contextlib.contextmanager
def _quiet_nncf() -> Iterator[None]:
    """NNCF logs to a stdout handler bound at its import (a redirect of sys.stdout misses it):
    its level raised for the call, unless --debug. Its progress bars go to sys.stdout, which
    ``quiet_openvino`` captures (the direct routes call this outside the backend's own)."""
    from unframe.converters.backends.openvino.runtime import quiet_openvino
    from unframe.quiet import debug_enabled

    logger = logging.getLogger("nncf")
    level = logger.level
    if not debug_enabled():
        logger.setLevel(logging.ERROR)
    try:
        with quiet_openvino():
            yield
    finally:
        logger.setLevel(level)


def _version() -> str:
    from unframe.distributions import dist_version

    return dist_version("nncf") or "?"


__all__ = ["float_bytes", "onnx_float_bytes", "ov_names", "quantize_ov", "summary"]
