"""Input shapes of the IR as OpenVINO partial shapes.

OpenVINO's ONNX frontend reads a symbolic ONNX dim (``batch``) as a fully dynamic dimension
(``?``) and drops its name. From the ONNX graph's own shapes and the target options:

* ``static``: every symbolic dim at the sample's size (``sample_shapes``);
* ``dims``: ``[(name, min, max)]``, a dim name or ``input:axis``, as a bounded dimension
  (``1..8``; max -1 leaves it unbounded above);
* otherwise the dim stays ``?``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import onnx_ir as ir

from unframe.errors import Blocker, UsageError

Dim = int | tuple[int, int] | None  # fixed, (min, max) bounds, or dynamic


def plan_shapes(model: ir.Model, options: Mapping[str, Any]) -> dict[str, list[Dim]]:
    """The partial shape of each graph input the options decide (inputs of unknown rank are
    left to OpenVINO)."""
    static = bool(options.get("static"))
    samples: Mapping[str, Sequence[int]] = options.get("sample_shapes") or {}
    bounds = parse_dims(options.get("dims") or ())
    inits = set(model.graph.initializers)
    out: dict[str, list[Dim]] = {}
    for v in model.graph.inputs:
        if v.name in inits or v.shape is None:
            continue
        sample = samples.get(v.name)
        dims: list[Dim] = []
        for axis, d in enumerate(v.shape):
            if isinstance(d, int):
                dims.append(d)
            elif static and sample is not None and axis < len(sample):
                dims.append(int(sample[axis]))
            else:
                name = str(d.value) if getattr(d, "value", None) else ""
                dims.append(bounds.get(name) or bounds.get(f"{v.name}:{axis}"))
        out[v.name] = dims
    return out


def parse_dims(dims: Iterable[Any]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for entry in dims:
        name, lo, hi = entry
        lo_i, hi_i = int(lo), int(hi)
        if lo_i < 0 or (hi_i != -1 and hi_i < lo_i):
            raise UsageError(f"bad --dim bounds for {name!r}: {lo}..{hi}",
                             "use --dim name:min:max with 0 <= min <= max (max -1: unbounded)")
        out[str(name)] = (lo_i, hi_i)
    return out


def dim_blockers(model: ir.Model, options: Mapping[str, Any]) -> list[Blocker]:
    """``--dim`` names that no symbolic dim of the inputs carries, and ``--static`` without a
    sample shape for an input that has a symbolic dim."""
    out = []
    named: set[str] = set()
    for v in model.graph.inputs:
        for axis, d in enumerate(v.shape or ()):
            if not isinstance(d, int):
                named.update({f"{v.name}:{axis}", *([str(d.value)] if getattr(d, "value", None) else [])})
    for name in parse_dims(options.get("dims") or ()):
        if name not in named:
            out.append(Blocker("input", f"--dim {name!r} names no dynamic dim of the model's inputs",
                               hint=f"dynamic dims: {', '.join(sorted(named)) or 'none'}"))
    samples = options.get("sample_shapes") or {}
    if options.get("static"):
        for v in model.graph.inputs:
            if v.shape is not None and any(not isinstance(d, int) for d in v.shape) and v.name not in samples:
                out.append(Blocker("input", f"--static needs a sample shape for input {v.name!r}",
                                   v.name, hint="pass sample inputs or --inputs with a fixed shape"))
    return out


def partial_shape(dims: Sequence[Dim]) -> Any:
    from unframe.converters.backends.openvino.runtime import import_openvino

    ov = import_openvino()
    return ov.PartialShape([ov.Dimension() if d is None else ov.Dimension(*d) if isinstance(d, tuple)
                            else ov.Dimension(d) for d in dims])


def apply_shapes(converted: Any, shapes: Mapping[str, Sequence[Dim]]) -> list[str]:
    """Reshape the converted model's inputs (found by their ONNX names) to ``shapes`` where they
    differ from what the frontend made; notes for the user."""
    wanted = {}
    for port in converted.inputs:
        names = port.get_names()
        name = next((n for n in shapes if n in names), None)
        if name is None:
            continue
        shape = partial_shape(shapes[name])
        if shape != port.get_partial_shape():
            wanted[port] = shape
    if wanted:
        from unframe.converters.backends.openvino.runtime import first_line
        from unframe.errors import UnsupportedError

        try:
            converted.reshape(wanted)
        except Exception as exc:  # a shape the graph's own shape inference rejects
            shown = ", ".join(f"{p.get_any_name()}{s}" for p, s in wanted.items())
            raise UnsupportedError(f"OpenVINO can't give the inputs the shapes {shown}",
                                   "check --dim/--static against the model's input shapes",
                                   blockers=[Blocker("input", f"reshape to {shown} failed: {first_line(exc)}")]
                                   ) from exc
    dynamic = [f"{p.get_any_name()}{p.get_partial_shape()}" for p in converted.inputs
               if p.get_partial_shape().is_dynamic]
    return [f"dynamic input dims as OpenVINO partial shapes: {', '.join(dynamic)}"] if dynamic else []


__all__ = ["apply_shapes", "dim_blockers", "parse_dims", "partial_shape", "plan_shapes"]
