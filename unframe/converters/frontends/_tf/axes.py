"""Which input axes the export makes dynamic: only those the source was seen to run with changed.

Candidates are the axes the model's signature leaves open (``None``: a Keras batch, a sequence
length, a tf.function's ``TensorSpec([None, 4])``) and, for inputs known only from the samples, the
leading axis. The axes a caller asked for (``--dynamic``, or ``--inputs`` with a named dim) are
dynamic whatever the probes say. Each candidate is probed on the source itself, TensorFlow
running a feed where the axis has another size:

* candidates of the same size in the first feed (a shared batch, ``x (B, T)`` and ``mask (B, T)``)
  change together; when that fails, each one alone;
* a probe adds to the axes already accepted, so the final probe feed (the second parity feed)
  runs with every dynamic axis changed at once;
* an axis whose probe fails stays at the first feed's size, for that input only (broadcast
  partners ``x (3, 4, 5) + y (5,)``: ``x[0]`` dynamic, ``y`` fixed). A probe unframe drew is never
  the user's fault: its failure only keeps the axis fixed.

Before::  every input's axis 0 dynamic; a second feed at another batch (exit 3 when it fails)
After::   dynamic = probed axes; the others as the samples (or the signature) have them
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from unframe.validate.runner import TensorSpec

Axis = tuple[str, int]
MAX_PROBES = 12


@dataclass
class AxesPlan:
    """The export's input specs and parity feeds for one choice of dynamic axes."""

    first: dict[str, np.ndarray]  # the first parity feed (the user's samples, or drawn)
    shapes: dict[str, tuple[int, ...] | None]  # input name -> the first feed's shape
    dtypes: dict[str, str]
    order: list[str]
    dynamic: list[Axis] = field(default_factory=list)
    probe: dict[str, np.ndarray] | None = None  # the feed with every dynamic axis changed
    notes: list[str] = field(default_factory=list)

    @property
    def inputs(self) -> list[TensorSpec]:
        out = []
        for name in self.order:
            shape = self.shapes[name]
            if shape is not None:
                shape = tuple(None if (name, a) in self.dynamic else d for a, d in enumerate(shape))
            out.append(TensorSpec(name, shape, self.dtypes[name]))
        return out

    @property
    def feeds(self) -> list[dict[str, np.ndarray]]:
        return [self.first] + ([self.probe] if self.dynamic and self.probe is not None else [])

    def fixed(self) -> AxesPlan:
        return AxesPlan(self.first, self.shapes, self.dtypes, self.order)

    def describe(self) -> str:
        return ", ".join(f"{n}[{a}]" for n, a in self.dynamic)


def other_size(size: int, drawn: bool) -> int:
    """The probe's size for an axis of ``size`` in the first feed."""
    if drawn:
        return {2: 3, 8: 6}.get(size, size + 1)
    return size - 1 if size > 1 else 2


def resized(value: np.ndarray, axis: int, size: int) -> np.ndarray:
    """The user's sample with ``axis`` cut or repeated to ``size`` (real data, another length)."""
    n = value.shape[axis]
    if size <= n:
        return np.take(value, range(size), axis=axis)
    reps = -(-size // max(n, 1))
    return np.take(np.concatenate([value] * reps, axis=axis), range(size), axis=axis)


def probe_feed(first: dict[str, np.ndarray], axes: Sequence[Axis], drawn: bool,
               redraw: Callable[[dict[str, tuple[int, ...]]], dict[str, np.ndarray]]
               ) -> dict[str, np.ndarray]:
    """``first`` with ``axes`` at their other size: drawn again when unframe drew ``first``, else
    the user's data cut or repeated."""
    shapes = {k: list(v.shape) for k, v in first.items()}
    for name, axis in axes:
        shapes[name][axis] = other_size(first[name].shape[axis], drawn)
    if drawn:  # new values; where an input only grows, the first feed is its leading block
        fresh = redraw({k: tuple(v) for k, v in shapes.items()})
        for name, value in first.items():
            grown = fresh.get(name)
            if grown is not None and grown.shape != value.shape and grown.ndim == value.ndim \
                    and all(g >= d for g, d in zip(grown.shape, value.shape, strict=True)):
                grown[tuple(slice(0, d) for d in value.shape)] = value
        return fresh
    out = dict(first)
    for name, axis in axes:
        out[name] = resized(out[name], axis, shapes[name][axis])
    return out


def leading_rows(first: dict[str, np.ndarray], probe: dict[str, np.ndarray], changed: Sequence[Axis]) -> int:
    """The first feed's batch size when ``probe`` is the first feed with more rows along axis 0
    only (``changed`` all axis 0, of one size, the first feed's values its leading rows), else 0:
    TensorFlow's outputs on the first feed are then the leading rows of its outputs on the probe,
    unless the model's rows interact (checked: ``derived_outputs``)."""
    if not changed or any(axis != 0 for _, axis in changed):
        return 0
    sizes = {first[name].shape[0] for name, _ in changed if first[name].ndim}
    if len(sizes) != 1:
        return 0
    rows = sizes.pop()
    for name, value in first.items():
        other = probe.get(name)
        if other is None or other.shape[1:] != value.shape[1:] or other.dtype != value.dtype:
            return 0
        if (name, 0) in changed:
            if other.shape[0] <= rows or not np.array_equal(other[:rows], value):
                return 0
        elif other is not value and not np.array_equal(other, value):
            return 0
    return rows


def derived_outputs(values: Sequence[Any], rows: int, size: int) -> list[np.ndarray] | None:
    """The leading ``rows`` of each output of a run at batch ``size``; None when an output has no
    batch-sized leading axis to cut (nothing is derived then)."""
    out = []
    for value in values:
        array = np.asarray(value)
        if array.ndim == 0 or array.shape[0] != size:
            return None
        out.append(array[:rows])
    return out


def groups(first: dict[str, np.ndarray], candidates: Sequence[Axis]) -> list[list[Axis]]:
    """Candidates grouped by their size in the first feed, in order of first appearance."""
    out: dict[int, list[Axis]] = {}
    for name, axis in candidates:
        out.setdefault(int(first[name].shape[axis]), []).append((name, axis))
    return list(out.values())


def choose(plan: AxesPlan, candidates: Sequence[Axis], forced: Sequence[Axis], drawn: bool,
           runs: Callable[[dict[str, np.ndarray]], str],
           redraw: Callable[[dict[str, tuple[int, ...]]], dict[str, np.ndarray]],
           make_probe: Callable[..., dict[str, np.ndarray]] = probe_feed) -> AxesPlan:
    """Fill ``plan.dynamic`` and ``plan.probe`` by probing. ``runs(feed)`` is "" when the source
    runs on ``feed``, else TensorFlow's reason; ``make_probe`` is ``probe_feed`` or a cache of it
    (the same axes, the same feed object)."""
    accepted: list[Axis] = list(dict.fromkeys(forced))
    refused: list[tuple[Axis, str]] = []
    probes = 0
    todo = [[a for a in g if a not in accepted] for g in groups(plan.first, candidates)]
    for group in (g for g in todo if g):
        tries = [group] if len(group) == 1 else [group] + [[a] for a in group]
        for trial in tries:
            if probes >= MAX_PROBES:
                refused.extend((a, "not probed (probe limit)") for a in trial if a not in accepted)
                continue
            if any(a in accepted for a in trial):
                continue
            probes += 1
            try:
                feed = make_probe(plan.first, accepted + trial, drawn, redraw)
            except (ValueError, IndexError) as exc:  # a sample that can't be cut to that size
                feed, problem = None, f"no probe feed: {exc}"
            else:
                problem = runs(feed)
            if not problem:
                accepted.extend(trial)
                plan.probe = feed
                if trial is group:
                    break
            elif len(trial) == 1 or len(group) == 1:
                refused.append((trial[0], problem))
    if accepted and plan.probe is None:  # only forced axes: one probe feed for them
        plan.probe = make_probe(plan.first, accepted, drawn, redraw)
    plan.dynamic = accepted
    plan.notes.extend(_notes(plan, accepted, forced, refused, drawn))
    return plan


def _notes(plan: AxesPlan, accepted: Sequence[Axis], forced: Sequence[Axis],
           refused: Sequence[tuple[Axis, str]], drawn: bool) -> list[str]:
    notes = []
    probed = [a for a in accepted if a not in forced]
    if probed:
        sizes = ", ".join(f"{n}[{a}] ({plan.first[n].shape[a]} and "
                          f"{other_size(plan.first[n].shape[a], drawn)})" for n, a in probed)
        notes.append(f"dynamic axes: {sizes}: TensorFlow ran the model with each size")
    if forced:
        notes.append("dynamic axes as asked: " + ", ".join(f"{n}[{a}]" for n, a in forced))
    if refused:
        kept = "; ".join(f"{n}[{a}] = {plan.first[n].shape[a]} ({why[:160]})" for (n, a), why in refused)
        notes.append(f"kept fixed as the samples have them: {kept}")
    return notes


def failure(exc: BaseException) -> str:
    """TensorFlow's telling line for a probe that failed."""
    from unframe.converters.frontends._tf.common import telling_line

    return telling_line(exc)


def first_shapes(first: dict[str, np.ndarray], inputs: Sequence[TensorSpec]) -> dict[str, Any]:
    return {t.name: tuple(int(d) for d in first[t.name].shape) if t.name in first else t.shape
            for t in inputs}
