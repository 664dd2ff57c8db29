"""Optimization profiles: a (min, opt, max) shape for every input with a dynamic dim.

Sources, first match wins per input:

1. the ``shapes`` option, ``[(input, min, opt, max), ...]`` (shapes as int sequences or
   "1x3x224x224" strings);
2. with ``static``: the sample shape for min, opt and max;
3. the sample shapes the pipeline passes (``sample_shapes = {input: shape}``): dynamic dims get
   min 1, opt the sample's size, max ``max(2 * sample, 8)``, so that the parity feeds (which may
   use another batch size) fit.

A dynamic input with none of these is a usage error naming the input and ``--shapes``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir

from unframe.errors import UsageError

Shape = tuple[int, ...]


@dataclass(frozen=True)
class ProfileShape:
    min: Shape
    opt: Shape
    max: Shape

    def to_dict(self) -> dict[str, list[int]]:
        return {"min": list(self.min), "opt": list(self.opt), "max": list(self.max)}

    def contains(self, shape: Sequence[int]) -> bool:
        return len(shape) == len(self.min) and all(
            lo <= int(s) <= hi for lo, s, hi in zip(self.min, shape, self.max, strict=False))


def model_inputs(model: ir.Model) -> list[ir.Value]:
    """Graph inputs that are not initializers (old models list weights as inputs too)."""
    return [v for v in model.graph.inputs if v.const_value is None]


def parse_shape(text: Any, what: str) -> Shape:
    if isinstance(text, str):
        parts = [p for p in text.replace(",", "x").split("x") if p.strip()]
        try:
            return tuple(int(p) for p in parts)
        except ValueError:
            raise UsageError(f"bad shape {text!r} for {what}",
                             "write shapes as 1x3x224x224") from None
    return tuple(int(d) for d in text)


def make_profile(model: ir.Model, shapes: Iterable[Any] | None = None,
                 sample_shapes: Mapping[str, Sequence[int]] | None = None,
                 static: bool = False) -> dict[str, ProfileShape]:
    """One profile: input name -> ProfileShape, for the inputs with dynamic dims."""
    explicit = _explicit(shapes or [])
    profile: dict[str, ProfileShape] = {}
    names = {v.name for v in model_inputs(model)}
    unknown = sorted(set(explicit) - names)
    if unknown:
        raise UsageError(f"--shapes names {', '.join(unknown)}, which the model has no input of",
                         f"the model's inputs are: {', '.join(sorted(n for n in names if n))}")
    for value in model_inputs(model):
        dims = _dims(value)
        if dims is not None and all(isinstance(d, int) for d in dims) and value.name not in explicit:
            continue
        profile[value.name] = _one(value, dims, explicit.get(value.name),
                                   (sample_shapes or {}).get(value.name), static)
    return profile


def _explicit(shapes: Iterable[Any]) -> dict[str, ProfileShape]:
    out: dict[str, ProfileShape] = {}
    for entry in shapes:
        if isinstance(entry, str):
            entry = entry.split(":")
        if len(entry) != 4:
            raise UsageError(f"bad --shapes entry {entry!r}",
                             "write name:min:opt:max, e.g. x:1x3x224x224:8x3x224x224:32x3x224x224")
        name, lo, opt, hi = entry
        out[str(name)] = ProfileShape(*(parse_shape(s, str(name)) for s in (lo, opt, hi)))
    return out


def _dims(value: ir.Value) -> list[int | str | None] | None:
    if value.shape is None:
        return None
    return [d if isinstance(d, int) else (d.value if hasattr(d, "value") else None)
            for d in value.shape]


def _one(value: ir.Value, dims: list[int | str | None] | None, given: ProfileShape | None,
         sample: Sequence[int] | None, static: bool) -> ProfileShape:
    if given is not None:
        _validate(value.name or "", dims, given)
        return given
    if sample is None:
        named = ", ".join(str(d) for d in dims) if dims is not None else "unknown rank"
        raise UsageError(
            f"input {value.name!r} has dynamic dims ({named}) and no shape range for TensorRT",
            f"pass --shapes {value.name}:MIN:OPT:MAX (e.g. 1x3x224x224), or sample inputs")
    sample = tuple(int(s) for s in sample)
    if static:
        return ProfileShape(sample, sample, sample)
    dynamic = [not isinstance(d, int) for d in (dims or [None] * len(sample))]
    lo = tuple(1 if dyn else s for dyn, s in zip(dynamic, sample, strict=False))
    hi = tuple(max(2 * s, 8) if dyn else s for dyn, s in zip(dynamic, sample, strict=False))
    profile = ProfileShape(lo, sample, hi)
    _validate(value.name or "", dims, profile)
    return profile


def _validate(name: str, dims: list[int | str | None] | None, p: ProfileShape) -> None:
    if not len(p.min) == len(p.opt) == len(p.max):
        raise UsageError(f"--shapes for {name!r}: min, opt and max have different ranks",
                         "give the same number of dims to all three")
    if dims is not None and len(dims) != len(p.min):
        raise UsageError(f"--shapes for {name!r} has {len(p.min)} dims, the input has {len(dims)}",
                         "give one size per dim")
    if not all(lo <= o <= hi for lo, o, hi in zip(p.min, p.opt, p.max, strict=False)):
        raise UsageError(f"--shapes for {name!r}: need min <= opt <= max in every dim",
                         f"got {p.min}, {p.opt}, {p.max}")
    for axis, d in enumerate(dims or []):
        if isinstance(d, int) and not (p.min[axis] == p.opt[axis] == p.max[axis] == d):
            raise UsageError(f"--shapes for {name!r}: dim {axis} is fixed at {d} in the model",
                             f"use {d} for min, opt and max of that dim")
