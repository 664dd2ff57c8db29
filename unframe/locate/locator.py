"""locate(): run the search (or the bisection) for one failed stage, then map the culprit to the
source, write the minimal repro and the error plot, all within a time cap."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unframe.locate.bisect import FUSED_TAILS, Probe, bisect_divergence, layer_boundaries
from unframe.locate.search import Divergence, LocatorTimeout, Walk, diff, find_divergence

# (names to mark as outputs, feeds) -> their values: the candidate rebuilt and run (TensorRT)
FeedProbe = Callable[[list[str], dict[str, Any]], dict[str, Any]]

if TYPE_CHECKING:
    import onnx_ir as ir

    from unframe.locate.repro import Reproduce
    from unframe.locate.taps import Tap
    from unframe.validate.compare import StageParity


@dataclass
class LocatePlan:
    """What a stage gives the locator: the ONNX graph whose nodes are named, the reference's tap,
    and the candidate either as a tap (every value at once) or as a probe (rebuilt with a few
    values marked: TensorRT); how to run the candidate stage on a small cut (for the repro); how
    to name a node's origin in the user's model; and the tolerance that failed the stage, relative
    to each value's scale."""

    graph: ir.Model
    reference: Tap
    candidate: Tap | None = None
    probe: FeedProbe | None = None
    reproduce: Reproduce | None = None
    source_of: Callable[[ir.Node], str] | None = None
    tolerance: float = 1e-3


def stage_tolerance(failed: StageParity) -> float:
    """The failed stage's tolerance relative to a value's scale: the loosest rtol of its outputs
    (the locator compares intermediates at the precision the stage was held to)."""
    return max((o.rtol for o in failed.outputs), default=1e-3) or 1e-3


def locate(plan: LocatePlan, feeds: Sequence[dict[str, Any]], *, stage: str,
           out_dir: Path | None = None, seconds: float = 120.0) -> Divergence:
    """Find where ``plan``'s two sides part; never raises (a locator that can't finish says why)."""
    started = time.monotonic()
    deadline = started + seconds
    keep: dict[str, Any] = {}
    result = Divergence(stage, status="not found", reason="no feed to run")
    try:
        for feed in list(feeds)[:2]:  # the second set too: a batch of 2 may be what fails
            keep.clear()
            result = _search(plan, feed, stage, deadline, keep)
            if result or result.status != "not found":
                break
        if result:
            _finish(plan, result, keep, out_dir, deadline)
    except LocatorTimeout:
        result.status, result.reason = "timed out", f"gave up after its cap of {seconds:.0f} s"
    except Exception as exc:  # the parity failure stands; the locator only adds to it
        result.status = "unavailable"
        result.reason = f"the locator failed: {type(exc).__name__}: {str(exc)[:200]}"
    result.seconds = time.monotonic() - started
    return result


def _search(plan: LocatePlan, feed: dict[str, Any], stage: str, deadline: float,
            keep: dict[str, Any]) -> Divergence:
    if plan.candidate is not None:
        return find_divergence(plan.graph, plan.reference, plan.candidate, feed,
                               tolerance=plan.tolerance, stage=stage, deadline=deadline, keep=keep)
    if plan.probe is not None:
        return _bisect(plan, feed, stage, deadline, keep)
    return Divergence(stage, status="unavailable", reason="no way to look inside this stage here")


def _bisect(plan: LocatePlan, feed: dict[str, Any], stage: str, deadline: float,
            keep: dict[str, Any]) -> Divergence:
    outputs = [v.name for v in plan.graph.graph.outputs]
    reference = plan.reference.values(feed, None)
    result = Divergence(stage, plan.reference.name, "probe", tolerance=plan.tolerance)
    probe = _timed_probe(plan.probe, feed, deadline)
    got = probe(outputs)
    failing = [n for n in outputs if n in got and not diff(n, reference[n], got[n], plan.tolerance).ok]
    if not failing:
        result.status, result.reason = "not found", "the outputs agree on the feed the locator used"
        return result
    order = layer_boundaries(plan.graph, failing[:1])
    found = bisect_divergence(order, probe, reference, plan.tolerance)
    walk = Walk.of(plan.graph)
    span = layer_span(walk, found.last_good, found.first_bad)
    node = next((n for n in span if n.op_type not in FUSED_TAILS), span[-1])
    result.node, result.op_type, result.domain = node.name or "", node.op_type, node.domain
    result.value = found.first_bad
    verdicts = {n: diff(n, reference[n], got[n], plan.tolerance) for n in failing}
    verdicts.update({d.name: d for d in found.trail})
    result.error = verdicts[found.first_bad].error if found.first_bad in verdicts else float("inf")
    for d in found.trail:
        d.position = walk.position.get(d.name, -1)
    result.path = sorted(found.trail, key=lambda d: d.position)
    result.compared, result.walked = found.builds + 1, len(order)
    result.notes.append(f"bisected {len(order)} layer boundaries in {found.builds + 1} builds "
                        f"(budget {found.budget}); the fault lies after "
                        f"{found.last_good or 'the inputs'} and at or before {found.first_bad}: "
                        + ", ".join(f"{n.op_type} {n.name}" for n in span))
    keep.update(reference=reference, candidate=reference)
    return result


def layer_span(walk: Walk, last_good: str | None, first_bad: str) -> list[ir.Node]:
    """The nodes computing ``first_bad`` from ``last_good`` (the layer that holds the fault), in
    topological order: ancestors of ``first_bad`` that come after ``last_good``'s producer."""
    start = walk.position[last_good] if last_good in walk.position else -1
    ancestors = walk.ancestors([first_bad])
    return [walk.nodes[i] for i in sorted(ancestors) if i > start
            and walk.nodes[i].op_type != "Constant"]


def _timed_probe(probe: FeedProbe, feed: dict[str, Any], deadline: float) -> Probe:
    """The plan's probe bound to one feed, stopping at the time cap."""

    def run(names: list[str]) -> dict[str, Any]:
        if time.monotonic() > deadline:
            raise LocatorTimeout("the locator's time cap was reached")
        return probe(names, feed)

    return run


def _finish(plan: LocatePlan, result: Divergence, keep: dict[str, Any], out_dir: Path | None,
            deadline: float) -> None:
    from unframe.locate.plot import write_plot
    from unframe.locate.repro import minimal_repro, write_repro

    walk = Walk.of(plan.graph)
    named = [n for n in walk.nodes if (n.name or "") == result.node and n.op_type == result.op_type]
    node = named[0] if named else walk.producer.get(result.value)
    if node is not None and plan.source_of is not None:
        try:
            result.source = plan.source_of(node) or ""
        except Exception:  # noqa: BLE001 - naming the origin is a courtesy
            result.source = ""
    if out_dir is None:
        return
    labels = {v.name: f"{n.op_type} {n.name}" for n in plan.graph.graph for v in n.outputs}
    result.files.update(write_plot(result.path, result.value, plan.tolerance, out_dir, labels))
    if time.monotonic() > deadline:
        result.notes.append("no repro: the time cap was reached")
        return
    repro = minimal_repro(plan.graph, result.value, keep.get("reference", {}),
                          keep.get("candidate", {}), plan.reproduce, plan.tolerance)
    if repro is None:
        result.notes.append("no repro: the culprit's inputs were not seen by either stage")
        return
    result.files.update(write_repro(repro, out_dir))
    result.reproduces = repro.reproduces
    if repro.note:
        result.notes.append(repro.note)


def backend_reproducer(backend: Any, target: Any) -> Reproduce:
    """A repro check for a backend stage: convert the cut with ``backend`` and run the artifact."""
    import tempfile

    def reproduce(cut: ir.Model, feeds: dict[str, Any]) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="unframe-repro-") as tmp:
            artifact = backend.convert(cut, target, Path(tmp))
            return backend.runner(artifact, target).run(feeds)

    return reproduce
