"""The accuracy guard of a quantized artifact: does it still answer like the float model?

Run on input sets the quantizer never saw (held out from calibration), the quantized artifact
(by its own runtime) and the float model (the source framework, or the float ONNX graph) are
compared output by output, pooled over the sets:

- ``top1``: for classifier-like outputs (a batch of score rows: ``[N, classes]``, or
  ``[N, T, vocab]`` logits), the share of rows whose argmax agrees. A row whose quantized argmax
  is another class the float model scores within one int8 step of its best (the output's scale /
  127: a tie no int8 output can break) agrees too, and the report counts such rows. Integer
  outputs (labels) are compared exactly, their agreement counted the same way;
- ``det``: a detector's outputs (boxes [N, 4], scores, labels: ``validate.detections``) as
  detections: the score-weighted share found on both sides, matched by label and IoU, in place of
  top-1 and cosine, whose row-by-row view a change of order or count would fail;
- ``cos``: the cosine similarity of every float output but a detector's, flattened over the sets;
  a classifier-like output is judged by its cosine too, since the shape that makes it one
  (``[N, k]``) is also an embedding's or a regression's, which argmax alone can't judge;
- ``rel``: the largest error relative to the output's scale (reported, not judged: int8 moves
  single values more than it moves what the model decides);
- for a decoder (``input_ids`` in, ``logits`` out): 32 greedy tokens from the first held-out
  prompt on both sides (the share identical from the start, ``tokens``) and the perplexity of the
  held-out sequences under each (its rise, ``ppl``), in place of top-1 and cosine.

The guard passes when every classifier-like output's agreement reaches ``Thresholds.top1``, every
detector's reaches ``Thresholds.det`` and every float output's cosine but a detector's
``Thresholds.cos``.

When an int8 artifact still fails, ``input_floor`` asks what the float model itself does with its
inputs rounded to one int8 step of their range (what an int8 artifact's first quantize does to
them, at the finest step it could have): a model that amplifies such small changes (a seeded
MobileNetV3 whose batch norms never saw its activations: cosine 0.93, where ResNet-18 keeps
1.0000) fails there already, and the report says so. It explains a failure; it decides nothing (a
few near-tied rows may flip under one rounding and not another). A reference without spread (all zero,
constant) can't be judged by cosine: the output is named weak.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from unframe.errors import UnframeError
from unframe.validate import detections
from unframe.validate.compare import FAILED, PASSED, OutputParity, StageParity, top1_agreement
from unframe.validate.runner import Runner


@dataclass
class AccuracyCheck(StageParity):
    """A parity record whose judgement is the accuracy guard's (``stage`` "accuracy")."""

    scheme: str = ""
    thresholds: str = ""
    cosine: dict[str, float] = field(default_factory=dict)  # per float output
    calibration: str = ""  # what calibrated it
    kept_float: list[str] = field(default_factory=list)
    size: tuple[int, int] | None = None  # bytes: the float artifact, the quantized one
    rounds: int = 1  # conversions the sensitivity pass made
    predicted: str = ""  # the artifact couldn't run here: what stood in for it (onnxruntime on its Q/DQ graph)
    tokens: float | None = None  # decoders: share of the greedy tokens identical from the start
    perplexity: tuple[float, float] | None = None  # decoders: float, quantized
    layers: dict[str, str] = field(default_factory=dict)  # weighted layer -> its scheme (passes/quantize/layers.py)
    layers_source: str = ""  # "the quantized graph" or the plan handed to a vendor's quantizer
    latency: Any = None  # validate.latency.Latency: the float and the quantized artifact, same runtime
    latency_note: str = ""  # why latency wasn't measured
    floor: str = ""  # an int8 failure: the float model's own answer to int8-rounded inputs (input_floor)
    detections: list[Any] = field(default_factory=list)  # validate.detections.DetectionAgreement per detector
    tied_rows: int = 0  # top-1 rows that agree only through a tie within one int8 step
    quantizer: str = ""  # another quantizer than the backend's own made the artifact judged
    others: list[str] = field(default_factory=list)  # "name: why its artifact failed", each quantizer tried before

    def details(self) -> dict[str, Any]:
        """What provenance keeps of the guard (``inspect`` shows it)."""
        return {"scheme": self.scheme, "thresholds": self.thresholds, "top1": self.top1,
                "cosine": self.cosine, "tokens": self.tokens, "perplexity": self.perplexity,
                "calibration": self.calibration, "kept_float": self.kept_float,
                "size": list(self.size) if self.size else None, "predicted": self.predicted,
                "layers_source": self.layers_source, "layers": dict(list(self.layers.items())[:LAYERS_KEPT]),
                "latency": self.latency.as_dict() if self.latency is not None else None,
                "latency_note": self.latency_note, "tied_rows": self.tied_rows, "floor": self.floor,
                "detections": [d.describe() for d in self.detections],
                "quantizer": self.quantizer, "quantizers_failed": list(self.others)}

    def summary(self) -> str:
        parts = [f"{self.stage} ({self.scheme}): " + ("FAILED" if self.status == FAILED else "passed")
                 + f" on {self.cases} held-out input set(s)"]
        if self.tokens is not None:
            parts.append(f"greedy tokens identical {self.tokens:.0%}")
        if self.perplexity is not None:
            parts.append(f"perplexity {self.perplexity[0]:.3f} -> {self.perplexity[1]:.3f}")
        if self.top1 is not None:
            parts.append(f"top-1 agrees on {self.top1:.1%}" + (
                f" ({self.tied_rows} row(s) through a tie within one int8 step)" if self.tied_rows else ""))
        parts.extend(d.describe() for d in self.detections)
        if self.cosine:
            parts.append(f"cosine {min(self.cosine.values()):.5f}")
        parts.append(f"max err {self.rel_to_scale:.2g} of the output scale")
        parts.append(f"needs {self.thresholds}")
        if self.calibration:
            parts.append(f"calibrated on {self.calibration}")
        if self.quantizer:
            parts.append(f"quantized by {self.quantizer}")
        if self.others:
            parts.append("failed first: " + "; ".join(self.others))
        if self.kept_float:
            shown = ", ".join(self.kept_float[:5]) + (f" +{len(self.kept_float) - 5} more" if len(self.kept_float) > 5 else "")
            parts.append(f"{len(self.kept_float)} layer(s) kept in float ({shown})")
        if self.size:
            parts.append(f"size {self.size[1] / max(self.size[0], 1):.2f}x the float artifact")
        if self.layers:
            parts.append(f"layers ({self.layers_source}): {scheme_counts(self.layers)}")
        if self.latency is not None:
            parts.append(self.latency.describe())
        elif self.latency_note:
            parts.append(f"latency not measured: {self.latency_note}")
        if self.predicted:
            parts.append(f"PREDICTED by {self.predicted} (the artifact itself was not run)")
        if self.status == FAILED and self.reason:
            parts.append(self.reason)
        if self.floor:
            parts.append(self.floor)
        if self.weak:
            parts.append("WEAK: " + "; ".join(self.weak))
        return ", ".join(parts)


LAYERS_KEPT = 2000  # layers listed in provenance; past it the summary's counts stand for the rest


def scheme_counts(layers: Mapping[str, str]) -> str:
    """``"20 int8 ..., 2 float (kept ...)"``: the schemes by how many layers hold each."""
    return ", ".join(f"{n} {s}" for s, n in Counter(layers.values()).most_common())


def shortfall(check: AccuracyCheck, thresholds: Any) -> float:
    """How far ``check`` falls below ``thresholds``: 0 when it passes, else the sum of each
    measure's gap below its threshold (infinite when the artifact could not run a set). The
    accuracy stage keeps the quantizer whose artifact falls least short."""
    if check:
        return 0.0
    if getattr(check, "run_failure", ""):
        return float("inf")
    gap = 0.0
    if check.top1 is not None:
        gap += max(0.0, thresholds.top1 - check.top1)
    if check.cosine:
        gap += max(0.0, thresholds.cos - min(check.cosine.values()))
    gap += sum(max(0.0, thresholds.det - d.agreement) for d in check.detections)
    if check.tokens is not None:
        gap += max(0.0, thresholds.tokens - check.tokens)
    if check.perplexity is not None:
        before, after = check.perplexity
        gap += max(0.0, after / max(before, 1e-12) - 1.0 - thresholds.ppl)
    return gap if gap > 0 else float("inf")  # failed on what no measure counts (a missing output)


def guard(reference: Runner, candidate: Runner, feeds: Sequence[Mapping[str, np.ndarray]],
          thresholds: Any, *, scheme: str = "") -> AccuracyCheck:
    """The guard's verdict on ``feeds`` (see the module's doc)."""
    from unframe.validate.generate import DecoderSignature

    runs = []
    for i, feed in enumerate(feeds):
        expected = reference.run(dict(feed))
        try:
            runs.append((expected, candidate.run(dict(feed))))
        except UnframeError as exc:  # an input the float model answers and the quantized one can't
            failed = AccuracyCheck("accuracy", reference.name, candidate.name, cases=i + 1, scheme=scheme,
                                   thresholds=thresholds.describe(), status=FAILED)
            failed.run_failure = " ".join(exc.message.split())[:300]
            failed.reason = (f"{candidate.name} fails to run held-out set {i + 1}, which {reference.name} "
                             f"runs ({failed.run_failure})")
            return failed
    names = [n for n in runs[0][0] if all(n in got for _, got in runs)] if runs else []
    sig = DecoderSignature.of(list(feeds[0]) if feeds else [], names)
    groups = [g for g in (detections.find_groups(runs[0][0], [r for r, _ in runs]) if runs else [])
              if all(n in names for n in g.names)] if sig is None else []
    check = AccuracyCheck("accuracy", reference.name, candidate.name, cases=len(feeds), scheme=scheme,
                          thresholds=thresholds.describe(decoder=sig is not None, detections=bool(groups)))
    if sig is not None:
        return _judge_decoder(check, reference, candidate, sig, runs, feeds, thresholds)
    missing = [n for n in (runs[0][0] if runs else {}) if n not in names]
    failures = [f"output(s) {', '.join(missing)} missing from the quantized artifact"] if missing else []
    for group in groups:
        found = detections.agreement(group, [r for r, _ in runs], [g for _, g in runs])
        check.detections.append(found)
        for name in group.names:
            check.outputs.append(_listed(name, [np.asarray(r[name]) for r, _ in runs],
                                         [np.asarray(g[name]) for _, g in runs],
                                         found.weak() if name == group.scores else ""))
        if not detections.passes(found, thresholds.det):
            failures.append(f"{group.scores}: score levels off by {found.score_error:.2%} of their scale "
                            "(the kept detections tie)" if found.tied else
                            f"{found.describe()} (< {thresholds.det:.0%})")
    judged = {n for g in groups for n in g.names}
    for name in (n for n in names if n not in judged):
        ref = [np.asarray(r[name]) for r, _ in runs]
        got = [np.asarray(g[name]) for _, g in runs]
        out = _measure(name, ref, got, check)
        check.outputs.append(out)
        if out.top1 is not None and out.top1 < thresholds.top1:
            failures.append(top1_failure(name, out.top1, out.top1_rows, thresholds.top1))
        cos = check.cosine.get(name)
        if cos is not None and cos < thresholds.cos:
            failures.append(f"{name}: cosine {cos:.4f} (< {thresholds.cos:g})")
    if failures:
        check.status, check.reason = FAILED, "; ".join(failures)
    else:
        check.status = PASSED
    return check


def _judge_decoder(check: AccuracyCheck, reference: Runner, candidate: Runner, sig: Any,
                   runs: list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]],
                   feeds: Sequence[Mapping[str, np.ndarray]], thresholds: Any) -> AccuracyCheck:
    """A decoder: 32 greedy tokens from the first held-out prompt on both sides (the share
    identical from the start), and the perplexity of the held-out sequences under each."""
    from unframe.validate.generate import DEFAULT_STEPS, cache_template, greedy, prompt_of

    feed = dict(feeds[0])
    prompt, template = prompt_of(feed), cache_template(sig, feed)
    a = greedy(reference, sig, prompt, DEFAULT_STEPS, template)
    b = greedy(candidate, sig, prompt, DEFAULT_STEPS, template)
    same = next((i for i, (x, y) in enumerate(zip(a.tokens, b.tokens, strict=True)) if x != y), len(a.tokens))
    check.tokens = same / max(len(a.tokens), 1)
    ppl_ref = perplexity([r[sig.logits] for r, _ in runs], [f["input_ids"] for f in feeds])
    ppl_out = perplexity([g[sig.logits] for _, g in runs], [f["input_ids"] for f in feeds])
    check.perplexity = (ppl_ref, ppl_out)
    logits = _measure(sig.logits, [np.asarray(r[sig.logits]) for r, _ in runs],
                      [np.asarray(g[sig.logits]) for _, g in runs], check)
    check.outputs.append(logits)
    failures = []
    if check.tokens < thresholds.tokens:
        failures.append(f"greedy tokens identical for {same} of {len(a.tokens)} (< {thresholds.tokens:.0%})")
    if ppl_out > ppl_ref * (1 + thresholds.ppl):
        failures.append(f"perplexity {ppl_ref:.3f} -> {ppl_out:.3f} (more than +{thresholds.ppl:.0%})")
    check.status, check.reason = (FAILED, "; ".join(failures)) if failures else (PASSED, "")
    return check


class RoundedInputs(Runner):
    """``reference`` fed its float inputs rounded to one int8 step of their range (largest
    magnitude / 127, per input and set); other inputs as they are."""

    def __init__(self, reference: Runner) -> None:
        self.reference = reference
        self.name = f"{reference.name}, its inputs rounded to int8 steps"

    def run(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.reference.run({k: _int8_rounded(v) for k, v in feed.items()})


def _int8_rounded(value: Any) -> Any:
    x = np.asarray(value)
    if x.dtype.kind != "f" or x.size == 0 or not np.all(np.isfinite(x)):
        return value
    step = float(np.abs(x).max()) / detections.STEPS
    return (np.round(x / step) * step).astype(x.dtype) if step > 0 else value


def input_floor(reference: Runner, feeds: Sequence[Mapping[str, np.ndarray]], thresholds: Any) -> str:
    """"" when the float model passes the guard against itself fed int8-rounded inputs; else what
    it reaches there (see the module's doc)."""
    if not any(np.asarray(v).dtype.kind == "f" for f in feeds for v in f.values()):
        return ""
    check = guard(reference, RoundedInputs(reference), feeds, thresholds)
    if check:
        return ""
    return (f"the float model itself fails the guard with its inputs merely rounded to int8 steps "
            f"({check.reason}): it amplifies changes that small, and int8 makes them at every activation")


def perplexity(logits: Sequence[np.ndarray], ids: Sequence[np.ndarray]) -> float:
    """exp of the mean cross-entropy of each next token under the logits before it, over every
    sequence of every set."""
    total, count = 0.0, 0
    for z, t in zip(logits, ids, strict=True):
        z = np.asarray(z, dtype=np.float64)[:, :-1]
        t = np.asarray(t)[:, 1:]
        z = z - z.max(axis=-1, keepdims=True)
        log_probs = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
        total -= float(np.take_along_axis(log_probs, t[..., None], axis=-1).sum())
        count += t.size
    return float(np.exp(total / max(count, 1)))


def _top1_rows(ref: np.ndarray, got: np.ndarray, step: float) -> tuple[int, int, int]:
    """(rows that agree, rows, rows that agree only through a tie): a row agrees when the float
    model scores the quantized argmax within ``step`` of its own best."""
    r = ref.reshape(-1, ref.shape[-1]).astype(np.float64)
    g = got.reshape(-1, got.shape[-1]).astype(np.float64)
    with np.errstate(invalid="ignore"):
        best, pick = np.argmax(r, axis=-1), np.argmax(g, axis=-1)
        rows = np.arange(r.shape[0])
        tie = (pick != best) & (r[rows, pick] >= r[rows, best] - step)
    agree = (pick == best) | tie
    return int(np.count_nonzero(agree)), int(r.shape[0]), int(np.count_nonzero(tie))


def top1_failure(name: str, top1: float, rows: int, needed: float) -> str:
    """The failure of a top-1 agreement, with the rows it was counted on; where one row alone
    moves it past the threshold (fewer than ``1 / (1 - needed)`` rows: 50 at 98 %), it says so and
    what judges finer (a guard on 16 held-out rows fails any model that flips one)."""
    differ = round((1.0 - top1) * rows)
    text = f"{name}: top-1 agrees on {top1:.1%} of {rows} held-out row(s), {differ} differ (< {needed:.0%})"
    if rows and 1.0 / rows > 1.0 - needed:
        text += (f"; one row weighs {100.0 / rows:.1f} points here: pass more --calibration sets "
                 "(a fifth of them is held out) or sets of more rows to judge finer")
    return text


def _listed(name: str, ref: list[np.ndarray], got: list[np.ndarray], weak: str) -> OutputParity:
    """A detector's output, judged as part of its detections: its shapes and scale, for the report."""
    out = OutputParity(name, list(ref[0].shape), list(got[0].shape), str(ref[0].dtype), str(got[0].dtype))
    out.total = int(sum(r.size for r in ref))
    values = [np.abs(r.astype(np.float64)) for r in ref if r.size and r.dtype.kind in "fiu"]
    out.scale = max((float(v.max()) for v in values), default=0.0)
    out.weak = weak
    return out


def _measure(name: str, ref: list[np.ndarray], got: list[np.ndarray], check: AccuracyCheck) -> OutputParity:
    out = OutputParity(name, list(ref[0].shape), list(got[0].shape), str(ref[0].dtype), str(got[0].dtype))
    if any(r.shape != g.shape for r, g in zip(ref, got, strict=True)):
        out.passed, out.reason = False, "shapes differ"
        check.cosine[name] = 0.0
        return out
    a = np.concatenate([r.reshape(-1) for r in ref]).astype(np.float64) if ref[0].dtype.kind in "fiub" else None
    b = np.concatenate([g.reshape(-1) for g in got]).astype(np.float64) if a is not None else None
    if a is None or b is None or a.size == 0:
        return out  # strings and empty outputs: not a number to judge
    out.total = int(a.size)
    out.scale = float(np.abs(a[np.isfinite(a)]).max()) if np.isfinite(a).any() else 0.0
    out.max_abs = float(np.nanmax(np.abs(a - b))) if a.size else 0.0
    if ref[0].dtype.kind in "iub":  # labels: exact agreement, counted like top-1
        out.top1, out.top1_rows = float(np.mean(a == b)), int(a.size)
        return out
    if all(top1_agreement(r, g, name) is not None for r, g in zip(ref, got, strict=True)):
        step = out.scale / detections.STEPS
        counts = [_top1_rows(r, g, step) for r, g in zip(ref, got, strict=True)]
        out.top1_rows = sum(rows for _, rows, _ in counts)
        out.top1 = sum(agree for agree, _, _ in counts) / max(out.top1_rows, 1)
        check.tied_rows += sum(tied for _, _, tied in counts)
    centred = a - a.mean()
    if not np.isfinite(a).all() or float(np.abs(centred).max(initial=0.0)) == 0.0:
        out.weak = "the float model's output has no spread (constant): cosine proves nothing"
        return out
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    check.cosine[name] = float(np.dot(a, b) / norm) if norm > 0 else 0.0
    return out
