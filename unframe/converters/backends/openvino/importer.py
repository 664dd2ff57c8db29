"""ONNX -> ``openvino.Model`` through OpenVINO's own converter, and every reason it can't be.

``import_onnx`` is the one place the ONNX route meets OpenVINO, for ``check`` and ``convert``
alike, so they can't disagree. Its blockers come from two places:

* the ONNX frontend's refusal (``ov.convert_model`` raises ``OpConversionFailure`` with a summary:
  "No conversion rule found for operations: Bernoulli-21, my.dom.Foo" and "Conversion is failed
  for: ..." with a message per op type): one blocker per node of those types in the graph, and
  any other error of the converter (a shape it can't infer) as one blocker for the model;
* the CPU plugin's ``Core().query_model``: the converted ops it does not take. It costs about as
  much as ``convert_model`` (some 20 ms whatever the model, more with its size), so what it took
  is remembered (``TAKEN``, and on disk across processes: ``unframe.cache``, a file per
  openvino version and CPU): a model made only of ops it already took, as they are here, is not
  asked again (a check and its convert, a retry at fp32 weights, the locator's probes, a zoo of
  one architecture, the next CLI call). Any other model is asked whole, so every refusal comes
  from the plugin itself, about this model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx_ir as ir

from unframe.converters.backends.openvino.runtime import (
    core,
    first_line,
    import_openvino,
    ov_tool,
    quiet_openvino,
)
from unframe.errors import Blocker

DEVICE = "CPU"
NO_RULE = "-- No conversion rule found for operations:"
FAILED = "-- Conversion is failed for:"
HINT_NO_RULE = "OpenVINO's ONNX frontend has no conversion for this op"
# ops of the converted model that query_model never lists: they hold no computation
STRUCTURAL = frozenset({"Parameter", "Result", "Constant"})
# ops with bodies of their own: the signature below does not describe them, they are always asked
SUBGRAPH_OPS = frozenset({"Loop", "If", "TensorIterator"})
SMALL_CONSTANT_BYTES = 64  # a constant input this small is part of a signature by value (axes, pads)
MAX_TAKEN = 10_000  # signatures remembered in a process before its memory starts over


@dataclass
class Imported:
    """What OpenVINO made of an ONNX graph: the model (None when it refused) and the blockers."""

    model: Any
    blockers: list[Blocker] = field(default_factory=list)
    seconds: float = 0.0  # ov.convert_model's own time
    notes: list[str] = field(default_factory=list)  # what was rewritten first (``prepare``)


def import_onnx(model: ir.Model, path: Path) -> Imported:
    """``path`` holds ``model`` as ONNX (``io.tool_file``): OpenVINO reads it by path, external
    data included. The model is converted whole, then asked of the CPU plugin."""
    import time

    ov = import_openvino()
    start = time.perf_counter()
    try:
        with quiet_openvino(), ov_tool():
            converted = ov.convert_model(str(path))
    except Exception as exc:  # OpConversionFailure, GeneralFailure, shape inference errors
        return Imported(None, frontend_blockers(model, exc))
    seconds = time.perf_counter() - start
    return Imported(converted, plugin_blockers(converted), seconds)


def frontend_blockers(model: ir.Model, exc: BaseException) -> list[Blocker]:
    """The frontend's refusal as blockers: per node for the op types its summary names."""
    text = str(exc)
    detail = _failure_details(text)
    out: list[Blocker] = []
    for line in text.splitlines():
        line = line.strip()
        for prefix, reason in ((NO_RULE, HINT_NO_RULE), (FAILED, "")):
            if not line.startswith(prefix):
                continue
            for name in (n.strip() for n in line[len(prefix):].split(",") if n.strip()):
                why = reason or f"OpenVINO's ONNX frontend failed on it: {detail.get(name, 'no message')}"
                out.extend(_node_blockers(model, name, why))
    if not out:
        out.append(Blocker("*", f"OpenVINO's converter refused the model: {first_line(exc)}",
                           hint="report it with the model; OpenVINO's own error, not a missing op"))
    return out


def _failure_details(text: str) -> dict[str, str]:
    """'-- Op with a message:\\n<message>' sections of the frontend's detailed log."""
    out: dict[str, str] = {}
    for match in re.finditer(r"^-- (\S+) with a message:\n(.*?)(?=^-- |^Summary:|\Z)", text, re.M | re.S):
        lines = [ln.strip() for ln in match.group(2).splitlines() if ln.strip()]
        useful = [ln for ln in lines if not ln.startswith(("Check ", "Exception from", "FrontEnd API"))]
        out[match.group(1)] = " ".join((useful or lines or ["?"])[-1].split())[:300]
    return out


def _node_blockers(model: ir.Model, name: str, reason: str) -> list[Blocker]:
    """``name`` as the frontend spells an op: ``Bernoulli-21`` (default domain, opset) or
    ``my.domain.Foo``; one blocker per graph node of that type (subgraphs included)."""
    domain, op = _split_op(name)
    nodes = [n for n in ir.traversal.RecursiveGraphIterator(model.graph)
             if n.op_type == op and (n.domain or "") in _domains(domain)]
    hint = "" if reason != HINT_NO_RULE else "no route converts it for OpenVINO: replace the op in the model"
    if not nodes:
        return [Blocker(op, reason, domain=domain, hint=hint)]
    return [Blocker(op, reason, n.name or "", n.domain or "", hint) for n in nodes]


def _split_op(name: str) -> tuple[str, str]:
    versioned = re.fullmatch(r"(.+)-(\d+)", name)
    if versioned:
        return "", versioned.group(1)
    domain, dot, op = name.rpartition(".")
    return (domain, op) if dot else ("", name)


def _domains(domain: str) -> tuple[str, ...]:
    return ("", "ai.onnx") if domain in ("", "ai.onnx") else (domain,)


# The signatures of the ops the CPU plugin took (``query_model``) in this process, which has one
# openvino. A signature is what the plugin's per-op support check reads (its
# ``Node::isSupportedOperation``, after its own transformations): the op type and opset, its
# attributes, each input's element type, partial shape and producer (a small constant by value),
# each output's element type and partial shape. A table of op types alone would not do: the same
# Convolution is refused when its weights' shape is dynamic, LRN past rank 5 (openvino 2026.4,
# tests/converters/backends/openvino/test_openvino_onnx.py). Only what it took is remembered.
# Held as digests (``unframe.cache.digest``), so that the same set can be kept on disk: the
# signatures another process saw taken, by this openvino on this CPU, are read once (``_remembered``).
TAKEN: set[str] = set()
_DISK: dict[str, Any] = {}  # "set": the DigestSet, once its file has been read into TAKEN


def _remembered() -> Any:
    """The on-disk memory of ``TAKEN`` for this openvino and CPU, read into it the first time."""
    from unframe import cache

    known = _DISK.get("set")
    if known is None:
        ov = import_openvino()
        known = cache.DigestSet(f"openvino-{ov.__version__}-{DEVICE.lower()}-{cache.machine_id()}-taken")
        TAKEN.update(known.load())
        _DISK["set"] = known
    return known


def plugin_blockers(converted: Any) -> list[Blocker]:
    """Ops of the converted model the CPU plugin does not take (``query_model``; none asked when
    every op's signature is one it took before, ``TAKEN``)."""
    from unframe import cache

    ops = [op for op in converted.get_ordered_ops() if op.get_type_name() != "Constant"]
    signatures = [op_signature(op) for op in ops]
    digests = [cache.digest(s) if s is not None else None for s in signatures]
    disk = _remembered()
    if all(d is not None and d in TAKEN for d in digests):
        return []
    with quiet_openvino(), ov_tool():
        try:
            supported = core().query_model(converted, DEVICE)
        except Exception as exc:  # the plugin refuses the model as a whole
            return [Blocker("*", f"OpenVINO's {DEVICE} plugin refused the model: {first_line(exc)}")]
    out = []
    taken = []
    for op, signature in zip(ops, digests, strict=True):
        if op.get_type_name() in STRUCTURAL or op.get_friendly_name() in supported:
            taken.append(signature)
            continue
        out.append(Blocker(op.get_type_name(), f"OpenVINO's {DEVICE} plugin does not support this "
                           f"{op.get_type_name()} (opset {op.get_type_info().version_id})",
                           op.get_friendly_name(), "openvino",
                           "the op converted but no CPU kernel takes it as it is"))
    if len(TAKEN) > MAX_TAKEN:
        TAKEN.clear()
    new = {d for d in taken if d is not None} - TAKEN
    TAKEN.update(new)
    disk.add(new)
    return out


def op_signature(op: Any) -> tuple[Any, ...] | None:
    """What the CPU plugin's support of ``op`` can depend on (see ``TAKEN``); None for an op with
    a body of its own."""
    kind = op.get_type_name()
    if kind in SUBGRAPH_OPS:
        return None
    inputs = []
    for port in op.inputs():
        source = port.get_source_output().get_node()
        value = (source.get_data().tobytes() if source.get_type_name() == "Constant"
                 and source.get_byte_size() <= SMALL_CONSTANT_BYTES else None)
        inputs.append((source.get_type_name(), port.get_element_type().get_type_name(),
                       str(port.get_partial_shape()), value))
    outputs = tuple((p.get_element_type().get_type_name(), str(p.get_partial_shape())) for p in op.outputs())
    return (kind, op.get_type_info().version_id, repr(sorted(op.get_attributes().items())),
            tuple(inputs), outputs)


__all__ = ["DEVICE", "TAKEN", "Imported", "frontend_blockers", "import_onnx", "op_signature", "plugin_blockers"]
