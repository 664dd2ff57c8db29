"""Dynamic only where proven: the batch axis unframe guesses is kept only where the model runs
with it changed and the export takes it.

``finalize`` (``inputs.py``) proposes axis 0 of every input whose axis 0 has the first input's
size. That is a guess: a 1-D input, a broadcast partner, an RNN state with its batch on axis 1,
a constant of the model's own sized like the batch all share that size by chance. Here:

1. ``prove``: the model runs on a *probe*, the samples with those axes re-drawn together at
   another size (``inputs.probe_size``). It runs: the axes are candidates for the export. It
   fails: unframe's guesses are dropped (the user's own axes stay) and a note says why; the
   failure is never the user's (no exit 3: the samples ran). With several inputs, the first
   input's axis alone is tried next.
2. The exporter is asked for the candidate axes; where it refuses them it is asked again static
   (``torch.py``), and ``taken`` checks the graph: every candidate input dim symbolic, and no
   output dim fixed to a size the probe's output does not have (torch.export can keep an input
   dim symbolic while a lowering bakes the example's size into the graph).
3. The probe's feed and eager outputs become parity's second feed and its reference, as the
   samples' are its first: no forward is paid twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.converters.frontends._torch import inputs as inp
from unframe.converters.frontends._torch.runner import flat_outputs, try_model


@dataclass
class Probe:
    """The model's run at another batch size: parity's second feed and its reference."""

    size: int
    names: list[str]  # the inputs whose axis 0 was changed
    feed: dict[str, np.ndarray]  # as fed, copied before the run
    outputs: list[np.ndarray]
    tensors: dict[str, Any]  # by input name, as the model ran on them (an export example)


def candidates(inputs: inp.ModelInputs) -> list[str]:
    """Inputs whose axis 0 is asked to be dynamic, guessed or the user's, in input order."""
    if inputs.batch is None:
        return []
    return [n for n in inputs.names if 0 in inputs.dynamic.get(n, {})]


def prove(fn: Any, inputs: inp.ModelInputs, what: str) -> tuple[Probe | None, list[str]]:
    """Run the model at another batch size; keep the axes it takes (see the module's doc)."""
    names = candidates(inputs)
    if not names:
        return None, []
    assert inputs.batch is not None
    size = inp.probe_size(inputs.batch)
    tries = [names] + ([names[:1]] if len(names) > 1 else [])
    failure = ""
    for tried in tries:
        tensors = inp.probe_tensors(inputs, set(tried))
        feed = {n: inp.numpy_of(t).copy() for n, t in tensors.items()}
        out, error = try_model(fn, *inputs.rebuild(tensors))
        if error is None:
            left = [n for n in names if n not in tried]
            drop(inputs, left)
            notes = [] if not left else [
                f"axis 0 of {_list(left)} stays as the samples have it: {what} did not run with "
                f"it at {size} together with {_list(tried)} ({failure})"]
            return Probe(size, tried, feed, [inp.numpy_of(t).copy() for t in flat_outputs(out)],
                         tensors), notes
        failure = failure or _one_line(error)
    drop(inputs, names)
    return None, [f"the batch axis stays as the samples have it: {what} did not run with batch "
                  f"{size}: {failure}"]


def drop(inputs: inp.ModelInputs, names: list[str]) -> list[str]:
    """Unframe's guessed axis 0 of ``names`` fixed again; the names whose axis 0 stays dynamic
    (the user's own) are returned."""
    kept = []
    for name in names:
        if name in inputs.guessed:
            axes = inputs.dynamic.get(name, {})
            axes.pop(0, None)
            if not axes:
                inputs.dynamic.pop(name, None)
            inputs.guessed.discard(name)
        else:
            kept.append(name)
    if not any(0 in axes for axes in inputs.dynamic.values()):
        inputs.batch = None
    return kept


def use_as_example(inputs: inp.ModelInputs, probe: Probe | None) -> None:
    """Samples with a batch of 1 are traced on the probe (torch.export specializes size-1 dims;
    the probe is a size the model was seen to take, unlike a batch unframe would make up)."""
    if probe is not None and inputs.batch == 1:
        inputs.example = inputs.rebuild(probe.tensors)


def taken(model: ir.Model, inputs: inp.ModelInputs, probe: Probe) -> str:
    """"" when the graph takes the probe's batch: every probed input's axis 0 symbolic, and no
    output dim fixed to a size the probe's output lacks; else why not. Graph inputs are matched
    to ``inputs.names`` by position (an ExportedProgram names its own)."""
    graph_inputs = [v for v in model.graph.inputs if v.name not in model.graph.initializers]
    for value, name in zip(graph_inputs, inputs.names, strict=False):
        if name not in probe.names:
            continue
        if value.shape is None or len(value.shape) == 0 or isinstance(value.shape[0], int):
            return f"the export fixed axis 0 of {name}"
    for value, ran in zip(model.graph.outputs, probe.outputs, strict=False):
        if value.shape is None or len(value.shape) != ran.ndim:
            continue
        for axis, (dim, got) in enumerate(zip(value.shape, ran.shape, strict=True)):
            if isinstance(dim, int) and dim != got:
                return (f"the exported graph fixes axis {axis} of {value.name} at {dim} where "
                        f"batch {probe.size} gives {got}")
    return ""


def dynamic_note(inputs: inp.ModelInputs, probe: Probe) -> str:
    names = [n for n in probe.names if 0 in inputs.dynamic.get(n, {})]
    return (f"dynamic batch (axis 0 of {_list(names)}): the model ran at batch {probe.size} as at "
            f"{inputs.batch} and the export takes it; parity runs both")


def static_note(inputs: inp.ModelInputs, why: str) -> str:
    return f"the batch axis stays as the samples have it: {why}; parity runs one batch size"


def _list(names: list[str]) -> str:
    shown = ", ".join(names[:4])
    return shown + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {line}"[:240] if line else type(exc).__name__
