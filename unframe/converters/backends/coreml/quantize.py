"""``--quantize`` for Core ML: ``coremltools.optimize.coreml`` on the converted ML Program.

- ``w8``: ``linear_quantize_weights``, int8 symmetric per output channel
  (``constexpr_blockwise_shift_scale`` from iOS18, ``constexpr_affine_dequantize`` before).
- ``w4``: the same with int4 in blocks of 32 along the input axis (``per_block``): int4 exists
  from iOS18 only. Without ``--target`` the package is built for iOS18 (a note says so); a lower
  ``--target`` given by the user is refused with a blocker naming ``--target iOS18``. A weight
  whose input axis is not a multiple of 32 is left as it was (coremltools skips it; the notes
  count the weights quantized).
- ``int8`` (activations too, iOS17+): coremltools' ``linear_quantize_activations`` calibrates by
  running the model with Core ML's ``predict``, which exists on macOS only. So the activation
  ranges are calibrated on the float ONNX graph by onnxruntime's ``quantize_static`` (the ONNX
  route's int8, ``activation_qdq``), each activation's Q/DQ pair becomes MIL's ``quantize`` ->
  ``dequantize`` (``ops/quant.py``; the form coremltools' own activation quantization writes),
  and the weights are then quantized as ``w8``. Without ``--target`` the package is built for
  iOS17; a lower one is refused.

Weights under 256 elements (biases, tiny layers) stay float, as on the ONNX route. Layers kept in
float (``QuantRequest.exclude``, ONNX node names) are found through the translation's name map
(ONNX value -> MIL var; coremltools' fp16 pass renames ``v`` to ``v_cast_fp16``) and set to no
compression in ``op_name_configs``. The package is evaluated by unframe's MIL evaluator, which
runs the dequantizing constexpr ops (``mil_eval/kernels/constexpr.py``).
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from unframe.converters.backends.coreml.runner import RENAME_SUFFIXES

BLOCK = 32
MIN_ELEMENTS = 256
W4_IOS = 18
# scheme -> (the first iOS that holds it, what it needs)
SCHEME_IOS = {"w4": (W4_IOS, "int4 weights"), "int8": (17, "int8 activations (MIL quantize/dequantize)")}
WEIGHTED_MIL = ("conv", "conv_transpose", "linear", "matmul")


def quantizer_config(scheme: str, excluded: Sequence[str] = ()) -> Any:
    import coremltools.optimize.coreml as cto

    if scheme == "w8":
        config = cto.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8",
                                             granularity="per_channel", weight_threshold=MIN_ELEMENTS)
    elif scheme == "w4":
        config = cto.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int4", granularity="per_block",
                                             block_size=BLOCK, weight_threshold=MIN_ELEMENTS)
    else:  # the backend's quantize_schemes keeps any other scheme from reaching here
        raise ValueError(f"CoreML: no coremltools recipe for {scheme}")
    return cto.OptimizationConfig(global_config=config, op_name_configs=dict.fromkeys(excluded))


def mil_ops_of(program: Any, values: Mapping[str, str], model: Any, exclude: Sequence[str]) -> tuple[list[str], list[str]]:
    """The names of the weighted MIL ops (conv, linear, matmul) of ``program`` computing the ONNX
    nodes ``exclude`` names (``model``: the ONNX ``ir.Model``; a node without a name addressed as
    ``name_nodes`` names it), and the names that matched no op."""
    from unframe.passes.quantize.naming import name_nodes

    named = model.clone()
    name_nodes(named)
    wanted = set(exclude)
    mil_of: dict[str, set[str]] = {}
    for original, node in zip(model.graph, named.graph, strict=True):
        if node.name in wanted:
            mil_of[node.name] = {values[v.name] for v in original.outputs if v.name in values}
    found, matched = [], set()
    for op in program.functions["main"].operations:
        if op.op_type not in WEIGHTED_MIL:
            continue
        for key, mil_names in mil_of.items():
            if any(_same_var(out.name, m) for out in op.outputs for m in mil_names):
                found.append(op.name)
                matched.add(key)
    return found, [n for n in exclude if n not in matched]


def _same_var(name: str, mil: str) -> bool:
    return name == mil or any(name == mil + suffix for suffix in RENAME_SUFFIXES)


def activation_qdq(model: Any, request: Any) -> tuple[Any, list[str]]:
    """The float graph with calibrated Q/DQ pairs on its activations (and its weights, which
    fold back to float in the translation and are quantized again by coremltools): onnxruntime's
    static quantizer on the calibration sets, the layers ``request.exclude`` names left float."""
    from unframe.passes.quantize.onnx_quant import quantize_onnx

    quantized, notes = quantize_onnx(model, request)
    pairs = sum(1 for n in quantized.graph if n.op_type == "QuantizeLinear")
    return quantized, [f"int8 activations: {pairs} quantize/dequantize pair(s), ranges calibrated by "
                       f"onnxruntime on {request.origin}", *notes]


def quantize_mlmodel(mlmodel: Any, scheme: str, excluded: Sequence[str] = ()) -> tuple[Any, list[str]]:
    """``mlmodel`` with its weights quantized (a new MLModel), and notes."""
    import coremltools
    import coremltools.optimize.coreml as cto

    before = weight_counts(mlmodel._mil_program)
    with quiet_coremltools():
        quantized = cto.linear_quantize_weights(mlmodel, quantizer_config(scheme, excluded))
    after = weight_counts(quantized._mil_program)
    what = "int8 symmetric per output channel" if scheme == "w8" else f"int4 symmetric in blocks of {BLOCK}"
    notes = [f"quantized {scheme} by coremltools {coremltools.__version__} linear_quantize_weights ({what}): "
             f"{after['quantized']} of {before['large']} weights of {MIN_ELEMENTS}+ elements quantized"]
    if after["quantized"] < before["large"] - len(excluded):
        notes.append(f"{before['large'] - after['quantized'] - len(excluded)} weight(s) left float: "
                     "coremltools can't cut them as asked (an input axis not a multiple of "
                     f"{BLOCK} for int4 blocks)")
    if excluded:
        notes.append(f"kept in float: {len(excluded)} MIL op(s) of the excluded ONNX nodes ({', '.join(excluded[:6])})")
    return quantized, notes


def weight_counts(program: Any) -> dict[str, int]:
    """Float const tensors of ``MIN_ELEMENTS`` or more, and quantized weights (constexprs)."""
    large = quantized = 0
    for op in program.functions["main"].operations:
        if op.op_type == "const":
            value = op.outputs[0].val
            if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.size >= MIN_ELEMENTS:
                large += 1
        elif op.op_type in ("constexpr_blockwise_shift_scale", "constexpr_affine_dequantize"):
            quantized += 1
    return {"large": large, "quantized": quantized}


def float32_bytes(program: Any) -> int:
    """Bytes of the program's float constant tensors counted as float32 (the unquantized weights)."""
    total = 0
    for op in program.functions["main"].operations:
        value = op.outputs[0].val if op.op_type == "const" and op.outputs else None
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            total += value.size * 4
    return total


@contextlib.contextmanager
def quiet_coremltools() -> Iterator[None]:
    """coremltools' tqdm bars (stderr) and its skip warnings (logging) off the terminal unless --debug."""
    from unframe.quiet import debug_enabled, quiet_native_logs

    if debug_enabled():
        yield
        return
    logger = logging.getLogger("coremltools")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with quiet_native_logs(), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logger.setLevel(level)


__all__ = ["BLOCK", "SCHEME_IOS", "W4_IOS", "activation_qdq", "float32_bytes", "mil_ops_of", "quantize_mlmodel", "quantizer_config"]
