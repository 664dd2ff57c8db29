"""Pre-flight for TensorRT: every reason the ONNX parser would refuse a model, found statically.

Works with no TensorRT installed. Each node (subgraphs included) is checked against the parser's
support table (``table.py``): op name, the dtype of the op's main type variable, types TensorRT
has no tensor type for, and the restrictions of the table that can be decided without running
anything (initializer-only inputs, pooling/conv rank, TopK, Resize modes, RNN layouts, Q/DQ zero
points...). ``check`` returns ALL blockers at once.

``parser_verdict`` asks a real TensorRT parser (``supports_model_v2``) when a module is importable,
and ``disagreements`` lists where it and the table differ.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.converters.backends.tensorrt.table import NO_TRT_TYPE, ONNX_TO_TABLE_TYPE, lookup
from unframe.errors import Blocker
from unframe.opset import DEFAULT_DOMAINS, FALLBACK_OPSET, main_opset
from unframe.version_converter.types import infer_dtypes

TOPK_MAX_K = 3840
RESIZE_COORD_MODES = {"half_pixel", "pytorch_half_pixel", "tf_half_pixel_for_nn", "asymmetric",
                      "align_corners"}
RESIZE_MODES = {"nearest", "linear"}
RESIZE_NEAREST_MODES = {"floor", "ceil", "round_prefer_floor", "round_prefer_ceil"}
# (op, input index, what it is): inputs the parser needs as build-time constants.
CONSTANT_INPUTS: dict[str, list[tuple[int, str]]] = {
    "CumSum": [(1, "axis")],
    "Resize": [(2, "scales")],  # the parser refuses scales that arrive as a network input
    "Dropout": [(2, "training_mode")],
    "OneHot": [(1, "depth")],
    "STFT": [(1, "frame_step"), (2, "window")],
    "Squeeze": [(1, "axes")],
    "Unsqueeze": [(1, "axes")],
    **{op: [(1, "axes")] for op in (
        "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
        "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare")},
}

Check = Callable[[ir.Node, "Context"], Iterator[str]]
_CHECKS: dict[str, Check] = {}


def restriction(*ops: str) -> Callable[[Check], Check]:
    """Register a static check of a table restriction for ``ops``; it yields reasons."""

    def deco(fn: Check) -> Check:
        for op in ops:
            if op in _CHECKS:
                raise ValueError(f"duplicate TensorRT restriction check for {op}")
            _CHECKS[op] = fn
        return fn

    return deco


@dataclass
class Context:
    """What the checks need to know about values: dtypes (after inference) and constness."""

    dtypes: dict[str, int]
    graph_inputs: set[str]
    opset: int = FALLBACK_OPSET
    _static: dict[int, bool] = field(default_factory=dict)

    def dtype(self, value: ir.Value | None) -> int | None:
        if value is None:
            return None
        if value.dtype is not None:
            return int(value.dtype)
        return self.dtypes.get(value.name or "")

    def constant(self, value: ir.Value | None) -> np.ndarray | None:
        """The value's array when it is an initializer or a Constant's output, else None."""
        if value is None:
            return None
        if value.const_value is not None and value.name not in self.graph_inputs:
            return value.const_value.numpy()
        node = value.producer()
        if node is not None and node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS:
            attr = node.attributes.get("value")
            if attr is not None and attr.type == ir.AttributeType.TENSOR:
                return attr.value.numpy()
            for name in ("value_int", "value_ints", "value_float", "value_floats"):
                if name in node.attributes:
                    return np.asarray(node.attributes[name].value)
        return None

    def is_static(self, value: ir.Value | None) -> bool:
        """True when the value is computable at build time (constants, shapes of static
        tensors, and ops on those): the parser folds these."""
        if value is None:
            return True
        key = id(value)
        if key not in self._static:
            self._static[key] = False  # guards cycles through malformed graphs
            self._static[key] = self._compute_static(value)
        return self._static[key]

    def _compute_static(self, value: ir.Value) -> bool:
        if self.constant(value) is not None:
            return True
        node = value.producer()
        if node is None:
            return False
        if node.op_type in ("Shape", "Size"):
            source = node.inputs[0] if node.inputs else None
            shape = source.shape if source is not None else None
            # A static tensor has a static shape even when inference did not record it.
            return (shape is not None and all(isinstance(d, int) for d in shape)) or \
                self.is_static(source)
        if node.op_type.startswith("Random") or not node.inputs:
            return False
        return all(self.is_static(v) for v in node.inputs)


# Ops the parser implements with TensorRT plugins, which TensorRT-RTX does not ship (measured:
# "plugin not found" from tensorrt_rtx 1.7's parser for each). NonZero over a 1-D tensor is
# rewritten by the preparation (prepare.CompactNonZeroPass); any other NonZero stays one.
PLUGIN_OPS = frozenset({"DeformConv", "RoiAlign", "LinearAttention", "CausalConvWithState", "NonZero"})
# Ops tensorrt_rtx 1.7's parser takes but its builder has no implementation of (measured: "has
# no runners that implement it", on its own in a one-node graph; NVIDIA's TensorRT-RTX issue 32
# reports the same for NonZero on an RTX 3090). From opset 13 the preparation rewrites
# NonMaxSuppression (nms.GreedyNmsPass); what it leaves is named here.
NO_RUNNER_OPS = frozenset({"NonMaxSuppression"})


def check(model: ir.Model, flavour: str | None = None) -> list[Blocker]:
    """Every blocker of ``model`` for TensorRT's ONNX parser, in graph order. ``flavour``
    ("tensorrt" / "tensorrt_rtx", when known) adds what only that flavour lacks."""
    ctx = Context(dtypes=infer_dtypes(model),
                  graph_inputs={v.name for v in model.graph.inputs if v.name},
                  opset=main_opset(model, default=FALLBACK_OPSET))
    blockers: list[Blocker] = []
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        found = check_node(node, ctx)
        if not found and flavour == "tensorrt_rtx" and node.domain in DEFAULT_DOMAINS:
            found = _rtx_gap(node)
        blockers.extend(found)
    return blockers


def _rtx_gap(node: ir.Node) -> list[Blocker]:
    """What TensorRT-RTX lacks that NVIDIA's full TensorRT has."""
    if node.op_type in PLUGIN_OPS:
        why = "TensorRT implements it with a plugin, and TensorRT-RTX ships no plugin library"
    elif node.op_type in NO_RUNNER_OPS:
        why = "TensorRT-RTX's parser takes it, but its builder has no implementation of the layer"
    else:
        return []
    return [Blocker(node.op_type, why, node.name or "", "", "build with NVIDIA's full tensorrt package instead")]


def check_node(node: ir.Node, ctx: Context) -> list[Blocker]:
    name = node.name or ""
    if node.domain not in DEFAULT_DOMAINS:
        return [Blocker(node.op_type, "custom-domain op: TensorRT needs a plugin for it", name,
                        node.domain, "register a TensorRT plugin or rewrite the op in ONNX ops")]
    row = lookup(node.op_type)
    if row is None or not row.supported:
        why = "not supported by TensorRT's ONNX parser" if row is not None and row.status == "no" \
            else "not in TensorRT's ONNX operator list"
        return [Blocker(node.op_type, why, name, "",
                        "replace the op, or export without it (see docs/support.md)")]
    reasons = list(_dtype_reasons(node, ctx, row.types))
    reasons.extend(_constant_input_reasons(node, ctx))
    extra = _CHECKS.get(node.op_type)
    if extra is not None:
        reasons.extend(extra(node, ctx))
    return [Blocker(node.op_type, r, name, "", "see the TensorRT ONNX operator restrictions")
            for r in reasons]


def _dtype_reasons(node: ir.Node, ctx: Context, allowed: frozenset[str]) -> Iterator[str]:
    for value in [*node.inputs, *node.outputs]:
        dt = ctx.dtype(value)
        if dt in NO_TRT_TYPE or (dt and dt not in ONNX_TO_TABLE_TYPE):
            name = NO_TRT_TYPE.get(dt) or _type_name(dt)
            yield f"{value.name!r} is {name}, a type TensorRT has no tensors of"
            return
    if not allowed:
        return
    for value in main_type_values(node, ctx.opset):
        dt = ctx.dtype(value)
        kind = ONNX_TO_TABLE_TYPE.get(dt) if dt is not None else None
        if kind is not None and kind not in allowed:
            yield f"{value.name!r} is {kind}; TensorRT takes {node.op_type} in {', '.join(sorted(allowed))}"
            return


# Ops whose table types describe their output (input 0 is a size or a shape).
TYPED_BY_OUTPUT = frozenset({"BlackmanWindow", "HammingWindow", "HannWindow", "EyeLike"})


def _type_name(code: int) -> str:
    try:
        return ir.DataType(code).name
    except ValueError:
        return f"type {code}"


def main_type_values(node: ir.Node, opset: int) -> list[ir.Value]:
    """The inputs/outputs bound to the same type variable as input 0 (the op's data type), or
    as output 0 for ops typed by their output."""
    schema = _schema(node, opset)
    if schema is None or not schema.inputs:
        return [v for v in node.inputs[:1] if v is not None]
    if node.op_type in TYPED_BY_OUTPUT and schema.outputs:
        return [v for v in node.outputs[:1] if v is not None]
    var = schema.inputs[0].type_str
    values: list[ir.Value] = []
    for i, value in enumerate(node.inputs):
        formal = schema.inputs[min(i, len(schema.inputs) - 1)]
        if value is not None and formal.type_str == var:
            values.append(value)
    for i, value in enumerate(node.outputs):
        if i < len(schema.outputs) and schema.outputs[i].type_str == var and value.uses():
            values.append(value)
    return values


def _schema(node: ir.Node, opset: int) -> Any:
    import onnx

    try:
        return onnx.defs.get_schema(node.op_type, node.version or opset, "")
    except Exception:  # unknown op or version: no type information to check
        return None


def _constant_input_reasons(node: ir.Node, ctx: Context) -> Iterator[str]:
    for index, what in CONSTANT_INPUTS.get(node.op_type, []):
        value = node.inputs[index] if index < len(node.inputs) else None
        if value is not None and not ctx.is_static(value):
            yield f"input {what} ({value.name!r}) must be a build-time constant (an initializer)"


def _ints(node: ir.Node, name: str) -> list[int] | None:
    attr = node.attributes.get(name)
    return None if attr is None else [int(x) for x in attr.value]


def _int(node: ir.Node, name: str, default: int) -> int:
    attr = node.attributes.get(name)
    return default if attr is None else int(attr.value)


def _str(node: ir.Node, name: str, default: str) -> str:
    attr = node.attributes.get(name)
    return default if attr is None else str(attr.value)


def _rank(value: ir.Value | None) -> int | None:
    return None if value is None or value.shape is None else len(value.shape)


def _spatial_rank(node: ir.Node, weight_index: int | None = None) -> int | None:
    kernel = _ints(node, "kernel_shape")
    if kernel is not None:
        return len(kernel)
    if weight_index is not None and weight_index < len(node.inputs):
        rank = _rank(node.inputs[weight_index])
        if rank is not None:
            return rank - 2
    rank = _rank(node.inputs[0]) if node.inputs else None
    return None if rank is None else rank - 2


def _used(value: ir.Value | None) -> bool:
    if value is None or not value.name:
        return False
    return bool(value.uses()) or value.is_graph_output()


@restriction("AveragePool", "MaxPool", "LpPool")
def _pooling(node: ir.Node, ctx: Context) -> Iterator[str]:
    rank = _spatial_rank(node)
    if node.op_type != "LpPool" and rank is not None and rank not in (2, 3):
        yield f"{rank}D pooling: TensorRT pools in 2D or 3D only"
    dilations = _ints(node, "dilations")
    if dilations and any(d != 1 for d in dilations):
        yield f"dilations {dilations}: TensorRT pools with dilation 1 only"
    if node.op_type == "LpPool" and _int(node, "p", 2) not in (1, 2):
        yield f"p={_int(node, 'p', 2)}: TensorRT's LpPool takes p=1 or p=2 only"
    if node.op_type == "MaxPool" and len(node.outputs) > 1 and _used(node.outputs[1]):
        yield "the Indices output is not supported"


@restriction("Mod")
def _mod(node: ir.Node, ctx: Context) -> Iterator[str]:
    kind = ONNX_TO_TABLE_TYPE.get(ctx.dtype(node.inputs[0]) or 0)
    if _int(node, "fmod", 0) == 0 and kind in ("FP32", "FP16", "BF16"):
        yield f"fmod=0 on {kind} inputs: TensorRT's integer Mod needs INT32/INT64 (use fmod=1)"


@restriction("BatchNormalization")
def _batch_norm(node: ir.Node, ctx: Context) -> Iterator[str]:
    if _int(node, "training_mode", 0) != 0:
        yield "training_mode=1 is not supported"


@restriction("ScatterElements")
def _scatter_elements(node: ir.Node, ctx: Context) -> Iterator[str]:
    reduction = _str(node, "reduction", "none")
    if reduction != "none":
        yield f"reduction={reduction!r}: the parser takes only 'none'"


@restriction("Conv", "ConvTranspose")
def _conv(node: ir.Node, ctx: Context) -> Iterator[str]:
    rank = _spatial_rank(node, weight_index=1)
    if rank is not None and rank not in (1, 2, 3):
        yield f"{rank}D convolution: TensorRT convolves in 1D, 2D or 3D only"


@restriction("DeformConv")
def _deform_conv(node: ir.Node, ctx: Context) -> Iterator[str]:
    rank = _spatial_rank(node, weight_index=1)
    if rank is not None and rank not in (1, 2):
        yield f"{rank}D deformable convolution: only 1D or 2D"
    pads = _ints(node, "pads")
    if pads and pads[: len(pads) // 2] != pads[len(pads) // 2:]:
        yield f"pads {pads}: begin and end pads must be equal"


@restriction("TopK")
def _topk(node: ir.Node, ctx: Context) -> Iterator[str]:
    if _int(node, "sorted", 1) != 1:
        yield "sorted=0: TensorRT's TopK always sorts (sorted must be 1)"
    k = ctx.constant(node.inputs[1]) if len(node.inputs) > 1 else None
    if k is not None and k.size and int(k.reshape(-1)[0]) >= TOPK_MAX_K:
        yield f"K={int(k.reshape(-1)[0])}: TensorRT's TopK needs K < {TOPK_MAX_K}"


@restriction("Resize", "Upsample")
def _resize(node: ir.Node, ctx: Context) -> Iterator[str]:
    mode = _str(node, "mode", "nearest")
    if mode not in RESIZE_MODES:
        yield f"mode={mode!r}: TensorRT resizes with nearest or linear only"
    coord = _str(node, "coordinate_transformation_mode", "half_pixel")
    if node.op_type == "Resize" and coord not in RESIZE_COORD_MODES:
        yield f"coordinate_transformation_mode={coord!r} is not supported"
    nearest = _str(node, "nearest_mode", "round_prefer_floor")
    if mode == "nearest" and nearest not in RESIZE_NEAREST_MODES:
        yield f"nearest_mode={nearest!r} is not supported"
    if _str(node, "keep_aspect_ratio_policy", "stretch") != "stretch":
        yield "keep_aspect_ratio_policy must be 'stretch'"
    if _int(node, "antialias", 0):
        yield "antialias=1 is not supported"
    axes = _ints(node, "axes")
    scales = node.inputs[2] if len(node.inputs) > 2 else None
    rank = _rank(node.inputs[0]) if node.inputs else None
    if axes is not None and scales is not None and rank is not None and axes != list(range(rank)):
        yield f"axes={axes} with scales: axes must be all the input's axes in order"


def _activations_match(node: ir.Node) -> Iterator[str]:
    if _str(node, "direction", "forward") != "bidirectional":
        return
    acts = node.attributes.get("activations")
    if acts is None:
        return
    names = [str(a).lower() for a in acts.value]
    half = len(names) // 2
    if names[:half] != names[half:]:
        yield f"bidirectional {node.op_type} with different activations per direction: {names}"


@restriction("LSTM")
def _lstm(node: ir.Node, ctx: Context) -> Iterator[str]:
    if _int(node, "layout", 0) != 0:
        yield "layout=1 (batch-first): TensorRT takes layout=0 only; transpose around the LSTM"
    if _int(node, "input_forget", 0) != 0:
        yield "input_forget=1 is not supported"
    yield from _activations_match(node)


@restriction("GRU", "RNN")
def _gru_rnn(node: ir.Node, ctx: Context) -> Iterator[str]:
    yield from _activations_match(node)


def _zero_point(node: ir.Node, ctx: Context, index: int) -> Iterator[str]:
    value = node.inputs[index] if len(node.inputs) > index else None
    if value is None:
        return
    zp = ctx.constant(value)
    if zp is None:
        yield f"zero point {value.name!r} must be a constant zero (it is computed)"
    elif np.any(zp.astype(np.float64) != 0):
        yield f"zero point {value.name!r} is non-zero: TensorRT quantizes symmetrically only"


@restriction("QuantizeLinear")
def _quantize(node: ir.Node, ctx: Context) -> Iterator[str]:
    yield from _zero_point(node, ctx, 2)


@restriction("DequantizeLinear")
def _dequantize(node: ir.Node, ctx: Context) -> Iterator[str]:
    yield from _zero_point(node, ctx, 2)


@restriction("Dropout")
def _dropout(node: ir.Node, ctx: Context) -> Iterator[str]:
    training = ctx.constant(node.inputs[2]) if len(node.inputs) > 2 else None
    if training is not None and bool(np.asarray(training).reshape(-1)[0]):
        yield "training_mode is True: TensorRT runs inference only"


@restriction("Constant")
def _constant(node: ir.Node, ctx: Context) -> Iterator[str]:
    for name in ("sparse_value", "value_string", "value_strings"):
        if name in node.attributes:
            yield f"the {name} attribute is not supported"


@restriction("LayerNormalization")
def _layer_norm(node: ir.Node, ctx: Context) -> Iterator[str]:
    if any(_used(v) for v in node.outputs[1:]):
        yield "only the first output (Y) is supported; Mean/InvStdDev outputs are used"


@restriction("ScatterND")
def _scatter_nd(node: ir.Node, ctx: Context) -> Iterator[str]:
    reduction = _str(node, "reduction", "none")
    if reduction != "none":
        yield f"reduction={reduction!r}: only 'none' is supported"


@restriction("Attention")
def _attention(node: ir.Node, ctx: Context) -> Iterator[str]:
    for index, what in ((4, "past_key"), (5, "past_value"), (6, "nonpad_kv_seqlen")):
        if len(node.inputs) > index and node.inputs[index] is not None:
            yield f"the {what} input is not supported"
    for index, what in ((1, "present_key"), (2, "present_value"), (3, "qk_matmul_output")):
        if len(node.outputs) > index and _used(node.outputs[index]):
            yield f"the {what} output is not supported"
    if _int(node, "qk_matmul_output_mode", 0) != 0:
        yield "qk_matmul_output_mode is not supported"
    if "softcap" in node.attributes and float(node.attributes["softcap"].value) != 0.0:
        yield "softcap is not supported"
    # The table says attn_mask too must be 4D; the parser broadcasts lower-rank masks.
    for index, what in ((0, "Q"), (1, "K"), (2, "V")):
        rank = _rank(node.inputs[index]) if len(node.inputs) > index else None
        if rank is not None and rank != 4:
            yield f"{what} is {rank}D: TensorRT takes 4D Q, K, V and attn_mask"


@restriction("GridSample")
def _grid_sample(node: ir.Node, ctx: Context) -> Iterator[str]:
    rank = _rank(node.inputs[0])
    if rank is not None and rank != 4:
        yield f"input is {rank}D: TensorRT's GridSample takes 4D input only"


@restriction("EyeLike")
def _eye_like(node: ir.Node, ctx: Context) -> Iterator[str]:
    shape = node.inputs[0].shape if node.inputs[0] is not None else None
    if shape is not None and not all(isinstance(d, int) for d in shape):
        yield "input has dynamic dims: EyeLike needs static dimensions"


@restriction("STFT")
def _stft(node: ir.Node, ctx: Context) -> Iterator[str]:
    shape = node.inputs[0].shape if node.inputs[0] is not None else None
    if shape is not None and len(shape) and shape[-1] == 2:
        yield "complex input: TensorRT's STFT takes real-valued input only"


@restriction("TensorScatter")
def _tensor_scatter(node: ir.Node, ctx: Context) -> Iterator[str]:
    if _str(node, "mode", "linear") != "linear":
        yield f"mode={_str(node, 'mode', 'linear')!r}: only 'linear' is supported"
    if _int(node, "axis", -2) != -2:
        yield "axis must be -2"
    for index, what in ((0, "past_cache"), (1, "update")):
        rank = _rank(node.inputs[index]) if len(node.inputs) > index else None
        if rank is not None and rank != 4:
            yield f"{what} is {rank}D: must be 4D"


@restriction("Einsum")
def _einsum(node: ir.Node, ctx: Context) -> Iterator[str]:
    from unframe.converters.backends.tensorrt.einsum import needs_rename, normalize_equation

    equation = _str(node, "equation", "")
    if not needs_rename(equation):
        return
    if normalize_equation(equation) is None:
        yield (f"equation {equation!r} has upper-case subscripts, which TensorRT's parser does not "
               "read, and more distinct letters than a-z can rename")
    else:  # measured: "Invalid character(s) in Einsum equation"
        yield (f"equation {equation!r} has upper-case subscripts: TensorRT's parser reads a-z only "
               "(unframe's preparation renames them)")


@restriction("Loop")
def _loop(node: ir.Node, ctx: Context) -> Iterator[str]:
    from unframe.passes.loops import has_trip_limit

    body = node.attributes.get("body")
    if body is None or body.type != ir.AttributeType.GRAPH:
        return
    carried = max(len(node.inputs) - 2, 0)
    scans = len(body.value.outputs) - 1 - carried
    if scans > 0 and not has_trip_limit(node):
        # measured (tensorrt_rtx 1.7): "cannot infer the shape of scan output ... since no trip
        # limit was set", for no M and for a constant M of 2**31 - 1 or more
        yield (f"{scans} scan output(s) and no trip count (M): TensorRT sizes scan outputs from M "
               "alone (unframe's preparation writes M when the loop's condition reads only "
               "constants; otherwise export the loop with a fixed trip count)")


@restriction("RotaryEmbedding")
def _rotary(node: ir.Node, ctx: Context) -> Iterator[str]:
    pos = node.inputs[3] if len(node.inputs) > 3 else None
    dt = ctx.dtype(pos)
    if pos is not None and dt is not None and dt != int(ir.DataType.INT64):
        yield "position_ids must be INT64"


# -- the real parser ------------------------------------------------------------------------------


@dataclass
class ParserVerdict:
    """What a real TensorRT parser said: overall, and which nodes (by top-level index) failed."""

    supported: bool
    failed_nodes: dict[int, str]  # node index (-1: the model as a whole) -> parser message
    module: str
    printed: list[str] = field(default_factory=list)  # what the parser printed to stderr

    def model_refusal(self) -> str | None:
        """The parser's reason for refusing the model as a whole (no node named), if it did:
        what it printed says more than its assertion text."""
        whole = [message for index, message in self.failed_nodes.items() if index < 0]
        if self.supported or (self.failed_nodes and not whole):
            return None
        return "; ".join(self.printed[:2]) or (whole[0] if whole else "refused without a reason")


def parser_verdict(model: ir.Model) -> ParserVerdict | None:
    """Ask a TensorRT parser (``supports_model_v2``), in the conversion's TensorRT child (the
    parser is native code a hostile graph can crash); None when no TensorRT module is importable."""
    from unframe import io, sandbox
    from unframe.converters.backends.tensorrt import trtmodule
    from unframe.converters.backends.tensorrt.build import (
        SANDBOX,
        import_tensorrt,
        parse_timeout,
        verdict_in_child,
    )
    from unframe.errors import InputError

    if trtmodule.installed_flavour() is None:
        return None
    # a verdict on what the parser takes: large float weights as zeros (nothing of them read)
    with io.tool_file(model, stand_ins=True) as path:
        answer = sandbox.call(SANDBOX, verdict_in_child, path, what="TensorRT's ONNX parser",
                              timeout=parse_timeout(path), preload=import_tensorrt, crash_error=InputError,
                              hint="the model holds something TensorRT's parser can't take")
    return None if answer is None else ParserVerdict(*answer)


def disagreements(model: ir.Model, blockers: list[Blocker],
                  verdict: ParserVerdict) -> list[str]:
    """Where the table's blockers and the parser's failures differ, one line each."""
    nodes = list(model.graph)
    table_nodes = {b.node for b in blockers if b.node}
    table_ops = {b.op for b in blockers if not b.node}
    lines: list[str] = []
    for index, message in sorted(verdict.failed_nodes.items()):
        node = nodes[index] if 0 <= index < len(nodes) else None
        if node is None:  # refused as a whole (e.g. a dtype it can't convert)
            if not blockers:  # pre-flight refusing anything counts as agreeing
                lines.append(f"parser refuses the model ({message}) where pre-flight found no blocker")
            continue
        if (node.name and node.name in table_nodes) or (not node.name and node.op_type in table_ops):
            continue
        lines.append(f"node {node.name!r} [{node.op_type}]: the parser refuses it ({message}) "
                     "but pre-flight did not")
    # A parser that failed may have stopped early, so only a full acceptance contradicts us; what
    # tensorrt-rtx's builder lacks, its parser takes.
    if verdict.supported:
        builder_gaps = NO_RUNNER_OPS if verdict.module == "tensorrt_rtx" else frozenset()
        lines.extend(f"{blocker}: pre-flight blocks it but the parser accepts it"
                     for blocker in blockers if blocker.op not in builder_gaps)
    return lines


def restriction_checks() -> frozenset[str]:
    """Ops with a registered static restriction check (for docs/support.md)."""
    return frozenset(_CHECKS)
