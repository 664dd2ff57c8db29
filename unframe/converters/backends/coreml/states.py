"""``--stateful``: a decoder's KV cache held in Core ML states (iOS18), not passed in and out.

A graph exported with ``--kv-cache`` takes ``past_key_values.{i}.key|value`` [batch, heads,
past, dim] and returns ``present.{i}.key|value`` [batch, heads, past + new, dim]. Passed through
a Core ML model's inputs and outputs, the whole cache is copied in and out at every token. An
iOS18 ML Program can keep it inside the model instead, as *states* the runtime holds between
predictions (``MLState``); the app feeds only the new tokens and the attention mask.

The translation keeps the graph as it is and changes its edges::

    state  past_key_values_{i}_key: fp16 [1, heads, max_context, dim]   (one per past input)
    P      = len(attention_mask) - len(input_ids)                       (tokens already cached)
    past   = read_state(state)[:, :, :P, :]                             (what the graph reads)
    ...    the graph, unchanged ...
    state  = slice_update(read_state(state), present[:, :, P:, :], begin=[0, 0, P, 0])

so the program's outputs are the graph's outputs less the ``present`` ones. States are fixed in
shape: the batch is 1 and the cache holds ``max_context`` tokens (``--max-context``, default
:data:`DEFAULT_MAX_CONTEXT`); they are fp16, the only state type Core ML runs, whatever the
compute precision.

``StatefulIO`` lets the parity stage check such a package with the graph's own interface: it
writes a fed cache into the states (unless the feed is the cache this package returned on its
previous call, which then stays in the states, as on a device), runs the program, and reads the
present outputs back out of the states, so a wrong write shows up as a wrong present tensor and
in the next step's tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx_ir as ir

from unframe.errors import Blocker, InputError

if TYPE_CHECKING:
    from coremltools.converters.mil.mil import Var

PAST_PREFIX, PRESENT_PREFIX = "past_key_values.", "present."
DEFAULT_MAX_CONTEXT = 2048
STATE_IOS = 18


@dataclass(frozen=True)
class StatePlan:
    """One cache tensor kept as a state."""

    past: str  # the ONNX input it replaces
    present: str  # the ONNX output written back into it
    mil_name: str
    shape: tuple[int, int, int, int]  # [1, heads, max_context, dim]


def max_context(options: Mapping[str, Any]) -> int:
    value = options.get("max_context") or DEFAULT_MAX_CONTEXT
    return int(value)


def plan_states(model: ir.Model, ios: int, options: Mapping[str, Any]
                ) -> tuple[list[tuple[str, str, tuple[int, int, int, int]]], list[Blocker]]:
    """(past, present, state shape) per cache tensor, or the blockers that stop a stateful
    translation (checked before anything is built, so ``check`` says the same)."""
    graph = model.graph
    inputs = {v.name: v for v in graph.inputs if v.name not in graph.initializers}
    outputs = {v.name for v in graph.outputs}
    blockers: list[Blocker] = []
    if ios < STATE_IOS:
        blockers.append(Blocker("states", f"a stateful KV cache needs iOS{STATE_IOS}/macOS15 "
                                f"(Core ML states); the target is iOS{ios}",
                                hint=f"pass --target iOS{STATE_IOS}, or drop --stateful"))
    size = max_context(options)
    if size < 1:
        blockers.append(Blocker("states", f"--max-context {size} holds no token",
                                hint="give the longest prompt plus generated tokens, e.g. 2048"))
    past = [n for n in inputs if n.startswith(PAST_PREFIX)]
    if not past:
        blockers.append(Blocker("states", "the graph has no past_key_values.* inputs: there is "
                                "no KV cache to keep in states",
                                hint="export the decoder with --kv-cache, or drop --stateful"))
    for needed in ("input_ids", "attention_mask"):
        if past and needed not in inputs:
            blockers.append(Blocker("states", f"the graph has no {needed!r} input: the cached "
                                    "length is read from attention_mask minus input_ids",
                                    hint="export the decoder with --kv-cache"))
    plans = []
    for name in past:
        present = PRESENT_PREFIX + name[len(PAST_PREFIX):]
        shape = inputs[name].shape
        if present not in outputs:
            blockers.append(Blocker("states", f"{name!r} has no {present!r} output to write the "
                                    "state back from", hint="export the decoder with --kv-cache"))
            continue
        if shape is None or len(shape) != 4 or not all(isinstance(shape[a], int) for a in (1, 3)):
            blockers.append(Blocker("states", f"{name!r} is not [batch, heads, past, dim] with "
                                    f"fixed heads and dim (shape {shape})",
                                    hint="export the decoder with --kv-cache"))
            continue
        plans.append((name, present, (1, int(shape[1]), size, int(shape[3]))))
    return plans, blockers


def fix_batch(model: ir.Model, plans: list[tuple[str, str, tuple[int, int, int, int]]]) -> int:
    """Pin the cache's batch dim to 1 wherever an input has it (states have fixed shapes)."""
    graph = model.graph
    by_name = {v.name: v for v in graph.inputs}
    batch_dims = {str(by_name[p].shape[0]) for p, _, _ in plans
                  if by_name[p].shape is not None and not isinstance(by_name[p].shape[0], int)}
    pinned = 0
    for v in graph.inputs:
        if v.shape is None or v.name in graph.initializers or not len(v.shape):
            continue
        first = v.shape[0]
        if not isinstance(first, int) and str(first) in batch_dims:
            v.shape = ir.Shape([1, *list(v.shape)[1:]])
            pinned += 1
    return pinned


class StateEdges:
    """Builds the MIL around the translated graph: state reads before, writes after."""

    def __init__(self, states: list[StatePlan], function_inputs: Mapping[str, Var]) -> None:
        self.states = states
        self.vars = {s.past: function_inputs[s.mil_name] for s in states}
        self.full: dict[str, Var] = {}
        self.cached: Var | None = None  # P, as a [1] int32

    def read(self, env: dict[str, Var], dtypes: Mapping[str, ir.DataType]) -> None:
        """``env[past]`` = the first P rows of each state, in the graph's dtype."""
        from coremltools.converters.mil import Builder as mb

        from unframe.converters.backends.coreml.context import MIL_DTYPES

        ids, mask = env["input_ids"], env["attention_mask"]
        total = mb.slice_by_index(x=mb.shape(x=mask), begin=[1], end=[2])
        new = mb.slice_by_index(x=mb.shape(x=ids), begin=[1], end=[2])
        self.cached = mb.sub(x=total, y=new, name="kv_cached_length")
        for s in self.states:
            full = mb.read_state(input=self.vars[s.past], name=f"{s.mil_name}_read")
            self.full[s.past] = full
            end = mb.concat(values=[np.array(s.shape[:2], np.int32), self.cached,
                                    np.array(s.shape[3:], np.int32)], axis=0)
            past = mb.slice_by_index(x=full, begin=np.zeros(4, np.int32), end=end)
            dtype = MIL_DTYPES.get(dtypes.get(s.past, ir.DataType.FLOAT), "fp32")
            env[s.past] = past if dtype == "fp16" else mb.cast(x=past, dtype=dtype,
                                                                name=f"{s.mil_name}_past")

    def write(self, env: dict[str, Var]) -> None:
        """Each present's new rows (from P on) into its state."""
        from coremltools.converters.mil import Builder as mb

        assert self.cached is not None
        for s in self.states:
            present = env[s.present]
            length = mb.slice_by_index(x=mb.shape(x=present), begin=[2], end=[3])
            begin = mb.concat(values=[np.zeros(2, np.int32), self.cached, np.zeros(1, np.int32)], axis=0)
            end = mb.concat(values=[np.array(s.shape[:2], np.int32), length,
                                    np.array(s.shape[3:], np.int32)], axis=0)
            rows = mb.slice_by_index(x=present, begin=begin, end=end)
            if rows.dtype != self.full[s.past].dtype:
                rows = mb.cast(x=rows, dtype="fp16")
            updated = mb.slice_update(x=self.full[s.past], update=rows, begin=begin, end=end)
            mb.coreml_update_state(state=self.vars[s.past], value=updated,
                                   name=f"{s.mil_name}_write")


# -- the parity side: the graph's interface on a stateful package ---------------------------------

class StatefulIO:
    """Feeds and reads a stateful package as the stateless graph it came from (module docstring).

    ``record``: the io record's ``states`` entries ({"past", "present", "mil", "shape"})."""

    def __init__(self, record: list[dict[str, Any]]) -> None:
        self.record = record
        self.returned: dict[str, np.ndarray] = {}  # present arrays handed out on the last call

    def before(self, feeds: Mapping[str, np.ndarray], states: dict[str, np.ndarray]) -> int:
        """Load the fed cache into the states unless it is the one they hold; returns P."""
        ids = np.asarray(feeds["input_ids"])
        lengths = {int(np.asarray(feeds[s["past"]]).shape[2]) for s in self.record}
        if len(lengths) != 1:
            raise InputError(f"the fed cache tensors have different lengths {sorted(lengths)}",
                             "feed one cache: every past_key_values.* with the same length")
        cached = lengths.pop()
        room = self.record[0]["shape"][2]
        if cached + ids.shape[1] > room:
            raise InputError(f"{cached} cached + {ids.shape[1]} new tokens exceed the package's "
                             f"state of {room} tokens", "convert again with a larger --max-context")
        carried = all(feeds[s["past"]] is self.returned.get(s["present"]) for s in self.record)
        if not carried:
            for s in self.record:
                buffer = np.zeros(s["shape"], np.float16)
                buffer[:, :, :cached] = np.asarray(feeds[s["past"]], dtype=np.float16)
                states[s["mil"]] = buffer
        return cached

    def after(self, states: Mapping[str, np.ndarray], total: int, dtypes: Mapping[str, str]
              ) -> dict[str, np.ndarray]:
        """The present outputs, read out of the states (the first ``total`` rows)."""
        out = {}
        for s in self.record:
            value = np.asarray(states[s["mil"]][:, :, :total]).astype(dtypes.get(s["present"], "float32"))
            out[s["present"]] = value
        self.returned = dict(out)
        return out
