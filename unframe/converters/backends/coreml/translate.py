"""ONNX (onnx-ir, canonical opset 21) -> MIL program, then ``ct.convert`` to an ML Program.

The walk is plain: graph inputs become MIL placeholders, initializers and ``Constant`` nodes
become ``const`` ops, and each node, in topological order, is handed to its registered
translator, which returns the MIL vars of the node's outputs. Control-flow translators walk
their subgraphs with the same machinery (:meth:`GraphTranslator.run_subgraph`).

MIL has no 64-bit types: int64 becomes int32 and float64 becomes float32 (the backend's
pre-flight check and the parity stage make that visible). Names are sanitized for MIL and the
mapping is recorded in the package's metadata.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx_ir as ir

from unframe import io
from unframe.converters.backends.coreml.context import (
    MIL_DTYPES,
    TranslateContext,
    ct_target,
    mil_type,
    np_const,
)
from unframe.converters.backends.coreml.ops import ALTERNATIVES, TRANSLATORS
from unframe.converters.backends.coreml.rank import MAX_RANK, fold_high_rank_windows
from unframe.converters.backends.coreml.states import (
    StateEdges,
    StatePlan,
    fix_batch,
    max_context,
    plan_states,
)
from unframe.errors import Blocker, ConversionError, UsageError
from unframe.opset import is_default_domain
from unframe.passes import keeps_fp32
from unframe.validate.rounding import computes_in_fp32

if TYPE_CHECKING:
    from coremltools.converters.mil.mil import Program, Var

CANONICAL_OPSET = 21

# deployment target name -> the iOS generation of its MIL opset
TARGETS: dict[str, int] = {
    "iOS15": 15, "iOS16": 16, "iOS17": 17, "iOS18": 18,
    "macOS12": 15, "macOS13": 16, "macOS14": 17, "macOS15": 18,
    "tvOS15": 15, "tvOS16": 16, "tvOS17": 17, "tvOS18": 18,
    "watchOS8": 15, "watchOS9": 16, "watchOS10": 17, "watchOS11": 18,
}
DEFAULT_TARGET = "iOS16"
MIN_IOS = 16  # the oldest MIL opset this backend writes (iOS16: fp16 I/O, most ops' current form)
DEFAULT_RANGE = (1, 4096)


def ios_of(target_name: str | None) -> int:
    name = target_name or DEFAULT_TARGET
    if name not in TARGETS:
        raise UsageError(f"unknown CoreML target {name!r}",
                         f"use one of {', '.join(sorted(TARGETS))}")
    return TARGETS[name]


_NAME_OK = re.compile(r"[^A-Za-z0-9_]")


def sanitize(name: str) -> str:
    out = _NAME_OK.sub("_", name) or "_"
    return "_" + out if out[0].isdigit() else out


class NameMap:
    """ONNX names -> unique MIL-safe names (inputs and outputs keep theirs when they can)."""

    def __init__(self) -> None:
        self.mapping: dict[str, str] = {}
        self._used: set[str] = set()
        # ONNX value -> the MIL var that computes it, as built (for the divergence locator)
        self.values: dict[str, str] = {}

    def add(self, onnx_name: str) -> str:
        if onnx_name in self.mapping:
            return self.mapping[onnx_name]
        base = sanitize(onnx_name)
        name, i = base, 1
        while name in self._used:
            name, i = f"{base}_{i}", i + 1
        self._used.add(name)
        self.mapping[onnx_name] = name
        return name

    def renamed(self) -> dict[str, str]:
        return {k: v for k, v in self.mapping.items() if k != v}


# -- the graph walk ------------------------------------------------------------------------------

@dataclass
class GraphTranslator:
    ios: int
    names: NameMap = field(default_factory=NameMap)
    at: ir.Node | None = None  # the node being translated (named by a failure)
    # outputs of the MIL ops written for ONNX nodes that ask to stay in float32
    # (``unframe.passes.KEEP_FP32``): an fp16 program leaves their ops out of its cast pass
    fp32_ops: set[str] = field(default_factory=set)
    # what a translator wants `check` and the report to say (a bound it had to choose...)
    notes: list[str] = field(default_factory=list)

    def run_graph(self, graph: ir.Graph, env: dict[str, Var]) -> None:
        from coremltools.converters.mil import Builder as mb

        for name, value in graph.initializers.items():
            if name not in env and value.const_value is not None:
                env[name] = mb.const(val=np_const(value.const_value.numpy()))
        for node in _topological(graph):
            self.run_node(node, env)

    def run_node(self, node: ir.Node, env: dict[str, Var]) -> None:
        from coremltools.converters.mil.mil.block import curr_block

        spec = TRANSLATORS.get(node.op_type, None) if is_default_domain(node.domain) else None
        if spec is None:
            raise ConversionError(f"node {node.name!r} [{node.domain}::{node.op_type}]: no CoreML translator",
                                  "run `unframe check` to list every unsupported op")
        inputs = [env[v.name] if v is not None and v.name else None for v in node.inputs]
        ctx = TranslateContext(node, inputs, self.ios, self, env)
        self.at = node
        # kept (a pass's mark, or the planner's), or computed in float32 by every 16-bit backend
        # (what the rounding emulation assumes: unframe.validate.rounding.FLOAT32_INSIDE)
        block = curr_block() if keeps_fp32(node) or computes_in_fp32(node) else None
        before = len(block.operations) if block is not None else 0
        try:
            result = spec.fn(ctx)
        except ConversionError:
            raise
        except Exception as exc:
            raise ConversionError(f"node {node.name!r} [{node.op_type}]: {type(exc).__name__}: {exc}",
                                  "report it with the model, or pick another target") from exc
        if block is not None:
            new = len(block.operations) - before  # the ops this node added, from the end
            for op, _ in zip(reversed(block.operations), range(new), strict=False):
                # output names survive the fusions that run before the fp16 cast pass
                self.fp32_ops.update(v.name for v in op.outputs)
        outs = list(result) if isinstance(result, (list, tuple)) else [result]
        made_here = {id(v) for v in inputs if v is not None}
        for value, var in zip(node.outputs, outs, strict=False):
            if value.name and var is not None:
                env[value.name] = var
                if id(var) not in made_here and var.op is not None and var.op.op_type != "const":
                    self.names.values.setdefault(value.name, var.name)

    def run_subgraph(self, graph: ir.Graph, outer: dict[str, Var], bound: Sequence[Var]) -> list[Var]:
        """Translate a subgraph (If branch, Loop body) inside the current MIL block: its formal
        inputs are bound to ``bound``; outer-scope names are visible. Returns its output vars."""
        env = dict(outer)
        for formal, actual in zip(graph.inputs, bound, strict=False):
            env[formal.name] = actual
        self.run_graph(graph, env)
        return [env[o.name] for o in graph.outputs]


def _topological(graph: ir.Graph) -> Iterable[ir.Node]:
    try:
        graph.sort()
    except Exception:  # already sorted, or a cycle the checker reports elsewhere
        pass
    return list(graph)


# -- building the whole program ------------------------------------------------------------------

@dataclass
class InputPlan:
    """How one graph input enters the MIL program."""

    onnx_name: str
    mil_name: str
    shape: list[int | str]  # ints, or dim names for flexible dims
    dtype: ir.DataType
    bounds: dict[int, tuple[int, int]] = field(default_factory=dict)  # axis -> (min, max)
    enumerated: list[tuple[int, ...]] = field(default_factory=list)


def plan_inputs(model: ir.Model, names: NameMap, options: dict[str, Any], *,
                skip: Iterable[str] = (), default_range: tuple[int, int] = DEFAULT_RANGE
                ) -> list[InputPlan]:
    """The program's inputs (``skip``: inputs that become states)."""
    inits = {*model.graph.initializers, *skip}
    static = bool(options.get("static"))
    samples: dict[str, Sequence[int]] = options.get("sample_shapes") or {}
    dims = _parse_dims(options.get("dims") or [])
    enumerated: dict[str, list[tuple[int, ...]]] = options.get("enumerated") or {}
    plans = []
    for v in model.graph.inputs:
        if v.name in inits:
            continue
        if v.shape is None:
            raise ConversionError(f"input {v.name!r} has no rank",
                                  "give it a shape (--inputs name:shape:dtype)")
        sample = samples.get(v.name)
        shape: list[int | str] = []
        bounds: dict[int, tuple[int, int]] = {}
        for axis, d in enumerate(v.shape):
            if isinstance(d, int):
                shape.append(d)
                continue
            dim_name = str(d.value) if getattr(d, "value", None) else f"{v.name}:{axis}"
            if static:
                if sample is None:
                    raise UsageError(f"--static needs a sample shape for input {v.name!r}",
                                     "pass sample inputs or --inputs with a fixed shape")
                shape.append(int(sample[axis]))
                continue
            shape.append(dim_name)
            bounds[axis] = dims.get(dim_name) or dims.get(f"{v.name}:{axis}") or default_range
        plans.append(InputPlan(v.name, names.add(v.name), shape, v.dtype or ir.DataType.FLOAT,
                               bounds, [tuple(s) for s in enumerated.get(v.name, [])]))
    return plans


def _parse_dims(dims: Iterable[Any]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for entry in dims:
        name, lo, hi = entry
        lo_i, hi_i = int(lo), int(hi)
        if lo_i < 1 or (hi_i != -1 and hi_i < lo_i):
            raise UsageError(f"bad --dim bounds for {name!r}: {lo}..{hi}",
                             "use --dim name:min:max with 1 <= min <= max (max -1: unbounded)")
        out[str(name)] = (lo_i, hi_i)
    return out


def build_program(model: ir.Model, ios: int, plans: list[InputPlan], names: NameMap,
                  translator: GraphTranslator | None = None, states: Sequence[StatePlan] = ()
                  ) -> Program:
    """The MIL program of the model's main graph; the translator's ``fp32_ops`` collects the
    output names of the MIL ops that must stay in float32. ``states``: cache inputs kept in
    Core ML states (``coreml.states``), read before the graph and written after it."""
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import Function, Placeholder, Program, get_new_symbol, types
    from coremltools.converters.mil.mil.program import StateTensorPlaceholder

    symbols: dict[str, Any] = {}
    placeholders = {}
    for p in plans:
        shape = [d if isinstance(d, int) else symbols.setdefault(d, get_new_symbol()) for d in p.shape]
        shape = shape or [1]  # ML programs take no rank-0 inputs: a scalar comes in as [1]
        # ML programs take fp16/fp32/int32 inputs: bool comes in as int32 and is cast inside.
        dtype = mil_type(ir.DataType.INT32 if p.dtype == ir.DataType.BOOL else p.dtype)
        placeholders[p.mil_name] = Placeholder(shape, dtype=dtype)
    for st in states:
        placeholders[st.mil_name] = StateTensorPlaceholder(list(st.shape), dtype=types.fp16)
    prog = Program()
    translator = translator or GraphTranslator(ios, names)
    with Function(placeholders, opset_version=ct_target(ios)) as func:
        env: dict[str, Var] = {}
        for p in plans:
            var = func.inputs[p.mil_name]
            if not p.shape:
                var = mb.squeeze(x=var, axes=[0])
            env[p.onnx_name] = mb.cast(x=var, dtype="bool") if p.dtype == ir.DataType.BOOL else var
        edges = StateEdges(list(states), func.inputs) if states else None
        if edges is not None:
            edges.read(env, {v.name: v.dtype for v in model.graph.inputs if v.dtype is not None})
        translator.run_graph(model.graph, env)
        if edges is not None:
            edges.write(env)
        written = {st.present for st in states}
        func.set_outputs([_named_output(env, o, names) for o in model.graph.outputs
                          if o.name not in written])
    prog.add_function("main", func)
    return prog


def _named_output(env: dict[str, Var], value: ir.Value, names: NameMap) -> Var:
    from coremltools.converters.mil import Builder as mb

    var = env[value.name]
    mil_name = names.add(value.name)
    if var.name == mil_name and var.op is not None and var.op.op_type != "const":
        return var
    return mb.identity(x=var, name=mil_name)


def ct_inputs(plans: list[InputPlan], options: dict[str, Any]) -> list[Any]:
    """coremltools input types: flexible dims as RangeDim (or enumerated shapes), images."""
    import coremltools as ct

    image = options.get("image_input")
    out = []
    for p in plans:
        shape = _ct_shape(p)
        if image and p.onnx_name == image:
            out.append(ct.ImageType(name=p.mil_name, shape=shape,
                                    scale=float(options.get("scale") or 1.0),
                                    bias=_bias(options.get("bias")),
                                    color_layout=_color_layout(options.get("color_layout"))))
        elif p.bounds or p.enumerated:
            out.append(ct.TensorType(name=p.mil_name, shape=shape))
    return out


def _ct_shape(p: InputPlan) -> Any:
    import coremltools as ct

    if p.enumerated:
        return ct.EnumeratedShapes(shapes=[list(s) for s in p.enumerated])
    dims: list[Any] = []
    for axis, d in enumerate(p.shape):
        if isinstance(d, int):
            dims.append(d)
        else:
            lo, hi = p.bounds.get(axis, DEFAULT_RANGE)
            dims.append(ct.RangeDim(lower_bound=lo, upper_bound=hi, default=lo))
    return ct.Shape(dims)


def _bias(bias: Any) -> Any:
    if bias is None:
        return 0.0
    if isinstance(bias, (list, tuple)):
        return [float(b) for b in bias]
    return float(bias)


def _color_layout(layout: Any) -> Any:
    import coremltools as ct

    table = {None: ct.colorlayout.RGB, "RGB": ct.colorlayout.RGB, "BGR": ct.colorlayout.BGR,
             "G": ct.colorlayout.GRAYSCALE, "GRAYSCALE": ct.colorlayout.GRAYSCALE}
    key = layout.upper() if isinstance(layout, str) else layout
    if key not in table:
        raise UsageError(f"unknown --color-layout {layout!r}", "use RGB, BGR or GRAYSCALE")
    return table[key]


# -- translation, dry or for real ----------------------------------------------------------------

@dataclass
class Translation:
    """A model translated to a MIL program (not yet handed to coremltools' converter), or the
    blockers that stopped it, with notes for `unframe check`."""

    blockers: list[Blocker]
    notes: list[str] = field(default_factory=list)
    program: Program | None = None
    names: NameMap = field(default_factory=NameMap)
    plans: list[InputPlan] = field(default_factory=list)
    # outputs of MIL ops that stay in float32 in an fp16 program (nodes marked KEEP_FP32), and
    # whether every node of the graph is so marked (then the whole program is fp32)
    fp32_ops: set[str] = field(default_factory=set)
    all_fp32: bool = False
    states: list[StatePlan] = field(default_factory=list)  # --stateful: the cache's states
    stand_ins: int = 0  # weights translated as stand-ins (a dry run): not a program to convert



def translate(model: ir.Model, ios: int, options: dict[str, Any], *, dry: bool = False) -> Translation:
    """What `check` runs dry and `convert` runs for real, so the two can't disagree: the static
    blockers of :func:`check_model`; else dtype legalization of a copy of the graph (the model is
    not changed) and the MIL program built from it, a node that fails to translate being a
    blocker. ``dry``: large float weights are stand-ins (``io.STAND_IN_BYTES``), never read: no
    translator's decision reads a weight's values (shapes, axes and indices are small, and
    kept), and reading them would be most of a check's time and memory (4.7 GB at Llama-1B)."""
    from unframe.converters.backends.coreml.legalize import legalize
    from unframe.converters.backends.coreml.mil_eval._ct import import_coremltools
    from unframe.passes.loops import ConstantTripCountPass

    work = model.clone()  # O(nodes): tensors are shared, never copied
    # a loop that counts to a constant (tf.range in a Keras call) gets its trip count as M: the
    # Loop translator unrolls those, and refuses scan outputs without one
    ConstantTripCountPass()(work)
    blockers = check_model(work, ios)
    if blockers:
        return Translation(blockers)
    import_coremltools()
    stand_ins = _stand_in_weights(work) if dry else 0
    folded = fold_high_rank_windows(work)
    legal = legalize(work, ios, str(options.get("precision", "fp16")).lower())
    notes = list(legal.notes)
    if stand_ins:
        notes.append(f"{stand_ins} float weight(s) past {io.STAND_IN_BYTES >> 20} MiB not read by the "
                     "check (their values decide nothing it checks); the conversion scans them for "
                     "values past fp16's range")
    if folded:
        notes.append(f"{folded} rank-6 chain(s) folded to rank 5 (a window Reshape/Transpose computed on "
                     "rank-5 views, in one or two steps, or views through rank 6 made one Reshape; CoreML "
                     "holds rank 5 at most)")
    if legal.moved:
        shown = "; ".join(legal.moved[:3]) + (f"; +{len(legal.moved) - 3} more" if len(legal.moved) > 3 else "")
        notes.append(f"{len(legal.moved)} node(s) computed in a type their MIL op takes ({shown})")
    if legal.blockers:
        return Translation(legal.blockers, notes)
    names = NameMap()
    states: list[StatePlan] = []
    default_range = DEFAULT_RANGE
    if options.get("stateful"):
        found, state_blockers = plan_states(work, ios, options)
        if state_blockers:
            return Translation(state_blockers, notes)
        pinned = fix_batch(work, found)
        states = [StatePlan(past, present, names.add(past), shape) for past, present, shape in found]
        default_range = (1, max_context(options))
        notes.append(f"KV cache kept in {len(states)} Core ML state(s) of {max_context(options)} "
                     f"tokens each (fp16, batch 1{f'; {pinned} input batch dim(s) pinned to 1' if pinned else ''}): "
                     "the package takes the new tokens and the attention mask, and returns the "
                     "logits (--max-context sets the length)")
    plans = plan_inputs(work, names, options, skip=[st.past for st in states],
                        default_range=default_range)
    translator = GraphTranslator(ios, names)
    try:
        program = build_program(work, ios, plans, names, translator, states)
    except ConversionError as exc:
        return Translation([_failure_blocker(exc, translator.at)], notes)
    notes.extend(translator.notes)
    too_deep = _rank_blockers(program, work, names)
    if too_deep:
        return Translation(too_deep, notes)
    all_fp32 = len(work.graph) > 0 and all(keeps_fp32(n) for n in work.graph)
    return Translation([], notes, program, names, plans, translator.fp32_ops, all_fp32, states, stand_ins)


def _stand_in_weights(model: ir.Model) -> int:
    """Replace the model's (a copy's) float weights of ``io.STAND_IN_BYTES`` or more by zeros of
    their shape and type that take no memory (a broadcast view); how many."""
    count = 0
    for graph in model.graphs():
        for value in graph.initializers.values():
            tensor = value.const_value
            if tensor is not None and io.stands_in(tensor):
                zero = np.zeros((), dtype=tensor.dtype.numpy())
                value.const_value = ir.Tensor(np.broadcast_to(zero, tuple(tensor.shape.numpy())),
                                              dtype=tensor.dtype, name=tensor.name)
                count += 1
    return count




def _rank_blockers(program: Program, graph: ir.Model, names: NameMap) -> list[Blocker]:
    """Each ONNX node whose MIL value has more than 5 dimensions (Swin's window partition:
    Reshape to [B, H/w, w, W/w, w, C]) is a blocker, found here instead of as coremltools'
    failure after the whole conversion."""
    onnx_of = {mil: onnx for onnx, mil in names.values.items()}
    producer = {out.name: node for node in ir.traversal.RecursiveGraphIterator(graph.graph)
                for out in node.outputs}
    blockers: list[Blocker] = []
    seen: set[str] = set()
    for op in program.functions["main"].operations:
        for var in op.outputs:
            shape = getattr(var, "shape", None)
            if shape is None or len(shape) <= MAX_RANK:
                continue
            node = producer.get(onnx_of.get(var.name, ""))
            where = node.name if node is not None else var.name
            if where in seen:
                continue
            seen.add(where)
            blockers.append(Blocker(node.op_type if node is not None else op.op_type,
                                    f"outputs a rank-{len(shape)} tensor; CoreML holds rank {MAX_RANK} at most",
                                    where, hint="reshape so that no intermediate has more than 5 dimensions "
                                                "(e.g. fold the batch into a neighbouring axis)"))
    return blockers


_NODE_PREFIX = re.compile(r"^node '[^']*' \[[^\]]*\]: ")


def _failure_blocker(exc: ConversionError, node: ir.Node | None) -> Blocker:
    reason = _NODE_PREFIX.sub("", exc.message)
    if node is None:
        return Blocker("*", f"the MIL program could not be built: {reason}", hint=exc.hint)
    return Blocker(node.op_type, f"can't be translated: {reason}", node.name, hint=exc.hint)


# -- pre-flight ----------------------------------------------------------------------------------

def check_model(model: ir.Model, ios: int) -> list[Blocker]:
    """Every reason the model can't become a CoreML program for ``ios``, without building it."""
    blockers: list[Blocker] = []
    for v in model.graph.inputs:
        if v.name not in model.graph.initializers and v.shape is None:
            blockers.append(Blocker("input", f"input {v.name!r} has a dynamic rank, which CoreML "
                                    "can't take", hint="give the input a fixed rank"))
    for v in [*model.graph.inputs, *model.graph.outputs]:
        if v.dtype is not None and v.dtype not in MIL_DTYPES:
            blockers.append(Blocker("io", f"{v.name!r} has element type {v.dtype.name}, which "
                                    "CoreML can't hold", hint="cast it to float32 or int32"))
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        blockers.extend(_node_blockers(node, ios, ALTERNATIVES))
    return blockers


def _node_blockers(node: ir.Node, ios: int, alternatives: dict[str, str]) -> list[Blocker]:
    if not is_default_domain(node.domain):
        return [Blocker(node.op_type, "custom-domain op with no CoreML translator", node.name,
                        node.domain, "inline or decompose it into standard ONNX ops")]
    spec = TRANSLATORS.get(node.op_type, None)
    if spec is None:
        alt = alternatives.get(node.op_type, "")
        return [Blocker(node.op_type, "no CoreML translator for this op", node.name,
                        hint=f"nearest supported alternative: {alt}" if alt else "")]
    out: list[Blocker] = []
    needed = spec.required_ios(node)
    if needed > ios:
        out.append(Blocker(node.op_type, f"needs a target of iOS{needed}/macOS{needed - 3} or newer",
                           node.name, hint=f"pass --target iOS{needed}"))
    if spec.check is not None:
        out.extend(Blocker(node.op_type, reason, node.name) for reason in spec.check(node))
    for v in [*node.inputs, *node.outputs]:
        if v is not None and v.dtype is not None and v.dtype not in MIL_DTYPES:
            out.append(Blocker(node.op_type, f"tensor {v.name!r} has element type {v.dtype.name}, "
                               "which CoreML can't hold", node.name,
                               hint="cast to float32/int32 before this op"))
            break
    return out
