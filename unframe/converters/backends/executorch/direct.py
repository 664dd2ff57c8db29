"""torch -> ``.pte`` directly: torch.export, the edge dialect with XNNPACK's partitioner, portable
kernels for what XNNPACK leaves, ExecuTorch's serializer. No ONNX on this route.

``convert_from_torch(native, example, target, workdir, output_names=None) -> Artifact`` and
``check_from_torch(native, example, target) -> list[Blocker]`` take what the torch frontend
prepares (``unframe.converters.frontends._torch.inputs.ModelInputs``): ``args``/``kwargs`` (the
pytree of sample tensors), ``names`` (one per tensor leaf, in flatten order), ``dynamic``
(``{name: {axis: dim name}}``, the axes proven dynamic) and what ``export_example`` reads
(``example``, ``batch``: the inputs to trace with). ``output_names`` are the frontend's names
of the output tensors (``inputs.output_names`` of the eager outputs); without them they are
made the same way from the program's output structure.

The model is exported through a wrapper taking ``(args, kwargs)``, so that the program's inputs
are the flattened leaves in the order of ``ModelInputs.leaves()`` whatever the forward's
signature. Each dynamic axis gets ``Dim.AUTO`` with bounds: ExecuTorch plans memory for the
largest shape, so an unbounded dim would silently be planned at its trace size. The bounds are
``--shapes`` where given, else 1 to ``max(2 * sample, 8)`` (the TensorRT backend's rule), and
what torch.export kept of them is recorded in the sidecar. A program with dynamic dims is run
once on the samples and on the traced inputs before it is accepted: some portable kernels don't
resize their outputs to a dynamic size; such a program is refused (a blocker), as is one a step
refuses with dynamic dims (ExecuTorch's emitter on some views). The pipeline's direct stage then
builds it from the frontend's static copy of the inputs, with a note, and checks it on the
samples only. ``precision="fp16"`` exports a float16 copy of the model
behind casts: inputs and outputs keep their types.

Every refusal is an ``UnsupportedError`` (exit 4) listing all blockers found: torch.export's
failure, ops outside the Core ATen opset that no kernel of this runtime implements (each one,
found by lowering again with the ones seen so far excepted), ops of the final program without a
kernel. ``check_from_torch`` does the same work as ``convert_from_torch`` up to the bytes (so the
two can't disagree) and keeps it for the ``convert_from_torch`` that follows.
"""

from __future__ import annotations

import copy
import functools
import operator
import re
import time
import weakref
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unframe import timing
from unframe.converters.backends.executorch import pte
from unframe.converters.backends.executorch.runner import METHOD, quiet, runtime, runtime_version
from unframe.converters.base import Artifact, Target
from unframe.errors import Blocker, MissingExtraError, UnsupportedError, UsageError

PRECISIONS = ("fp32", "fp16")
DELEGATE = "XnnpackBackend"
REFUSED_HINT = "run `unframe check --to executorch` for the list; --debug shows the tools' output"
# lowering again with one more op excepted from the Core ATen check: at most this many rounds
MAX_EXCEPTION_ROUNDS = 12
_NON_CORE = re.compile(r"_core_aten_ops_exception_list=\[torch\.ops\.([\w.]+)\]")
# not operator kernels: the graph's bookkeeping, and Python's own arithmetic on symbolic sizes
_NOT_OPS = {"getitem", "executorch_call_delegate", "alloc", *dir(operator)}
NOTE_OPS = 8  # portable ops named in the note (the sidecar has them all)
NO_KERNEL_HINT = "avoid the op in the model, or build an ExecuTorch runtime with a kernel for it"
STATIC_HINT = "--static builds the program with the samples' shapes"


@dataclass
class Lowered:
    """A lowering's product: the program manager, the I/O record, what XNNPACK took, the notes,
    and the blockers (no manager when there are any)."""

    blockers: list[Blocker] = field(default_factory=list)
    manager: Any = None
    record: dict[str, Any] = field(default_factory=dict)
    delegation: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    failure: str = ""  # why the program with dynamic dims can't run the samples or take its bounds
    float_bytes: int = 0  # a quantized program's float weights, as float32 (for the size ratio)


# the lowering a check made, for the convert after it: keyed by the model (weakly), the inputs
# and the options
_LOWERED: weakref.WeakKeyDictionary[Any, tuple[tuple[int, str], Lowered]] = weakref.WeakKeyDictionary()


def check_from_torch(native: Any, example: Any, target: Target,
                     output_names: Sequence[str] | None = None) -> list[Blocker]:
    """Every reason the model can't become a ``.pte`` here, found by lowering it (kept for the
    ``convert_from_torch`` that follows with the same model, inputs and options)."""
    lowered = _lowering(native, example, target, output_names)
    return list(lowered.blockers)


def convert_from_torch(native: Any, example: Any, target: Target, workdir: Path,
                       output_names: Sequence[str] | None = None) -> Artifact:
    """The ``.pte`` program of ``native`` (an ``nn.Module`` or ``ExportedProgram``), written at
    ``workdir/model.pte``; its metadata is the sidecar's content (``backend.write`` adds the
    program's hash)."""
    lowered = _lowering(native, example, target, output_names, take=True)
    if lowered.blockers:
        raise UnsupportedError(f"the model can't be converted to ExecuTorch ({len(lowered.blockers)} "
                               "blocker" + ("s" if len(lowered.blockers) > 1 else "") + ")",
                               REFUSED_HINT, blockers=lowered.blockers)
    started = time.perf_counter()
    with quiet():
        data = bytes(lowered.manager.buffer)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"model{pte.SUFFIX}"
    path.write_bytes(data)
    lowered.seconds["serialize"] = time.perf_counter() - started
    meta = dict(lowered.record, format=pte.FORMAT, executorch_version=runtime_version(),
                torch_version=_torch_version(), precision=_precision(target),
                delegation=lowered.delegation, notes=list(lowered.notes), provenance={})
    if lowered.float_bytes:
        # the float weights as float32 against the whole quantized program (its overhead counted)
        meta["quantized_size"] = (lowered.float_bytes, len(data))
        meta["quantize"] = target.get("quantize").scheme.name
    return Artifact(kind="pte", model=data, path=path, metadata=meta, notes=list(lowered.notes))


def _lowering(native: Any, example: Any, target: Target, output_names: Sequence[str] | None,
              take: bool = False) -> Lowered:
    key = (id(example), _options_key(target, output_names))
    cached = _cached(native, key, take)
    if cached is not None:
        return cached
    lowered = lower(native, example, target, output_names)
    if not take:
        _remember(native, key, lowered)
    return lowered


def _cached(native: Any, key: tuple[int, str], take: bool) -> Lowered | None:
    try:
        entry = _LOWERED.get(native)
    except TypeError:  # an object that can't be weakly referenced: no cache
        return None
    if entry is None or entry[0] != key:
        return None
    if take:
        del _LOWERED[native]
    return entry[1]


def _remember(native: Any, key: tuple[int, str], lowered: Lowered) -> None:
    try:
        _LOWERED[native] = (key, lowered)
    except TypeError:
        pass


def _options_key(target: Target, output_names: Sequence[str] | None) -> str:
    options = {k: target.options.get(k) for k in ("precision", "shapes", "static")}
    return repr((sorted((k, repr(v)) for k, v in options.items()), list(output_names or []),
                 _quantize_key(target.get("quantize"))))


def _quantize_key(request: Any) -> Any:
    """The request's identity: the scheme, the calibration sets (the run's one list, by
    identity: their arrays are too large to compare) and what is kept in float."""
    if request is None:
        return None
    return (request.scheme.name, id(request.calibration), len(request.calibration), request.exclude)


# ------------------------------------------------------------------------------ the lowering --
def lower(native: Any, example: Any, target: Target, output_names: Sequence[str] | None = None
          ) -> Lowered:
    """export -> edge + XNNPACK -> ExecuTorch program; blockers instead where a step refuses,
    or where the program with dynamic dims can't run the samples. The static build is the
    caller's (the pipeline's direct stage builds again from the frontend's static copy of the
    inputs, and its parity then runs only the samples: a static program built here behind its
    back was checked on the probe's batch, which it can't take)."""
    _ensure_installed()
    precision = str(target.get("precision") or "fp32").lower()
    if precision not in PRECISIONS:
        return Lowered([Blocker("*", f"precision {precision!r} is not one of {', '.join(PRECISIONS)}",
                                hint="use --precision fp32 or fp16")])
    lowered = _lower_once(native, example, target, output_names, precision)
    if lowered.failure:
        lowered.blockers.append(Blocker("*", f"the program with dynamic dims doesn't run here ({lowered.failure})",
                                        hint=STATIC_HINT))
    return lowered


def _lower_once(native: Any, example: Any, target: Target, output_names: Sequence[str] | None,
                precision: str) -> Lowered:
    lowered = Lowered()
    request = target.get("quantize")
    if request is not None and precision == "fp16":
        precision = "fp32"  # the quantized layers compute in int8; the rest keeps the model's floats
        lowered.notes.append(f"--precision fp16 not applied: the program is quantized ({request.scheme.name})")
    started = time.perf_counter()
    program = _export(native, example, target, precision, lowered)
    lowered.seconds["export"] = time.perf_counter() - started
    if program is not None and request is not None:
        started = time.perf_counter()
        program = _quantize(program, example, target, request, lowered)
        lowered.seconds["quantize"] = time.perf_counter() - started
    if program is None:
        return lowered
    lowered.record = io_record(program, example, output_names, _requested_bounds(example, target))
    lowered.notes += _static_notes(example, lowered.record, target)
    started = time.perf_counter()
    edge = _to_edge(program, lowered)
    lowered.seconds["lower"] = time.perf_counter() - started
    if edge is None:
        return lowered
    lowered.delegation = delegation_summary(edge)
    lowered.notes.append(delegation_note(lowered.delegation))
    if request is not None:
        from unframe.converters.backends.executorch.quantize import quantize_note, quantized_layers

        lowered.notes.append(quantize_note(request, lowered.delegation, quantized_layers(program)))
    started = time.perf_counter()
    manager = _to_executorch(edge, lowered)
    lowered.seconds["to_executorch"] = time.perf_counter() - started
    if manager is None:
        return lowered
    lowered.blockers += missing_kernels(manager)
    if lowered.blockers:
        return lowered
    if lowered.record["bounds"]:
        lowered.failure = _fixed_by_lowering(manager, lowered.record) or \
            _dynamic_failure(manager, lowered.record, example)
        if lowered.failure:
            return lowered
        lowered.notes += _planned_bounds(manager, lowered.record)
    lowered.manager = manager
    if precision == "fp16":
        lowered.notes.append("float16 weights and compute (a float16 copy of the model); inputs "
                             "and outputs keep their types")
    return lowered


def _quantize(program: Any, example: Any, target: Target, request: Any, lowered: Lowered) -> Any:
    """The exported program quantized with PT2E (``quantize.py``), traced again with the export's
    inputs and dynamic dims; None (and a blocker) when the quantizer refuses."""
    from unframe.converters.backends.executorch.quantize import float_weight_bytes, quantize_program
    from unframe.converters.frontends._torch.export import explain
    from unframe.converters.frontends._torch.inputs import export_example
    from unframe.errors import UnframeError

    args, kwargs = (example.args, example.kwargs) if target.get("static") else export_example(example)
    shapes = None if target.get("static") else dynamic_shapes(example, _requested_bounds(example, target))
    lowered.float_bytes = float_weight_bytes(program)
    try:
        with quiet():
            return quantize_program(program, example, args, kwargs, shapes, request)
    except UnframeError:  # calibration sets that don't fit the inputs: the user's to fix
        raise
    except Exception as exc:  # noqa: BLE001 - the quantizer's refusal becomes the blocker
        lowered.blockers.append(Blocker("*", f"PT2E quantization ({request.scheme.name}) failed: "
                                             f"{explain(exc, 'torch.export')}",
                                        hint="try --quantize int8-dynamic, or convert without --quantize"))
        return None


def _ensure_installed() -> None:
    """ExecuTorch's compiler importable (imported here, quietly: torchao logs the CUDA kernels a
    CPU build can't load, torch a pytree deprecation)."""
    import importlib.util

    missing = [m for m in ("torch", "executorch") if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtraError("building an ExecuTorch program", "executorch",
                                "executorch, torchao (with torch)")
    with quiet():
        import executorch.backends.xnnpack.partition.xnnpack_partitioner  # noqa: F401
        import executorch.devtools.backend_debug  # noqa: F401
        import executorch.exir  # noqa: F401


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def _precision(target: Target) -> str:
    return str(target.get("precision") or "fp32").lower()


# -- export ------------------------------------------------------------------------------------
def _export(native: Any, example: Any, target: Target, precision: str, lowered: Lowered) -> Any:
    """torch.export of the wrapped model; None (and a blocker) when it refuses."""
    import torch

    from unframe.converters.frontends._torch.export import explain, math_attention
    from unframe.converters.frontends._torch.inputs import export_example
    from unframe.converters.frontends._torch.runner import callable_of, device_of

    fn = callable_of(native)
    device = device_of(fn)
    if device is not None and device.type != "cpu":
        lowered.blockers.append(Blocker("*", f"the model's weights are on {device}; ExecuTorch "
                                             "programs are built from a CPU model",
                                        hint="move the model to the CPU (model.cpu()) first"))
        return None
    # static: the samples as they are; else the inputs the frontend traces with (a batch of 1
    # grown to 2: torch.export would specialize a size of 1)
    args, kwargs = (example.args, example.kwargs) if target.get("static") else export_example(example)
    wrapper = wrap(fn, precision == "fp16")
    shapes = None if target.get("static") else dynamic_shapes(example, _requested_bounds(example, target))
    try:
        with quiet(), math_attention(), torch.no_grad(), timing.tool("torch.export"):
            return torch.export.export(wrapper, (tuple(args), dict(kwargs)), dynamic_shapes=shapes,
                                       strict=False)
    except Exception as exc:  # noqa: BLE001 - torch.export's refusal becomes the blocker
        lowered.blockers.append(Blocker("torch.export", explain(exc, "torch.export"),
                                        hint="ExecuTorch programs are made with torch.export: "
                                             "make the model exportable (static control flow), "
                                             "or pass --static"))
        return None


@functools.cache
def _call_class() -> type:
    """The wrapper module's class, made on first use (torch is imported then)."""
    import torch
    import torch.utils._pytree as pytree

    class Call(torch.nn.Module):
        """``forward(args, kwargs)`` -> ``inner(*args, **kwargs)``: the program's inputs are the
        leaves of ``(args, kwargs)`` in order. With ``half``: a float16 copy of ``inner``, float
        inputs cast to it and float outputs back to the model's own float type."""

        def __init__(self, inner: Any, half: bool) -> None:
            super().__init__()
            self.dtype = _float_dtype(inner)
            self.inner = copy.deepcopy(inner).half() if half else inner
            self.half = half

        def forward(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            if not self.half:
                return self.inner(*args, **kwargs)
            args, kwargs = pytree.tree_map(_to(torch.float16), (args, kwargs))
            return pytree.tree_map(_to(self.dtype), self.inner(*args, **kwargs))

    return Call


def wrap(inner: Any, half: bool) -> Any:
    return _call_class()(inner, half)


def _to(dtype: Any) -> Any:
    import torch

    def cast(x: Any) -> Any:
        return x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x

    return cast


def _float_dtype(module: Any) -> Any:
    import torch

    params = [*module.parameters(), *module.buffers()] if isinstance(module, torch.nn.Module) else []
    return next((p.dtype for p in params if p.is_floating_point()), torch.float32)


# -- dynamic dims ------------------------------------------------------------------------------
def _requested_bounds(example: Any, target: Target) -> dict[str, tuple[int, int]]:
    """(min, max) per dim name: from ``--shapes`` where it names the input, else 1 to
    ``max(2 * size, 8)`` over every input holding that dim (its samples and the traced ones)."""
    from unframe.converters.frontends._torch.inputs import export_example

    given = _given_shapes(target.get("shapes") or [], example)
    traced = dict(zip(example.names, _tensor_leaves(export_example(example)), strict=False))
    samples = dict(zip(example.names, example.tensor_leaves(), strict=False))
    bounds: dict[str, tuple[int, int]] = {}
    for name, axes in example.dynamic.items():
        for axis, dim in axes.items():
            if name in given:
                lo, hi = given[name][0][axis], given[name][1][axis]
            else:
                size = max(int(t.shape[axis]) for t in (samples.get(name), traced.get(name)) if t is not None)
                lo, hi = 1, max(2 * size, 8)
            old = bounds.get(dim)
            bounds[dim] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))
    return bounds


def _tensor_leaves(args_kwargs: tuple[Any, Any]) -> list[Any]:
    import torch
    import torch.utils._pytree as pytree

    return [x for x in pytree.tree_leaves(args_kwargs) if isinstance(x, torch.Tensor)]


def _given_shapes(shapes: Sequence[Any], example: Any) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
    """``--shapes name:min:opt:max`` entries by input: (min shape, max shape)."""
    out = {}
    for entry in shapes:
        parts = entry.split(":") if isinstance(entry, str) else list(entry)
        if len(parts) != 4:
            raise UsageError(f"bad --shapes entry {entry!r}", "write name:min:opt:max, e.g. "
                             "x:1x3x224x224:4x3x224x224:8x3x224x224")
        name, lo, _, hi = parts
        if name not in example.names:
            raise UsageError(f"--shapes names {name!r}, which the model has no input of",
                             f"the model's inputs are: {', '.join(example.names)}")
        low, high = _shape(lo, name), _shape(hi, name)
        if len(low) != len(high) or not all(1 <= a <= b for a, b in zip(low, high, strict=True)):
            raise UsageError(f"--shapes for {name!r}: need 1 <= min <= max in every dim",
                             f"got {low} and {high}")
        out[str(name)] = (low, high)
    return out


def _shape(text: Any, what: str) -> tuple[int, ...]:
    try:
        if isinstance(text, str):
            return tuple(int(p) for p in text.replace(",", "x").split("x") if p.strip())
        return tuple(int(d) for d in text)
    except (TypeError, ValueError):
        raise UsageError(f"bad shape {text!r} for {what}", "write shapes as 1x3x224x224") from None


def dynamic_shapes(example: Any, bounds: Mapping[str, tuple[int, int]]) -> dict[str, Any] | None:
    """torch.export's ``dynamic_shapes`` for the wrapper's ``(args, kwargs)``: ``Dim.AUTO`` with
    the bounds on each dynamic axis (AUTO: an axis the model fixes comes out static, which
    ``_static_notes`` says, rather than failing the export)."""
    import torch
    import torch.utils._pytree as pytree
    from torch.export import Dim

    if not example.dynamic:
        return None
    leaves, spec = example.leaves()
    names = iter(example.names)
    marks = []
    for leaf in leaves:
        axes = example.dynamic.get(next(names), {}) if isinstance(leaf, torch.Tensor) else {}
        marks.append({a: Dim.AUTO(min=bounds[d][0], max=bounds[d][1]) for a, d in axes.items()} or None)
    args_ds, kwargs_ds = pytree.tree_unflatten(marks, spec)
    return {"args": tuple(args_ds), "kwargs": dict(kwargs_ds)}


# -- the I/O record ----------------------------------------------------------------------------
def io_record(program: Any, example: Any, output_names: Sequence[str] | None,
              requested: Mapping[str, tuple[int, int]]) -> dict[str, Any]:
    """Names, dtypes and shapes (a dim name where the program kept an axis dynamic) of the
    inputs and outputs, the leaf layout of the method's inputs, and each dim's bounds."""
    import torch

    leaves, _ = example.leaves()
    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    placeholders = [nodes[u] for u in program.graph_signature.user_inputs if isinstance(u, str)]
    tensors = iter(zip(example.names, placeholders, strict=False))
    layout, inputs, bounds = [], [], {}
    for leaf in leaves:
        if not isinstance(leaf, torch.Tensor):
            layout.append({"value": _constant(leaf)})
            continue
        name, node = next(tensors)
        dims = example.dynamic.get(name, {})
        inputs.append(_tensor_entry(name, node.meta.get("val"), dims, program, requested, bounds))
        layout.append({"input": name})
    outputs = _outputs(program, output_names)
    return {"method": METHOD, "delegate": DELEGATE, "inputs": inputs, "outputs": outputs,
            "leaves": layout, "bounds": bounds}


def _constant(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise UnsupportedError(f"a non-tensor input of type {type(value).__name__} can't be recorded "
                           "for the program's runner", "pass tensors, numbers, strings or None")


def _tensor_entry(name: str, val: Any, dims: Mapping[int, str], program: Any,
                  requested: Mapping[str, tuple[int, int]], bounds: dict[str, list[int]]) -> dict[str, Any]:
    import torch

    shape: list[int | str] = []
    for axis, size in enumerate(val.shape):
        if isinstance(size, torch.SymInt) and axis in dims:
            dim = dims[axis]
            lo, hi = _range(program, size)
            # torch.export assumes a dynamic size is >= 2 while tracing; the program runs a
            # size of 1 as well (parity runs the samples, often a batch of 1), so the user's
            # lower bound stands
            lo = min(lo, requested.get(dim, (lo, hi))[0])
            old = bounds.get(dim)
            bounds[dim] = [lo, hi] if old is None else [min(old[0], lo), max(old[1], hi)]
            shape.append(dim)
        else:
            shape.append(int(size))
    return {"name": name, "dtype": str(val.dtype).removeprefix("torch."), "shape": shape}


def _range(program: Any, size: Any) -> tuple[int, int]:
    from executorch.exir.sym_util import eval_upper_bound

    constraint = program.range_constraints.get(size.node.expr)
    lower = int(constraint.lower) if constraint is not None and str(constraint.lower).isdigit() else 1
    return lower, int(eval_upper_bound(size))


def _outputs(program: Any, given: Sequence[str] | None) -> list[dict[str, Any]]:
    import torch
    import torch.utils._pytree as pytree

    from unframe.converters.frontends._torch.inputs import output_names

    node = next(n for n in program.graph.nodes if n.op == "output")
    vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in pytree.tree_leaves(node.args[0])]
    tensors = [v for v in vals if isinstance(v, torch.Tensor)]
    stand_ins = [torch.empty(0) if isinstance(v, torch.Tensor) else v for v in vals]
    structure = pytree.tree_unflatten(stand_ins, program.call_spec.out_spec)
    names = output_names(structure, list(given) if given else None)
    return [{"name": n, "dtype": str(v.dtype).removeprefix("torch."),
             "shape": [int(d) if not isinstance(d, torch.SymInt) else str(d) for d in v.shape]}
            for n, v in zip(names, tensors, strict=True)]


def _static_notes(example: Any, record: Mapping[str, Any], target: Target) -> list[str]:
    if target.get("static"):
        return ["static shapes: the program takes the samples' shapes only"] if example.dynamic else []
    kept = {t["name"]: t["shape"] for t in record["inputs"]}
    fixed = [f"{name}:{axis}" for name, axes in example.dynamic.items() for axis in axes
             if name in kept and not isinstance(kept[name][axis], str)]
    notes = []
    if fixed:
        notes.append(f"torch.export fixed axis {', '.join(fixed)} (the model specializes it): "
                     "the program takes the traced size there")
    if record["bounds"]:
        ranges = ", ".join(f"{d} {lo}..{hi}" for d, (lo, hi) in sorted(record["bounds"].items()))
        notes.append(f"dynamic dims bounded for ExecuTorch's memory plan: {ranges} (--shapes sets them)")
    return notes


# -- the dynamic program, tried ----------------------------------------------------------------
def _dynamic_failure(manager: Any, record: Mapping[str, Any], example: Any) -> str:
    """Why the program can't run the samples (or the traced inputs), "" when it runs both. Some
    portable kernels don't resize their outputs to a dynamic size (an ``arange`` planned as static
    at the traced batch, antialiased bilinear resizing): such a program is only good at the size
    it was traced at, so ``lower`` refuses it (the direct stage builds it static). Only whether
    it runs is asked here; its numbers are parity's."""
    from unframe.converters.backends.executorch.runner import failure_lines
    from unframe.converters.frontends._torch.inputs import export_example

    sets = [dict(zip(example.names, example.tensor_leaves(), strict=False)),
            dict(zip(example.names, _tensor_leaves(export_example(example)), strict=False))]
    with quiet() as log:
        method = runtime().load_program(bytes(manager.buffer)).load_method(METHOD)
        for tensors in sets:
            values = [tensors[leaf["input"]].detach().clone() if "input" in leaf else leaf.get("value")
                      for leaf in record["leaves"]]
            try:
                method.execute(values)
            except RuntimeError as exc:
                return failure_lines(log) or _first_line(exc)
    return ""


def _fixed_by_lowering(manager: Any, record: Mapping[str, Any]) -> str:
    """Which input axis the edge lowering fixed though the export kept it dynamic ("" when none
    was): the program then takes the traced size only (torchvision's ShuffleNetV2: ``chunk`` on
    the channels fixes the batch at 2, the memory plan holds 2). The samples and the traced
    inputs, both of that size, run; a batch inside the recorded bounds would be refused."""
    import torch
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    program = manager.exported_program()
    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    placeholders = [nodes[u] for u in program.graph_signature.user_inputs if isinstance(u, str) and u in nodes]
    for entry, node in zip(record["inputs"], placeholders, strict=False):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        for axis, dim in enumerate(entry["shape"]):
            if isinstance(dim, str) and is_concrete_int(val.shape[axis]):  # a SymInt of a number, or an int
                return (f"ExecuTorch's edge lowering fixed input {entry['name']!r} axis {axis} ({dim}) at "
                        f"{int(val.shape[axis])}")
    return ""


def _planned_bounds(manager: Any, record: dict[str, Any]) -> list[str]:
    """The recorded upper bounds lowered to what the memory plan holds, with a note, where it
    holds less: the plan can stop below the maximum the program's ranges give (a CNN on 16x16
    images with ``--shapes`` up to a batch of 16: the range says 2..16, the plan holds 15), and
    the runtime would refuse the last sizes with a bare error code where the runner names the
    bound."""
    from unframe.converters.backends.executorch.runner import meta_dict

    planned = meta_dict(runtime().load_program(bytes(manager.buffer)).metadata(METHOD))["inputs"]
    shapes = {t["name"]: t["shape"] for t in record["inputs"]}
    held: dict[str, int] = {}
    for position, leaf in enumerate(record["leaves"]):
        name = leaf.get("input")
        if name is None or position >= len(planned) or not planned[position]["tensor"]:
            continue
        for dim, size in zip(shapes[name], planned[position]["sizes"], strict=False):
            if isinstance(dim, str):
                held[dim] = min(held.get(dim, size), size)
    notes = []
    for dim, size in sorted(held.items()):
        lo, hi = record["bounds"][dim]
        if size < hi:
            record["bounds"][dim] = [lo, size]
            notes.append(f"ExecuTorch's memory plan holds {dim} up to {size}, not {hi}: the program takes "
                         f"{dim} {lo}..{size}")
    return notes


# -- edge and the program ----------------------------------------------------------------------
def _to_edge(program: Any, lowered: Lowered) -> Any:
    """The edge program with XNNPACK's partitions; ops outside the Core ATen opset that the
    runtime has kernels for are let through (one lowering more each), those it has none for
    become blockers. A partitioner that fails leaves the whole program to portable kernels."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    from unframe.converters.frontends._torch.export import math_attention

    excepted: list[Any] = []
    partitioner: list[Any] | None = [XnnpackPartitioner()]
    for _ in range(MAX_EXCEPTION_ROUNDS):
        config = EdgeCompileConfig(_core_aten_ops_exception_list=list(excepted))
        try:
            # the decompositions trace attention again: with the math kernel's layout, as the export
            with quiet(), math_attention(), torch.no_grad(), timing.tool("executorch to_edge_transform_and_lower"):
                edge = to_edge_transform_and_lower(program, partitioner=partitioner, compile_config=config)
        except Exception as exc:  # noqa: BLE001 - sorted below
            op = _non_core_op(exc)
            if op is not None and op not in excepted:
                excepted.append(op)  # lowered again past it, to find every such op at once
                continue
            if partitioner is not None and op is None:
                lowered.notes.append(f"XNNPACK's partitioner failed ({_first_line(exc)}): the "
                                     "whole program runs on portable kernels")
                partitioner = None
                continue
            lowered.blockers.append(Blocker("*", f"ExecuTorch's edge lowering failed: {_first_line(exc)}",
                                            hint=REFUSED_HINT))
            return None
        break
    else:
        lowered.blockers.append(Blocker("*", f"more than {MAX_EXCEPTION_ROUNDS} ops outside the Core "
                                             "ATen opset", hint=REFUSED_HINT))
        return None
    registered = set(runtime().operator_registry.operator_names)
    kernels = {op: _kernel_name(op) for op in excepted}
    for op, kernel in kernels.items():
        if kernel not in registered:
            lowered.blockers.append(Blocker(
                str(op), f"outside the Core ATen opset, not taken by XNNPACK, and ExecuTorch "
                f"{runtime_version()} has no kernel for it", hint=NO_KERNEL_HINT))
    if lowered.blockers:
        return None
    if excepted:
        lowered.notes.append("outside the Core ATen opset, run by their own kernels: "
                             + ", ".join(sorted(kernels.values())))
    return edge


def _kernel_name(op: Any) -> str:
    """The registry's name of the op's out variant (``aten::mean.out``); "" when it has none."""
    from executorch.exir.operator.convert import to_out_variant

    try:
        out, _ = to_out_variant(op)
    except Exception:  # noqa: BLE001 - no out variant: no kernel can run it
        return ""
    return f"{out._schema.name}.{out._overloadname}"


def _non_core_op(exc: BaseException) -> Any:
    """The op a SpecViolationError names as outside the Core ATen opset, resolved; else None."""
    import torch

    match = _NON_CORE.search(str(exc))
    if match is None:
        return None
    namespace, name, overload = (match.group(1).split(".") + ["default"])[:3]
    try:
        return getattr(getattr(getattr(torch.ops, namespace), name), overload)
    except AttributeError:
        return None


def _to_executorch(edge: Any, lowered: Lowered) -> Any:
    try:
        with quiet(), timing.tool("executorch to_executorch"):
            return edge.to_executorch()
    except Exception as exc:  # noqa: BLE001 - the emitter's refusal becomes the blocker
        lowered.blockers.append(Blocker("*", f"ExecuTorch's emitter failed: {_first_line(exc)}",
                                        hint=REFUSED_HINT))
        return None


def program_ops(manager: Any) -> list[str]:
    """The kernels the program calls outside its delegates, as the runtime's registry names them
    (``aten::mean.out``)."""
    ops = []
    for plan in manager.executorch_program.execution_plan:
        ops += [f"{o.name}.{o.overload}" if o.overload else o.name for o in plan.operators]
    return sorted(set(ops))


def missing_kernels(manager: Any) -> list[Blocker]:
    """One blocker per op of the program that this runtime has no kernel for (the load would
    fail on the first one)."""
    registered = set(runtime().operator_registry.operator_names)
    return [Blocker(op, f"ExecuTorch {runtime_version()} has no kernel for {op} (not taken by "
                        "XNNPACK, not among the portable kernels)",
                    hint=NO_KERNEL_HINT)
            for op in program_ops(manager) if op not in registered]


def delegation_summary(edge: Any) -> dict[str, Any]:
    """``get_delegation_info``'s counts: operator nodes XNNPACK took, and those left to portable
    kernels, by op."""
    from executorch.devtools.backend_debug import get_delegation_info

    info = get_delegation_info(edge.exported_program().graph_module)
    by_op = info.delegation_by_operator
    portable = {op: b.non_delegated for op, b in sorted(by_op.items()) if b.non_delegated and _is_op(op)}
    delegated = {op: b.delegated for op, b in sorted(by_op.items()) if b.delegated and _is_op(op)}
    return {"backend": DELEGATE, "subgraphs": int(info.num_delegated_subgraphs),
            "delegated_nodes": sum(delegated.values()), "portable_nodes": sum(portable.values()),
            "delegated_ops": delegated, "portable_ops": portable}


def _is_op(name: str) -> bool:
    return name not in _NOT_OPS and not name.startswith("sym_")


def delegation_note(d: Mapping[str, Any]) -> str:
    total = d["delegated_nodes"] + d["portable_nodes"]
    if not d["portable_ops"]:
        return f"XNNPACK runs all {total} operator nodes ({d['subgraphs']} delegated subgraphs)"
    ops = Counter(d["portable_ops"]).most_common()
    left = ", ".join(f"{op} x{n}" for op, n in ops[:NOTE_OPS])
    left += f" and {len(ops) - NOTE_OPS} more ops" if len(ops) > NOTE_OPS else ""
    return (f"XNNPACK runs {d['delegated_nodes']} of {total} operator nodes ({d['subgraphs']} "
            f"subgraphs); portable kernels run the rest: {left}")


def _first_line(exc: BaseException) -> str:
    """The exception's type and first non-empty line, with the next one where it ends in a
    colon (ExecuTorch's messages start with blank lines and run for pages)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    line = " ".join(lines[:2]) if lines and lines[0].endswith(":") else (lines[0] if lines else "")
    return f"{type(exc).__name__}: {line}"[:300] if line else type(exc).__name__
