"""Bisection for runtimes that can't show every intermediate without becoming another program.

Marking a TensorRT tensor as an engine output stops the builder fusing across it, so an engine
with every value marked is not the engine that ships. Instead the locator marks *one* value at a
time, and only at layer boundaries (values a builder would not fuse through anyway), and bisects
over them in topological order: the first boundary whose value disagrees with the reference is
found in ``ceil(log2 N)`` builds::

    boundaries:  b0  b1  b2  b3  b4  b5  b6  b7 (= the failing output)
    build 1: mark b3 -> agrees      build 2: mark b5 -> disagrees      build 3: mark b4 -> agrees
    => the divergence lies between b4 and b5: the nodes computing b5 from b4

A probe is ``names -> values``: it builds the candidate with those values marked as outputs, runs
it on the locator's feed and returns them by ONNX name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from unframe.locate.search import ValueDiff, diff

if TYPE_CHECKING:
    import onnx_ir as ir

Probe = Callable[[list[str]], dict[str, np.ndarray]]

# Ops a builder fuses into the op before them (a Conv's bias, BN and activation; a MatMul's Add):
# the value feeding one of them alone is inside a layer, not at its boundary.
FUSED_TAILS = frozenset({
    "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid", "HardSwish", "Elu", "Selu",
    "Softplus", "Gelu", "BatchNormalization", "Add", "Mul", "Sub", "Div", "Cast", "Identity",
    "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Flatten",
})


@dataclass
class Bisection:
    boundaries: list[str]
    builds: int = 0
    last_good: str | None = None  # the latest boundary that agrees (None: the graph inputs)
    first_bad: str | None = None
    trail: list[ValueDiff] = field(default_factory=list)  # each probe's verdict, in probe order

    @property
    def budget(self) -> int:
        """The most builds the search may take: ceil(log2 N) + 3."""
        return math.ceil(math.log2(max(len(self.boundaries), 1))) + 3


def layer_boundaries(model: ir.Model, outputs: Sequence[str]) -> list[str]:
    """Values at layer boundaries among the ancestors of ``outputs``, in topological order, ending
    with the outputs: a node's output is inside a layer when its only consumer is a fusable tail."""
    from unframe.locate.search import Walk

    walk = Walk.of(model)
    keep = walk.ancestors(outputs)
    consumers: dict[str, list[ir.Node]] = {}
    for node in walk.nodes:
        for value in node.inputs:
            if value is not None and value.name:
                consumers.setdefault(value.name, []).append(node)
    names: list[str] = []
    for i, node in enumerate(walk.nodes):
        if i not in keep or node.op_type == "Constant":
            continue
        for value in node.outputs:
            users = consumers.get(value.name, [])
            inside = len(users) == 1 and users[0].op_type in FUSED_TAILS
            if value.name and (value.name in outputs or not inside):
                names.append(value.name)
    tail = [n for n in outputs if n not in names]
    return names + tail


def bisect_divergence(boundaries: Sequence[str], probe: Probe, reference: Mapping[str, np.ndarray],
                      tolerance: float) -> Bisection:
    """Bisect ``boundaries`` (topological order; the last one is known to disagree: the stage
    failed on it) for the first boundary whose value disagrees."""
    result = Bisection(list(boundaries))
    lo, hi = -1, len(boundaries) - 1  # lo agrees (-1: the inputs), hi disagrees
    while hi - lo > 1:
        mid = (lo + hi) // 2
        name = boundaries[mid]
        got = probe([name])
        result.builds += 1
        verdict = diff(name, reference[name], got[name], tolerance) if name in got else \
            ValueDiff(name, False, math.inf, math.inf, 0.0, reason="the probe did not return it")
        result.trail.append(verdict)
        if verdict.ok:
            lo = mid
        else:
            hi = mid
    result.last_good = boundaries[lo] if lo >= 0 else None
    result.first_bad = boundaries[hi] if boundaries else None
    return result
