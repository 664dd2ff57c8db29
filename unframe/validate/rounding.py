"""What 16-bit rounding alone does to a model's outputs, and which nodes to keep in float32.

A backend that computes in fp16 (CoreML's default) or bf16 can't match the float32 graph closer
than the graph's own sensitivity to rounding allows, and that sensitivity is a property of the
model (depth, activation ranges, the scale of the output against the values summed into it), not
of the backend. It is measured by onnxruntime on a copy of the graph in which every float weight
and every float value a node computes can be rounded to the 16-bit type and back (storage
rounding, computed in float32). One session serves any choice of rounded nodes: each rounding is
a ``Where`` on one entry of a boolean input::

    x -> Conv(Where(f[7], W16, W)) -> v -> Where(f[0], Cast(Cast(v, f16), f32), v) -> Relu -> ...

Two uses:

- ``rounding_error``: every node rounded (but those marked ``unframe.passes.KEEP_FP32`` and the
  ``FLOAT32_INSIDE`` ops). The
  backend stage's parity allows ``WIDEN`` times that error (the backend also rounds inside its
  accumulations), capped at ``MAX_SHARE`` of the output's scale: a model that loses more than
  that to rounding alone is not one fp16 can serve as it is, and its parity failure says so. A
  translation bug moves outputs by the order of their scale and is still caught.
- ``plan_keep_fp32``: when rounding everything moves an output past what the backend allows, the
  nodes to keep in float32, found by bisection: the shortest prefix of the graph (in node order)
  whose rounding already goes past it ends at a node that pushes it over; that node is kept and
  the search repeats, at most ``MAX_KEEP`` times. Backends honour the marks (CoreML leaves those
  ops out of its fp16 pass, TensorRT's precision pass keeps them in float32).

What the emulation rounds is what the backends round: a node's float inputs as it reads them and
its float outputs as it stores them. Ops whose insides leave fp16's range before their result
does (a variance squares ``x - mean``: past |x - mean| = 256 it overflows; an L2 norm, a p-norm
pool or a log-sum sums before it shrinks; a Fourier transform sums n products) are computed in float32 by
every 16-bit backend here (``FLOAT32_INSIDE``: CoreML's translation runs their ops in float32,
TensorRT's and ONNX's precision pass keeps them in float32): they are not switched, as nodes marked
``KEEP_FP32`` are not, so the emulation reads their inputs as stored and rounds their outputs for
16-bit readers. Emulating them as one float32 kernel with 16-bit ends while the backend computed
their statistics in fp16 predicted nothing: FCOS's GroupNorm heads overflowed in CoreML, parity
failed by up to 72, and the planner found nothing to keep.

The same floor for float32 itself (``source_float32_error``): when an export's parity fails at the
default tolerance, the source model run in float64 says what float32 alone moves its outputs by
(a deep ResNet's segmentation map: 1.3e-4 at scale 1.3, about the default atol), and the
exported graph is allowed ``FLOAT32_WIDEN`` times that, capped at ``FLOAT32_MAX_SHARE`` of the scale.

Skipped (None) for models with more than ``MAX_WEIGHT_BYTES`` of float weights (the copy holds
them twice) and for graphs onnxruntime can't run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.validate.marks import keeps_fp32

MAX_WEIGHT_BYTES = 256 << 20
WIDEN = 2.0  # times the emulated error: the backend also rounds inside its accumulations
MAX_SHARE = 0.1  # never more than this share of the output's scale
FLOAT32_WIDEN = 3.0  # the source's own float32 error, plus an artifact up to twice as inexact
FLOAT32_MAX_SHARE = 0.01  # the cap, for the source's own float32 error (export parity)
MAX_KEEP = 12  # nodes the planner keeps in float32 before it gives up
# computed in float32 by every 16-bit backend (see the module docstring); backends import it
FLOAT32_INSIDE = frozenset({
    "LayerNormalization", "GroupNormalization", "InstanceNormalization", "MeanVarianceNormalization",
    "LpNormalization", "LRN", "ReduceL2", "ReduceLogSum", "LpPool", "GlobalLpPool", "DFT", "STFT",
})
LOW = {"fp16": ir.DataType.FLOAT16, "bf16": ir.DataType.BFLOAT16}
FLAGS = "unframe_rounding_flags"


@dataclass
class RoundingError:
    """Per float output: the largest |rounded - float32| and |float32| over the feeds."""

    precision: str
    errors: dict[str, float] = field(default_factory=dict)
    scales: dict[str, float] = field(default_factory=dict)
    nonfinite: list[str] = field(default_factory=list)  # finite in float32, not after rounding

    widen: float = WIDEN  # the allowance, in times the measured error
    max_share: float = MAX_SHARE  # the allowance's cap, a share of the output's scale

    def allowance(self, name: str) -> float:
        """The absolute error a conversion is allowed on output ``name`` (0 when unknown)."""
        if name not in self.errors or name in self.nonfinite:
            return 0.0
        return min(self.widen * self.errors[name], self.max_share * self.scales.get(name, 0.0))

    def add(self, name: str, exact: np.ndarray, approx: np.ndarray) -> None:
        """Fold one feed's output into the worst case (``exact``: the higher precision)."""
        a, b = np.asarray(exact, dtype=np.float64), np.asarray(approx, dtype=np.float64)
        finite = np.isfinite(a)
        if np.any(finite & ~np.isfinite(b)) and name not in self.nonfinite:
            self.nonfinite.append(name)
        both = finite & np.isfinite(b)
        err = float(np.abs(a - b)[both].max()) if np.any(both) else 0.0
        scale = float(np.abs(a)[finite].max()) if np.any(finite) else 0.0
        self.errors[name] = max(self.errors.get(name, 0.0), err)
        self.scales[name] = max(self.scales.get(name, 0.0), scale)


@dataclass
class KeepPlan:
    """The nodes to keep in float32 (names, in graph order) and the worst output's emulated error
    over what the backend allows, before and after."""

    kept: list[str]
    before: float
    after: float
    positions: list[int] = field(default_factory=list)  # the kept nodes' positions in the main graph

    @property
    def enough(self) -> bool:
        return self.after <= 1.0


def source_float32_error(source: Any, precise: Any, feeds: Sequence[Mapping[str, np.ndarray]]
                         ) -> RoundingError | None:
    """What float32 alone moves the source model's outputs by: ``source`` (its float32 runner)
    against ``precise`` (the same model run in float64), per float output, over ``feeds``.

    The export's parity allows ``FLOAT32_WIDEN`` (3) times it, capped at ``FLOAT32_MAX_SHARE`` of
    the output's scale: the exported graph runs other kernels, in other summation orders;
    |artifact - source| <= |source - exact| + |artifact - exact|, and an artifact up to twice as
    far from the exact answer as the source is (onnxruntime's MatMul against torch's, measured)
    is as good a float32 computation of the model. None when the float64 run fails or gives no float output."""
    result = RoundingError("fp32", widen=FLOAT32_WIDEN, max_share=FLOAT32_MAX_SHARE)
    for feed in feeds:
        try:
            approx, exact = source.run(feed), precise.run(feed)
        except Exception:  # noqa: BLE001 - a model that doesn't run in float64 gets no floor
            return None
        for name, b in approx.items():
            a = exact.get(name)
            if a is not None and np.asarray(b).dtype.kind == "f" and np.shape(a) == np.shape(b) and np.size(b):
                result.add(name, a, b)
    return result if result.errors else None


def rounding_error(model: ir.Model, feeds: Sequence[Mapping[str, np.ndarray]],
                   precision: str = "fp16") -> RoundingError | None:
    """Every candidate node rounded against none, on each feed; None when skipped."""
    rounded = _Rounded.build(model, precision)
    if rounded is None:
        return None
    try:
        return rounded.measure(feeds, rounded.all(), precision)
    except Exception:  # noqa: BLE001 - onnxruntime refused a feed: the backend's tolerance stands
        return None


def plan_keep_fp32(model: ir.Model, feeds: Sequence[Mapping[str, np.ndarray]], precision: str,
                   allowed: Callable[[str, float], float]) -> KeepPlan | None:
    """The float32 keep-list that brings every output's emulated error within
    ``allowed(output, scale)`` (see the module docstring); None when skipped."""
    rounded = _Rounded.build(model, precision)
    if rounded is None:
        return None
    try:
        exact = [rounded.run(feed, set()) for feed in feeds]

        def worst(on: set[int]) -> float:
            ratio = 0.0
            for feed, want in zip(feeds, exact, strict=True):
                got = rounded.run(feed, on)
                for name, a in want.items():
                    b = got[name]
                    finite = np.isfinite(a)
                    if np.any(finite & ~np.isfinite(b)):
                        return float("inf")
                    if not np.any(finite):
                        continue
                    limit = allowed(name, float(np.abs(a[finite]).max()))
                    err = float(np.abs(a - b)[finite].max())
                    ratio = max(ratio, err / limit if limit > 0 else (0.0 if err == 0 else float("inf")))
            return ratio

        candidates = rounded.all()
        before = after = worst(set(candidates))
        kept: list[int] = []
        while after > 1.0 and len(kept) < MAX_KEEP:
            order = [i for i in candidates if i not in kept]
            lo, hi = 0, len(order)  # rounding order[:hi] goes past; order[:lo] does not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if worst(set(order[:mid])) > 1.0:
                    hi = mid
                else:
                    lo = mid
            kept.append(order[hi - 1])
            after = worst(set(candidates) - set(kept))
    except Exception:  # noqa: BLE001 - onnxruntime refused: nothing is planned
        return None
    return KeepPlan([rounded.names[i] for i in sorted(kept)], before, after,
                    [rounded.positions[i] for i in sorted(kept)])


class _Rounded:
    """The model's copy with a rounding switch per candidate node (and per float weight)."""

    def __init__(self, runner: object, names: list[str], positions: list[int],
                 weight_users: list[list[int]]) -> None:
        self.runner = runner
        self.names = names  # candidate nodes' names, by switch index
        self.positions = positions  # their positions in the original main graph
        self.weight_users = weight_users  # per weight switch: the candidates reading it

    @classmethod
    def build(cls, model: ir.Model, precision: str) -> _Rounded | None:
        from unframe.validate.onnxruntime import OnnxRuntimeRunner

        weights = [v for v in model.graph.initializers.values()
                   if v.const_value is not None and v.dtype == ir.DataType.FLOAT]
        if sum(v.const_value.nbytes for v in weights) > MAX_WEIGHT_BYTES:
            return None
        work, names, positions, weight_users = _switched_copy(model, LOW[precision])
        if not names:
            return None
        try:
            runner = OnnxRuntimeRunner(work)
        except Exception:  # noqa: BLE001 - a graph onnxruntime can't load
            return None
        return cls(runner, names, positions, weight_users)

    def all(self) -> list[int]:
        return list(range(len(self.names)))

    def run(self, feed: Mapping[str, np.ndarray], on: set[int]) -> dict[str, np.ndarray]:
        flags = np.zeros(len(self.names), dtype=bool)
        flags[list(on)] = True
        out = self.runner.run({**feed, FLAGS: flags})  # type: ignore[attr-defined]
        return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()
                if np.asarray(v).dtype.kind == "f" and np.asarray(v).size}

    def measure(self, feeds: Sequence[Mapping[str, np.ndarray]], on: list[int],
                precision: str) -> RoundingError | None:
        result = RoundingError(precision)
        for feed in feeds:
            exact, approx = self.run(feed, set()), self.run(feed, set(on))
            for name, a in exact.items():
                result.add(name, a, approx[name])
        return result if result.errors else None


def computes_in_fp32(node: ir.Node) -> bool:
    """A node every 16-bit backend computes in float32 (``FLOAT32_INSIDE``)."""
    return node.op_type in FLOAT32_INSIDE and node.domain in ("", "ai.onnx")


def _switched_copy(model: ir.Model, low: ir.DataType) -> tuple[ir.Model, list[str], list[int], list[list[int]]]:
    """``model``'s copy with the switches of ``_Rounded`` (a new BOOL input ``FLAGS``, one entry
    per candidate node). As in a 16-bit program, a float value reaches a node rounded when the
    node that computed it is 16-bit (it was stored so) or the node reading it is (it reads 16 bits):
    a weight, a graph input or a kept node's output is rounded for its 16-bit readers only."""
    from unframe.version_converter.types import infer_types

    work = model.clone()
    graph = work.graph
    untyped = [v for n in graph for v in (*n.inputs, *n.outputs) if v is not None and v.type is None]
    if untyped:
        infer_types(work, untyped)
    nodes = list(graph)
    is_float = lambda v: v is not None and v.dtype == ir.DataType.FLOAT  # noqa: E731
    candidates = [(pos, n) for pos, n in enumerate(nodes) if not keeps_fp32(n) and not computes_in_fp32(n)
                  and any(is_float(v) for v in (*n.inputs, *n.outputs))]
    if not candidates:  # no node computes in 16 bits (a graph of constants, or all kept fp32)
        return work, [], [], []
    index = {id(n): i for i, (_, n) in enumerate(candidates)}
    flags = ir.Value(name=FLAGS, type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([len(candidates)]))
    graph.inputs.append(flags)
    first = nodes[0]
    made: dict[int, ir.Value] = {}  # candidate index -> its flag, a BOOL scalar

    def flag(i: int) -> ir.Value:
        if i not in made:
            at = ir.Value(name=f"{FLAGS}_{i}", const_value=ir.tensor(np.array(i, np.int64)),
                          type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([]))
            graph.register_initializer(at)
            pick = ir.node("Gather", [flags, at])
            pick.outputs[0].name = f"{FLAGS}_{i}_on"
            graph.insert_before(first, pick)
            made[i] = pick.outputs[0]
        return made[i]

    weight_users: list[list[int]] = []  # kept for the interface: weights switch with their readers
    values = [*graph.inputs[:-1], *graph.initializers.values(), *(o for n in nodes for o in n.outputs)]
    for value in values:
        if not is_float(value):
            continue
        producer = value.producer()
        source = index.get(id(producer)) if producer is not None else None
        uses = list(value.uses())
        if not uses or (source is None and not any(id(u) in index for u, _ in uses)):
            continue
        if value.const_value is not None:  # a weight: its rounded copy, computed once here
            rounded = ir.Value(name=f"{value.name}__low", type=ir.TensorType(ir.DataType.FLOAT), shape=value.shape,
                               const_value=ir.tensor(_round(value.const_value.numpy(), low)))
            graph.register_initializer(rounded)
            anchor: list[ir.Node] = []
        else:
            down = ir.node("Cast", [value], attributes={"to": int(low)})
            up = ir.node("Cast", [down.outputs[0]], attributes={"to": int(ir.DataType.FLOAT)})
            down.outputs[0].name, up.outputs[0].name = f"{value.name}__low", f"{value.name}__rounded"
            rounded, anchor = up.outputs[0], [down, up]
        added = list(anchor)
        for serial, (user, slot) in enumerate(uses):
            reader = index.get(id(user))
            tag = reader if reader is not None else f"sub{serial}"  # a read inside a subgraph
            on = [flag(i) for i in (source, reader) if i is not None]
            if not on:
                continue
            cond = on[0]
            if len(on) == 2:
                either = ir.node("Or", on)
                either.outputs[0].name = f"{value.name}__{tag}_or"
                added.append(either)
                cond = either.outputs[0]
            where = ir.node("Where", [cond, rounded, value])
            where.outputs[0].name = f"{value.name}__{tag}_seen"
            where.outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
            added.append(where)
            user.replace_input_with(slot, where.outputs[0])
        if not added:
            continue
        if producer is not None and producer.graph is graph:
            graph.insert_after(producer, added)
        else:
            graph.insert_before(first, added)
    names = [n.name or f"{n.op_type}#{pos}" for pos, n in candidates]
    return work, names, [pos for pos, _ in candidates], weight_users


def _round(array: np.ndarray, low: ir.DataType) -> np.ndarray:
    array = np.asarray(array, dtype=np.float32)
    if low == ir.DataType.FLOAT16:
        with np.errstate(over="ignore"):
            return array.astype(np.float16).astype(np.float32)
    # bfloat16: keep the top 16 bits of each float32, rounding to nearest even
    bits = np.ascontiguousarray(array).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return rounded.view(np.float32)
