"""NonMaxSuppression as layers every TensorRT builds.

tensorrt-rtx 1.7 parses ``NonMaxSuppression`` but its builder has no implementation of the layer
("no runners that implement it"), which is what kept torchvision's detectors (SSD, SSDLite,
RetinaNet) from building. ``GreedyNmsPass`` writes ONNX's NonMaxSuppression (onnxruntime's
semantics, exactly) as tensor ops:

1. The suppression relation: ``sup[b, i, j]`` is onnxruntime's ``SuppressByIOU``: the boxes
   overlap on both axes, the intersection, both areas and the union are positive, and
   intersection / union > iou_threshold, computed with the same float32 operations in the same
   order (corners from ``[y1, x1, y2, x2]`` in either diagonal order, or centre and size).
2. The order: box j ranks before box i when its score is higher, or equal with a lower index
   (onnxruntime's order of ties) — a comparison matrix, no sort and no TopK.
3. Greedy selection as a fixed point: ``keep_i = valid_i and no kept j that ranks before i
   suppresses i``. Box i depends only on boxes ranked before it, so the greedy result is the
   only fixed point, and iterating from ``keep = valid`` reaches it; a while-Loop (at most N + 1
   iterations, usually the length of the longest suppression chain) stops when keep no longer
   changes. Each iteration is one [N, N] x [N, 1] matrix product per batch and class.
4. The ``max_output_boxes_per_class`` cut: a kept box is selected while fewer than that many
   kept boxes rank before it (0, the default, selects nothing).
5. The output rows (batch, class, box), by batch, then class, then rank, as onnxruntime writes
   them: each selected box's row number is the count of selections of earlier (batch, class)
   pairs plus the selected boxes ranked before it; three scatters and a slice of the
   data-dependent total (the compaction of ``CompactNonZeroPass``).

Memory: B x C x N x N float32 (two such matrices), N the boxes per batch: 4 MB for 1,000
candidates. The counts and indices are float32, exact while B x C x N is at most 2**24: a graph
whose known dims say more is left alone (and the pre-flight names the op). Needs opset 13 (Squeeze and
Unsqueeze with axes inputs).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from unframe.converters.backends.tensorrt.rewrite import NodeBuilder
from unframe.opset import DEFAULT_DOMAINS, FALLBACK_OPSET, main_opset

F, I64, BOOL = ir.DataType.FLOAT, ir.DataType.INT64, ir.DataType.BOOL
FLOAT_EXACT_INTEGERS = 1 << 24


class GreedyNmsPass(ir.passes.InPlacePass):
    """Every NonMaxSuppression of the main graph that it can take becomes the tensor ops of the
    module docstring, with the same selected indices as onnxruntime's kernel.

    Before::  sel = NonMaxSuppression(boxes, scores, max_out, iou, score)   # int64 [K, 3]
    After::   sup, before (comparison matrices); keep = Loop(fixed point);
              sel = Concat(Slice(ScatterElements(...)) x 3)                  # int64 [K, 3]
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if main_opset(model, default=FALLBACK_OPSET) < 13:
            return ir.passes.PassResult(model, modified=False)
        graph, count = model.graph, 0
        for node in list(graph):
            if node.op_type != "NonMaxSuppression" or node.domain not in DEFAULT_DOMAINS:
                continue
            if not _takes(node):
                continue
            build = NodeBuilder(graph, f"{node.name or 'NonMaxSuppression'}_greedy{count}")
            selected = _greedy(build, node)
            old = node.outputs[0]
            ir.convenience.replace_nodes_and_values(graph, node, [node], build.nodes, [old], [selected])
            count += 1
        return ir.passes.PassResult(model, modified=bool(count))


def _takes(node: ir.Node) -> bool:
    if len(node.inputs) < 2 or node.inputs[0] is None or node.inputs[1] is None:
        return False
    if any(v is not None and v.dtype not in (None, F) for v in node.inputs[:2]):
        return False  # the op is defined on float32 boxes and scores
    if node.attributes.get_int("center_point_box", 0) not in (0, 1):
        return False
    shape = node.inputs[1].shape  # its known dims alone past 2**24: float32 can't count them
    known = [int(d) for d in shape if isinstance(d, int)] if shape is not None else []
    return int(np.prod(known, dtype=np.int64)) <= FLOAT_EXACT_INTEGERS


def _input(node: ir.Node, index: int) -> ir.Value | None:
    return node.inputs[index] if len(node.inputs) > index else None


def _greedy(b: NodeBuilder, node: ir.Node) -> ir.Value:
    boxes, scores = node.inputs[0], node.inputs[1]
    assert boxes is not None and scores is not None
    center = node.attributes.get_int("center_point_box", 0)
    last, second_last = b.vector(-1), b.vector(-2)

    def scalar_float(value: ir.Value | None, default: float) -> ir.Value:
        if value is None:
            return b.scalar(default)
        flat = b.op("Reshape", [value, b.const("scalar", np.zeros(0, np.int64))], value.dtype or F)
        return flat if value.dtype == F else b.op("Cast", [flat], F, to=F)

    def across(value: ir.Value) -> ir.Value:  # [B, N, 1] -> [B, 1, N]
        return b.op("Transpose", [value], F, perm=[0, 2, 1])

    def positive(value: ir.Value) -> ir.Value:
        return b.op("Greater", [value, b.scalar(0.0)], BOOL)

    def both(*masks: ir.Value) -> ir.Value:
        out = masks[0]
        for mask in masks[1:]:
            out = b.op("And", [out, mask], BOOL)
        return out

    # 1. The suppression relation [B, N, N] (i: rows, j: columns).
    coord = [b.op("Gather", [boxes, b.vector(k)], F, axis=2) for k in range(4)]  # [B, N, 1] each
    if center == 0:  # [y1, x1, y2, x2], either diagonal
        y_lo, y_hi = b.op("Min", [coord[0], coord[2]], F), b.op("Max", [coord[0], coord[2]], F)
        x_lo, x_hi = b.op("Min", [coord[1], coord[3]], F), b.op("Max", [coord[1], coord[3]], F)
    else:  # [x_centre, y_centre, width, height]
        half_w, half_h = (b.op("Div", [coord[k], b.scalar(2.0)], F) for k in (2, 3))
        x_lo, x_hi = b.op("Sub", [coord[0], half_w], F), b.op("Add", [coord[0], half_w], F)
        y_lo, y_hi = b.op("Sub", [coord[1], half_h], F), b.op("Add", [coord[1], half_h], F)
    ix_lo, ix_hi = b.op("Max", [x_lo, across(x_lo)], F), b.op("Min", [x_hi, across(x_hi)], F)
    iy_lo, iy_hi = b.op("Max", [y_lo, across(y_lo)], F), b.op("Min", [y_hi, across(y_hi)], F)
    overlap = both(b.op("Greater", [ix_hi, ix_lo], BOOL), b.op("Greater", [iy_hi, iy_lo], BOOL))
    inter = b.op("Mul", [b.op("Sub", [ix_hi, ix_lo], F), b.op("Sub", [iy_hi, iy_lo], F)], F)
    area = b.op("Mul", [b.op("Sub", [x_hi, x_lo], F), b.op("Sub", [y_hi, y_lo], F)], F)
    union = b.op("Sub", [b.op("Add", [area, across(area)], F), inter], F)
    iou = b.op("Div", [inter, union], F)
    suppresses = both(overlap, positive(inter), positive(area), positive(across(area)), positive(union),
                      b.op("Greater", [iou, scalar_float(_input(node, 3), 0.0)], BOOL))

    # 2. The order [B, C, N, N]: j ranks before i.
    shape = b.op("Shape", [scores], I64)
    n = b.op("Gather", [shape, b.const("axis2", np.array(2, np.int64))], I64, axis=0)
    index = b.op("Cast", [b.op("Range", [b.const("zero", np.array(0, np.int64)), n,
                                         b.const("one", np.array(1, np.int64))], I64)], F, to=F)
    lower_index = b.op("Less", [b.op("Unsqueeze", [index, b.vector(0)], F),
                                b.op("Unsqueeze", [index, last], F)], BOOL)  # [N, N]: j < i
    s_i, s_j = b.op("Unsqueeze", [scores, last], F), b.op("Unsqueeze", [scores, second_last], F)
    ahead = b.op("Or", [b.op("Greater", [s_j, s_i], BOOL),
                        both(b.op("Equal", [s_j, s_i], BOOL), lower_index)], BOOL)
    blocks = b.op("Cast", [both(ahead, b.op("Unsqueeze", [suppresses, b.vector(1)], BOOL))], F, to=F)
    ahead_f = b.op("Cast", [ahead], F, to=F)

    # 3. Greedy selection: the fixed point of keep = valid and not (blocks @ keep).
    score_threshold = _input(node, 4)
    if score_threshold is not None:
        valid = b.op("Cast", [b.op("Greater", [scores, scalar_float(score_threshold, 0.0)], BOOL)], F, to=F)
    else:
        valid = b.op("Expand", [b.scalar(1.0), shape], F)
    keep = _fixed_point(b, blocks, valid, n, last)

    # 4. At most max_output_boxes_per_class per batch and class.
    kept_ahead = b.op("Squeeze", [b.op("MatMul", [ahead_f, b.op("Unsqueeze", [keep, last], F)], F), last], F)
    limit = scalar_float(_input(node, 2), 0.0)
    selected = b.op("Mul", [keep, b.op("Cast", [b.op("Less", [kept_ahead, limit], BOOL)], F, to=F)], F)

    # 5. Rows (batch, class, box) in onnxruntime's order.
    return _rows(b, selected, kept_ahead, shape, index, last)


def _fixed_point(b: NodeBuilder, blocks: ir.Value, valid: ir.Value, n: ir.Value, last: ir.Value) -> ir.Value:
    body = b.body()
    iteration = ir.Value(name=f"{b.prefix}_iteration", type=ir.TensorType(I64), shape=ir.Shape([]))
    going = ir.Value(name=f"{b.prefix}_going", type=ir.TensorType(BOOL), shape=ir.Shape([]))
    keep_in = ir.Value(name=f"{b.prefix}_keep_in", type=ir.TensorType(F), shape=valid.shape)
    blocked = body.op("Squeeze", [body.op("MatMul", [blocks, body.op("Unsqueeze", [keep_in, last], F)], F), last], F)
    free = body.op("Cast", [body.op("Less", [blocked, body.scalar(0.5)], BOOL)], F, to=F)
    keep_out = body.op("Mul", [valid, free], F)
    moved = body.op("ReduceSum", [body.op("Abs", [body.op("Sub", [keep_out, keep_in], F)], F)], F, keepdims=0)
    changed = body.op("Greater", [moved, body.scalar(0.0)], BOOL)
    changed.shape = ir.Shape([])
    graph = ir.Graph([iteration, going, keep_in], [changed, keep_out], nodes=body.nodes,
                     name=f"{b.prefix}_fixed_point")
    trips = b.op("Add", [n, b.const("one_more", np.array(1, np.int64))], I64)
    return b.op("Loop", [trips, b.const("start", np.array(True)), valid], F, body=graph)


def _rows(b: NodeBuilder, selected: ir.Value, kept_ahead: ir.Value, shape: ir.Value, index: ir.Value,
          last: ir.Value) -> ir.Value:
    flat_shape = b.vector(-1)
    per_pair = b.op("Reshape", [b.op("ReduceSum", [selected, b.vector(2)], F, keepdims=0), flat_shape], F)
    before_pair = b.op("Sub", [b.op("CumSum", [per_pair, b.const("axis0", np.array(0, np.int64))], F), per_pair], F)
    pairs = b.op("Slice", [shape, b.vector(0), b.vector(2)], I64)
    offset = b.op("Unsqueeze", [b.op("Reshape", [before_pair, pairs], F), last], F)
    size = b.op("Size", [selected], I64)
    slot = b.op("Where", [b.op("Greater", [selected, b.scalar(0.5)], BOOL), b.op("Add", [offset, kept_ahead], F),
                          b.op("Cast", [size], F, to=F)], F)
    slots = b.op("Cast", [b.op("Reshape", [slot, flat_shape], F)], I64, to=I64)
    spare = b.op("Expand", [b.scalar(0.0), b.op("Add", [b.op("Reshape", [size, b.vector(1)], I64), b.vector(1)], I64)], F)
    count = b.op("Cast", [b.op("ReduceSum", [per_pair], F, keepdims=1)], I64, to=I64)

    def counting(axis: int) -> ir.Value:  # batch, class or box number of every score, flattened
        dim = b.op("Gather", [shape, b.const(f"dim{axis}", np.array(axis, np.int64))], I64, axis=0)
        numbers = index if axis == 2 else b.op("Cast", [b.op("Range", [
            b.const("zero", np.array(0, np.int64)), dim, b.const("one", np.array(1, np.int64))], I64)], F, to=F)
        layout = [1, 1, 1]
        layout[axis] = -1
        grid = b.op("Expand", [b.op("Reshape", [numbers, b.vector(*layout)], F), shape], F)
        return b.op("Reshape", [grid, flat_shape], F)

    columns = []
    for axis in range(3):
        scattered = b.op("ScatterElements", [spare, slots, counting(axis)], F, axis=0)
        columns.append(b.op("Unsqueeze", [b.op("Slice", [scattered, b.vector(0), count], F), last], F))
    return b.op("Cast", [b.op("Concat", columns, F, axis=1)], I64, to=I64)
