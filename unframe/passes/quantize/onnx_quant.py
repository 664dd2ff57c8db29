"""ONNX graphs quantized for onnxruntime (and, as explicit Q/DQ, for TensorRT).

- ``int8``: onnxruntime's ``quantize_static`` in QDQ form: int8 weights per output channel,
  activations with ranges calibrated (min/max) on the calibration sets; uint8 activations for
  onnxruntime's CPU kernels, or symmetric int8 where the runtime wants it (TensorRT).
- ``int8-dynamic``: onnxruntime's ``quantize_dynamic`` (int8 weights per channel, activation
  ranges computed at run time: MatMulInteger / DynamicQuantizeLinear).
- ``w8`` / ``w4``: unframe's weight-only pass: each float weight of a Conv, ConvTranspose, Gemm or
  MatMul (an initializer of 256 or more elements) becomes an int8 tensor per output channel, or an
  int4 tensor in blocks of 32 along the input axis (opset 21's blocked ``DequantizeLinear``), with
  a ``DequantizeLinear`` in front of its consumer::

      before:  x ─► MatMul(x, W float32[K, N])
      after:   W_q int4[K, N], W_scale float32[K/32, N] ─► DequantizeLinear(axis=0, block_size=32) ─► MatMul

Nodes named in ``QuantRequest.exclude`` stay in float (the sensitivity pass picks them), and so,
for the activation schemes, does the post-processing after a data-dependent selection
(``postprocess.after_selection``: a detector's NMS and box decoding).
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.cpu import saturates_int8
from unframe.passes.quantize.naming import name_nodes
from unframe.passes.quantize.schemes import QuantRequest

SEVEN_BIT_NOTE = ("weights held to 7 bits (reduce_range): this CPU has no VNNI, and onnxruntime's int8 "
                  "kernels on it saturate 8-bit weights (quantize on a VNNI CPU for 8-bit weights)")
BLOCK = 32
CLIPS = (1.0, 0.95, 0.9, 0.85, 0.8, 0.75)  # w4: the block ranges tried (fractions of the largest |w|)
MIN_ELEMENTS = 256  # smaller weights (biases, norms' scales) are not worth a scale tensor
W4_OPSET = 21  # int4 and blocked DequantizeLinear
# op -> (the weight's input index, (output-channel axis, input axis) of a rank-r weight)
WEIGHTED: dict[str, tuple[int, Any]] = {
    "Conv": (1, lambda node, r: (0, 1)),
    "ConvTranspose": (1, lambda node, r: (1, 0)),
    "MatMul": (1, lambda node, r: (r - 1, r - 2)),
    "Gemm": (1, lambda node, r: (0, 1) if node.attributes.get_int("transB", 0) else (1, 0)),
}


def quantize_onnx(model: ir.Model, request: QuantRequest, *, symmetric_activations: bool = False
                  ) -> tuple[ir.Model, list[str]]:
    """A quantized copy of ``model`` (the float graph is left as it is) and notes on what was done:
    by onnxruntime's quantizer (and unframe's weight-only pass), or by NNCF's ONNX backend where
    the request names it (``request.quantizer == "nncf"``, static int8 only)."""
    from unframe.passes.quantize import postprocess

    scheme = request.scheme
    work = model.clone()
    name_nodes(work)
    if scheme.activations == "float":  # weight-only: post-processing has no weights to quantize
        return weight_only(work, scheme.weight_bits, set(request.exclude))
    post = postprocess.after_selection(work)
    quantized, notes = (nncf_quantize(work, request, post) if request.quantizer == "nncf"
                        else _onnxruntime_quantize(work, request, symmetric_activations, post))
    shapes_of_float_graph(quantized, work)
    return quantized, notes + [postprocess.describe(post, work)] * bool(post)


def shapes_of_float_graph(quantized: ir.Model, float_model: ir.Model) -> None:
    """The quantized graph's intermediate values keep the shapes the float graph gave them and no
    others: the quantizers write the shapes their own inference found (symbolic dims such as
    ``unk__559``), and with them onnxruntime's ReshapeFusion (optimization level basic and up)
    proves two tensors' first dims equal and turns a ``Reshape(x, shape_of(y))`` into
    ``Reshape(x, [0, -1])``, which fails on a tensor with no rows: torchvision's RetinaNet clips
    its boxes that way, and every input that left an FPN level without candidates failed::

        before: Reshape(stacked[K, 2, 2], Concat(Shape(boxes[K, 4])[0], Shape(boxes)[1]))
        fused:  Reshape(stacked, [0, -1])   # K = 0: "cannot reshape {0,2,2} to {0,-1}"

    The new values (the Q/DQ outputs) get none; graph inputs and outputs keep theirs."""
    known = {v.name: (v.type, v.shape) for n in float_model.graph for v in n.outputs if v.name}
    for node in quantized.graph:
        for value in node.outputs:
            if value.is_graph_output():
                continue
            value.type, value.shape = known.get(value.name, (None, None))


NNCF_OPSET = 13  # NNCF quantizes per channel from opset 13 (per tensor below it)


def nncf_quantize(model: ir.Model, request: QuantRequest, post: list[str] | tuple[str, ...] = ()
                  ) -> tuple[ir.Model, list[str]]:
    """Static int8 by NNCF's ONNX backend (Intel's quantizer, as the OpenVINO route uses it):
    Q/DQ pairs in the ONNX graph, weights per output channel, activation ranges averaged over the
    calibration sets (onnxruntime's min/max takes their extremes), fast bias correction; a graph
    with attention by NNCF's transformer rules; weights held to 7 bits on a CPU without VNNI
    (``OverflowFix.ENABLE``). onnxruntime runs the result. The nodes ``request.exclude`` and
    ``post`` (the post-processing, ``postprocess.after_selection``) name stay float."""
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, OverflowFix

    from unframe.distributions import dist_version
    from unframe.opset import main_opset

    if request.scheme.name != "int8":
        raise ValueError(f"NNCF's ONNX quantizer makes static int8, not {request.scheme.name}")
    if (main_opset(model) or 0) < NNCF_OPSET:
        from unframe import version_converter

        version_converter.convert_opset(model, NNCF_OPSET)
    proto = ir.to_proto(model)
    del proto.graph.value_info[:]  # NNCF infers shapes itself; a stale exporter shape misleads it
    inputs = [i.name for i in proto.graph.input]
    feeds = [{name: np.asarray(feed[name]) for name in inputs if name in feed} for feed in request.calibration]
    kwargs: dict[str, Any] = {}
    if request.exclude or post:
        kwargs["ignored_scope"] = nncf.IgnoredScope(names=[*request.exclude, *post], validate=False)
    transformer = has_attention(model)
    if transformer:
        kwargs["model_type"] = nncf.ModelType.TRANSFORMER
    seven = saturates_int8()
    if seven:
        kwargs["advanced_parameters"] = AdvancedQuantizationParameters(overflow_fix=OverflowFix.ENABLE)
    logger = logging.getLogger("nncf")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(None), _quiet_root_logger():  # its progress bars
            quantized = nncf.quantize(proto, nncf.Dataset(feeds), subset_size=len(feeds), **kwargs)
    finally:
        logger.setLevel(level)
    out = ir.serde.deserialize_model(quantized)
    what = (f"int8 QDQ by NNCF {dist_version('nncf') or '?'} (nncf.quantize on the ONNX graph"
            + (", model_type=TRANSFORMER" if transformer else "") + f", calibrated on {request.origin}): "
            "weights per channel, activation ranges averaged over the sets, fast bias correction"
            + ("; weights held to 7 bits (OverflowFix.ENABLE): this CPU has no VNNI" if seven else ""))
    counts = _count_ops(out, ("QuantizeLinear", "DequantizeLinear"))
    excluded = list(request.exclude)
    return out, [f"{what}; {counts}" + (f"; kept in float: {', '.join(excluded)}" if excluded else "")]


ATTENTION_HOPS = 3


def has_attention(model: ir.Model) -> bool:
    """Whether the graph holds attention as NNCF's transformer rules expect it: a Softmax whose
    output a MatMul reads within ``ATTENTION_HOPS`` nodes (a classifier's Softmax is its answer)."""
    for node in model.graph:
        if node.op_type != "Softmax":
            continue
        frontier = [node]
        for _ in range(ATTENTION_HOPS):
            frontier = [user for n in frontier for out in n.outputs for user, _ in out.uses()]
            if any(n.op_type == "MatMul" for n in frontier):
                return True
    return False


def _onnxruntime_quantize(model: ir.Model, request: QuantRequest, symmetric: bool, post: list[str]
                          ) -> tuple[ir.Model, list[str]]:
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    class Sets(CalibrationDataReader):
        def __init__(self, sets: list[dict[str, np.ndarray]]) -> None:
            self._sets = iter(sets)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._sets, None)

    with tempfile.TemporaryDirectory(prefix="unframe-quant-") as tmp, _quiet_root_logger():
        src, dst = Path(tmp) / "float.onnx", Path(tmp) / "quantized.onnx"
        proto = ir.to_proto(model)
        # the exporters' intermediate shapes are left to onnx's inference: onnxruntime's quantizer
        # re-infers them strictly and refuses a stale one (torch's Linear weight seen transposed)
        del proto.graph.value_info[:]
        onnx.save(proto, src, save_as_external_data=proto.ByteSize() > 1_900_000_000)
        excluded = list(request.exclude)
        # onnxruntime's int8 kernels on a CPU without VNNI saturate 8-bit weights (unframe.cpu):
        # 7-bit weights there, as onnxruntime advises; TensorRT's (symmetric) graph runs elsewhere
        reduce = not symmetric and saturates_int8()
        if request.scheme.activations == "static":
            quantize_static(str(src), str(dst), Sets(request.calibration), quant_format=QuantFormat.QDQ,
                            per_channel=True, weight_type=QuantType.QInt8,
                            activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8,
                            nodes_to_exclude=excluded + post, reduce_range=reduce,
                            extra_options={"ActivationSymmetric": symmetric, "WeightSymmetric": True})
            what = ("int8 QDQ (onnxruntime quantize_static): weights per channel, activations "
                    f"{'symmetric int8' if symmetric else 'uint8'} with min/max ranges")
        else:
            quantize_dynamic(str(src), str(dst), per_channel=True, weight_type=QuantType.QInt8,
                             nodes_to_exclude=excluded + post, reduce_range=reduce)
            what = "int8 weights per channel, activations quantized at run time (onnxruntime quantize_dynamic)"
        if reduce:
            what += f"; {SEVEN_BIT_NOTE}"
        quantized = ir.serde.deserialize_model(onnx.load(str(dst)))  # read in full: the folder goes
    counts = _count_ops(quantized, ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
                                    "MatMulInteger", "ConvInteger"))
    return quantized, [f"{what}; {counts}" + (f"; kept in float: {', '.join(excluded)}" if excluded else "")]


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """onnxruntime's quantizer logs advice ("consider pre-processing") on the root logger: to the
    debug log, not the user's stderr."""
    root = logging.getLogger()
    before = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(before)


def _count_ops(model: ir.Model, ops: tuple[str, ...]) -> str:
    found = {op: sum(1 for n in model.graph if n.op_type == op) for op in ops}
    return ", ".join(f"{n} {op}" for op, n in found.items() if n) or "no quantized op"


def weight_only(model: ir.Model, bits: int, exclude: set[str]) -> tuple[ir.Model, list[str]]:
    """The weight-only pass (see the module's doc), in place on ``model``; returns it and notes."""
    if bits == 4:
        from unframe.opset import main_opset

        current = main_opset(model) or 0
        if current < W4_OPSET:
            from unframe import version_converter

            version_converter.convert_opset(model, W4_OPSET)
    done, before, after = 0, 0, 0
    for node in list(model.graph):
        spec = WEIGHTED.get(node.op_type)
        if spec is None or node.name in exclude or len(node.inputs) <= spec[0]:
            continue
        value = node.inputs[spec[0]]
        tensor = value.const_value if value is not None else None
        if tensor is None or tensor.dtype != ir.DataType.FLOAT or tensor.size < MIN_ELEMENTS:
            continue
        weights = tensor.numpy()
        if weights.ndim < 2:
            continue
        out_axis, in_axis = spec[1](node, weights.ndim)
        q, scale, attrs = _int4_blocks(weights, in_axis) if bits == 4 else _int8_channels(weights, out_axis)
        node.replace_input_with(spec[0], _dequantized(model, value, q, scale, attrs, bits, before=node,
                                                      name=f"{node.name}_dequantize_weight"))
        before += weights.nbytes
        after += q.size * bits // 8 + scale.nbytes
        done += 1
    tables = 0
    for value in shared_tables(model, exclude):  # an embedding, tied or not, and its transposed readers
        tensor = value.const_value
        weights = tensor.numpy()
        q, scale, attrs = _int4_blocks(weights, 1) if bits == 4 else _int8_channels(weights, 0)
        dq_out = _dequantized(model, value, q, scale, attrs, bits)
        value.replace_all_uses_with(dq_out)
        before += weights.nbytes
        after += q.size * bits // 8 + scale.nbytes
        done += 1
        tables += 1
    _drop_unused_initializers(model)
    if not done:
        return model, [f"w{bits}: no Conv/Gemm/MatMul weight of {MIN_ELEMENTS}+ elements to quantize"]
    if tables:
        layout_note = f" ({tables} of them embedding table(s) read by Gather and transposed MatMul)"
    else:
        layout_note = ""
    layout = "blocks of 32 along the input axis" if bits == 4 else "per output channel"
    return model, [f"w{bits}: {done} weight(s){layout_note} stored as int{bits} ({layout}), {before / 2**20:.2f} MiB -> "
                   f"{after / 2**20:.2f} MiB; activations stay float"
                   + (f"; kept in float: {', '.join(sorted(exclude))}" if exclude else "")]


def shared_tables(model: ir.Model, exclude: set[str]) -> list[ir.Value]:
    """2-D float initializers read only as an embedding table (``Gather`` of rows, axis 0) or
    through a ``Transpose`` as a ``MatMul``'s weight: a language model's (tied) embedding and its
    output head, which the per-node pass can't see (the MatMul reads the Transpose, not the
    initializer). Blocks run along axis 1 (the hidden size: the MatMul's input axis after the
    transpose), channels along axis 0 (a row, an output)::

        before:  E float32[V, H] ─► Gather(E, ids);  E ─► Transpose ─► MatMul(h, E^T)
        after:   E_q int4[V, H], E_scale[V, H/32] ─► DequantizeLinear(axis=1) ─► Gather, Transpose
    """
    found = []
    for value in model.graph.initializers.values():
        tensor = value.const_value
        if tensor is None or tensor.dtype != ir.DataType.FLOAT or len(tensor.shape) != 2 or tensor.size < MIN_ELEMENTS:
            continue
        uses = list(value.uses())
        if uses and all(_reads_as_table(u.node, u.idx, exclude) for u in uses):
            found.append(value)
    return found


def _reads_as_table(node: ir.Node, index: int, exclude: set[str]) -> bool:
    if node.name in exclude or node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type == "Gather":
        return index == 0 and node.attributes.get_int("axis", 0) == 0
    if node.op_type == "Transpose":
        perm = node.attributes.get_ints("perm", [1, 0])
        return list(perm) == [1, 0] and all(u.node.op_type == "MatMul" and u.idx == 1 and u.node.name not in exclude
                                            for u in node.outputs[0].uses())
    return False


def _dequantized(model: ir.Model, value: ir.Value, q: np.ndarray, scale: np.ndarray, attrs: dict[str, Any],
                 bits: int, before: ir.Node | None = None, name: str = "") -> ir.Value:
    """A DequantizeLinear of ``q``/``scale`` (new initializers) standing for ``value``'s weights,
    placed before ``before`` (default: at the graph's start); its output."""
    qv = ir.Value(name=f"{value.name}_q{bits}", const_value=ir.Tensor(q, name=f"{value.name}_q{bits}"))
    sv = ir.Value(name=f"{value.name}_scale", const_value=ir.Tensor(scale, name=f"{value.name}_scale"))
    for v in (qv, sv):
        model.graph.register_initializer(v)
    dq = ir.node("DequantizeLinear", [qv, sv], attributes=attrs, name=name or f"{value.name}_dequantize_weight",
                 num_outputs=1)
    dq.outputs[0].name = f"{value.name}_dequantized"
    dq.outputs[0].dtype, dq.outputs[0].shape = ir.DataType.FLOAT, ir.Shape(list(q.shape))
    model.graph.insert_before(before if before is not None else next(iter(model.graph)), dq)
    return dq.outputs[0]


def _int8_channels(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    other = tuple(i for i in range(w.ndim) if i != axis)
    peak = np.abs(w).max(axis=other)
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.round(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale, {"axis": axis}


def _int4_blocks(w: np.ndarray, block_axis: int) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Blocks of ``BLOCK`` along the input axis, symmetric int4 in [-7, 7]. The blocks are worked
    on ``ROWS_AT_ONCE`` at a time in float32: a 1B model's 262M-element embedding made ~10 GB of
    float64 temporaries at once."""
    import ml_dtypes

    size = w.shape[block_axis]
    blocks = -(-size // BLOCK)
    padded = np.pad(w.astype(np.float32, copy=False),
                    [(0, blocks * BLOCK - size if i == block_axis else 0) for i in range(w.ndim)])
    split = list(padded.shape)
    split[block_axis:block_axis + 1] = [blocks, BLOCK]
    moved = np.moveaxis(padded.reshape(split), block_axis + 1, -1)  # (..., blocks, BLOCK)
    rows = np.ascontiguousarray(moved).reshape(-1, BLOCK)
    scale = np.empty(rows.shape[0], np.float32)
    q = np.empty(rows.shape, np.int8)
    for start in range(0, rows.shape[0], ROWS_AT_ONCE):
        chunk = rows[start:start + ROWS_AT_ONCE]
        scale[start:start + len(chunk)], q[start:start + len(chunk)] = _best_blocks(chunk)
    q = np.moveaxis(q.reshape(moved.shape), -1, block_axis + 1).reshape(padded.shape)
    q = q[tuple(slice(0, size) if i == block_axis else slice(None) for i in range(w.ndim))]
    return q.astype(ml_dtypes.int4), scale.reshape(moved.shape[:-1]), {"axis": block_axis, "block_size": BLOCK}


ROWS_AT_ONCE = 1 << 15  # blocks of 32 quantized at a time (1M weights)


def _best_blocks(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each block's (scale, int4 values): of the clippings of its range in ``CLIPS``, the one that
    rounds it with the least squared error; an outlier then costs its block less than the other
    31 weights' resolution."""
    peak = np.abs(rows).max(axis=1)
    best_scale = np.where(peak > 0, peak / 7.0, 1.0).astype(np.float32)
    best_error = np.full(peak.shape, np.inf, np.float32)
    for clip in CLIPS:
        trial = np.where(peak > 0, peak * np.float32(clip) / 7.0, 1.0).astype(np.float32)
        t = trial[:, None]
        error = ((np.clip(np.round(rows / t), -7, 7) * t - rows) ** 2).sum(axis=1)
        better = error < best_error
        best_scale, best_error = np.where(better, trial, best_scale), np.where(better, error, best_error)
    q = np.clip(np.round(rows / best_scale[:, None]), -7, 7).astype(np.int8)
    return best_scale, q


def _drop_unused_initializers(model: ir.Model) -> None:
    used = {v.name for n in ir.traversal.RecursiveGraphIterator(model.graph) for v in n.inputs if v is not None}
    used |= {v.name for v in model.graph.outputs}
    for name in [n for n in model.graph.initializers if n not in used]:
        del model.graph.initializers[name]
