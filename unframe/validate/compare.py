"""compare(): run two stages on the same feeds and check every output.

A ``StageParity`` records, per output, shapes, dtypes, the worst absolute and relative errors,
the tolerances used and how many elements missed them. A ``ParityReport`` holds one
``StageParity`` per stage of a route; it is truthy when no stage failed and names the first
failing stage.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from unframe.errors import ResourceLimitError, UnframeError, UnsupportedError
from unframe.validate import tolerances
from unframe.validate.runner import Runner

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
# A float reference whose largest magnitude is below this proves nothing: every candidate within
# atol of zero passes (random-init networks give 1e-10..1e-13, or exactly 0).
NEAR_ZERO = {"float16": 1e-3, "bfloat16": 1e-2}
NEAR_ZERO_DEFAULT = 1e-6
ROUNDING_16 = "the graph's own 16-bit rounding error (onnxruntime)"


@dataclass
class OutputParity:
    name: str
    ref_shape: list[int] | None = None
    out_shape: list[int] | None = None
    ref_dtype: str = ""
    out_dtype: str = ""
    max_abs: float = 0.0
    max_rel: float = 0.0  # element-wise, over elements of magnitude > 1e-6
    scale: float = 0.0  # the reference's largest finite magnitude
    atol: float = 0.0
    rtol: float = 0.0
    of_scale: bool = False  # rtol multiplies the output's scale (16-bit compute), see tolerances
    rounding: float = 0.0  # the atol floor from rounding alone (validate.rounding), 0 if none
    rounding_origin: str = ROUNDING_16  # what measured that floor, for the report
    mismatched: int = 0
    total: int = 0
    passed: bool = True
    reason: str = ""
    top1: float | None = None  # classifier-like outputs: share of rows whose argmax agrees
    top1_rows: int = 0  # the rows top1 counts, over every feed
    weak: str = ""  # why this output's reference proves nothing (near zero, constant, non-finite)
    unstable: bool = False  # the reference changes between two runs on one feed: numbers not compared
    allowed: float = 0.0  # the largest difference the tolerance allows an element (for the spread)
    top1_failed: bool = False  # within the tolerance, but its top-1 agreement is below the floor

    def merge(self, other: OutputParity) -> None:
        """Fold another feed's result for the same output into this one (worst case wins; top-1
        agreement pooled over the rows of every feed)."""
        self.max_abs = max(self.max_abs, other.max_abs)
        self.max_rel = max(self.max_rel, other.max_rel)
        self.scale = max(self.scale, other.scale)
        self.rounding = max(self.rounding, other.rounding)
        self.allowed = max(self.allowed, other.allowed)
        if other.top1 is not None:
            if self.top1 is None:
                self.top1, self.top1_rows = other.top1, other.top1_rows
            else:
                rows = self.top1_rows + other.top1_rows
                self.top1 = (self.top1 * self.top1_rows + other.top1 * other.top1_rows) / max(rows, 1)
                self.top1_rows = rows
        self.mismatched += other.mismatched
        self.total += other.total
        if not other.passed and self.passed:
            self.passed, self.reason = False, other.reason
            self.ref_shape, self.out_shape = other.ref_shape, other.out_shape


@dataclass
class StageParity:
    stage: str
    reference: str
    candidate: str
    status: str = PASSED
    outputs: list[OutputParity] = field(default_factory=list)
    cases: int = 0  # how many feeds were compared (e.g. two batch sizes)
    reason: str = ""  # why it failed or was skipped
    feeds_note: str = ""  # which feeds were used when the first ones gave a degenerate reference
    reordered: list[str] = field(default_factory=list)  # rows matched across tied scores (detections)
    cut_ties: list[str] = field(default_factory=list)  # detections kept differently at a tied cut (weak)
    # a decoder's greedy tokens on both sides (unframe.validate.generate.GenerationParity)
    generation: Any = None
    # the candidate's runner failed on a feed the reference ran: the error, named (else "")
    run_failure: str = ""
    unstable: list[str] = field(default_factory=list)  # outputs that change between two runs of the reference
    dropped: list[int] = field(default_factory=list)  # feeds unframe drew that the reference can't run
    dropped_note: str = ""  # why they were dropped

    def __bool__(self) -> bool:
        return self.status != FAILED

    @property
    def weak(self) -> list[str]:
        """Why a passed stage proves little: one reason per degenerate output, and a greedy
        generation that parted at a near-tie."""
        weak = [f"output {o.name!r}: {o.weak}" for o in self.outputs if o.weak]
        weak.extend(self.cut_ties)
        if self.generation is not None and self.generation.status == "tie":
            weak.append(f"greedy generation: {self.generation.reason}")
        return weak

    @property
    def max_abs(self) -> float:
        return max((o.max_abs for o in self.outputs), default=0.0)

    @property
    def max_rel(self) -> float:
        return max((o.max_rel for o in self.outputs), default=0.0)

    @property
    def scale(self) -> float:
        return max((o.scale for o in self.outputs), default=0.0)

    @property
    def rel_to_scale(self) -> float:
        """The worst output's max abs error relative to that output's scale (its largest
        reference magnitude): element-wise relative error is meaningless near zero."""
        return max((o.max_abs / o.scale for o in self.outputs if o.scale > 0), default=0.0)

    @property
    def top1(self) -> float | None:
        values = [o.top1 for o in self.outputs if o.top1 is not None]
        return min(values) if values else None

    def summary(self) -> str:
        if self.status == SKIPPED:
            return f"{self.stage}: skipped ({self.reason})"
        if self.status == FAILED:
            return f"{self.stage}: FAILED ({self.reason})"
        text = (f"{self.stage}: passed on {self.cases} input set(s), {len(self.outputs)} output(s), "
                f"max abs err {self.max_abs:.3g} ({self.rel_to_scale:.2g} of the output scale "
                f"{self.scale:.3g})")
        if any(o.of_scale for o in self.outputs):
            text += ", rtol of the output scale (16-bit compute)"
        floored = max(self.outputs, key=lambda o: o.rounding, default=None)
        if floored is not None and floored.rounding:
            text += f", atol {floored.rounding:.2g} from {floored.rounding_origin}"
        if self.top1 is not None:
            text += f", top-1 agrees on {self.top1:.0%}"
        if self.reordered:
            text += f"; {'; '.join(self.reordered)}"
        if self.generation is not None:
            text += f"; {self.generation.summary()}"
        if self.weak:
            text += f"; WEAK: {'; '.join(self.weak)}"
        return text

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["max_abs"], d["max_rel"], d["scale"] = self.max_abs, self.max_rel, self.scale
        d["rel_to_scale"] = self.rel_to_scale
        d["weak"] = self.weak
        d["top1"] = self.top1
        return d

    @classmethod
    def skipped(cls, stage: str, reference: str, candidate: str, reason: str) -> StageParity:
        return cls(stage, reference, candidate, status=SKIPPED, reason=reason)


@dataclass
class ParityReport:
    stages: list[StageParity] = field(default_factory=list)

    def add(self, stage: StageParity) -> StageParity:
        self.stages.append(stage)
        return stage

    def __bool__(self) -> bool:
        return all(self.stages)

    @property
    def first_failure(self) -> StageParity | None:
        return next((s for s in self.stages if not s), None)

    def to_dict(self) -> dict[str, Any]:
        return {"passed": bool(self), "stages": [s.to_dict() for s in self.stages]}

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.to_dict(), **kw)

    def summary(self) -> str:
        """Short text for provenance metadata."""
        return "; ".join(s.summary() for s in self.stages) or "not validated"

    def __str__(self) -> str:
        if not self.stages:
            return "parity: nothing compared"
        return "\n".join(f"parity {s.summary()}\n       {s.reference}  vs  {s.candidate}"
                         for s in self.stages)


def compare(ref: Runner, out: Runner, feeds: Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]],
            atol: tolerances.Override = None, rtol: tolerances.Override = None, *, stage: str = "",
            exact: Sequence[str] = (), defaults: Mapping[str, tuple[float, float]] | None = None,
            default_fn: Any = None, floors: Mapping[str, float] | None = None,
            floor_origin: str = ROUNDING_16, top1_floor: float = tolerances.TOP1_FLOOR,
            unstable: Collection[str] = (), drawn_from: int | None = None) -> StageParity:
    """Run ``ref`` and ``out`` on each feed dict and compare every output.

    ``atol``/``rtol`` override the per-dtype defaults (a float for all outputs, or a mapping by
    output name). ``exact`` names outputs that must match exactly (e.g. class labels).
    ``defaults`` gives per-output (atol, rtol) a stage knows it needs; ``default_fn(dtype)``
    gives a backend's per-dtype defaults (e.g. fp16 compute). ``floors`` raises the default atol
    of an output to what rounding alone moves it by (16-bit rounding of the graph, or the
    source's own float32 error: ``unframe.validate.rounding``), ``floor_origin`` says which for
    the report; a user's atol still wins. A classifier-like output whose top-1 agrees on fewer
    than ``top1_floor`` of the rows fails, whatever its absolute error.

    An output that disagrees is checked against a second run of the reference on the same feed:
    one that changes between the two (random ops) has only its shape and dtype compared and is
    weak, as are the outputs named in ``unstable`` (found so at an earlier stage). A candidate
    that can't run a feed the reference ran fails the stage, naming the feed and the error
    (``run_failure``). Feeds from index ``drawn_from`` on were drawn by unframe with sizes it
    guessed: one the reference itself can't run is dropped (``dropped``), not an error.
    """
    feed_list = [feeds] if isinstance(feeds, Mapping) else list(feeds)
    result = StageParity(stage or f"{ref.name} vs {out.name}", ref.name, out.name)
    merged: dict[str, OutputParity] = {}
    seen: dict[str, list[np.ndarray]] = {}
    known = set(unstable)
    for index, feed in enumerate(feed_list):
        ref_out = _run_reference(ref, feed, index, drawn_from, result)
        if ref_out is None:
            continue
        try:
            got = out.run(feed)
        except (ResourceLimitError, UnsupportedError, KeyboardInterrupt):
            raise  # a limit, or a runtime that lacks an op (every blocker listed): typed already
        except Exception as exc:  # noqa: BLE001 - the candidate failing on a feed fails the stage
            result.status, result.run_failure = FAILED, _error_text(exc)
            result.reason = (f"{out.name} can't run input set {index + 1} of {len(feed_list)} "
                             f"({describe_feed(feed)}), which {ref.name} ran: {result.run_failure}")
            return result
        pairs, problem = _pair_outputs(ref_out, got)
        if problem:
            result.status, result.reason = FAILED, problem
            return result

        def tolerance_of(name: str, a: np.ndarray, b: np.ndarray) -> tolerances.Tolerance:
            floor = (floors or {}).get(name, 0.0) if name not in exact else 0.0
            return _tolerance(name, a, b, atol, rtol, exact, defaults, default_fn, floor)

        def slack(name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
            return _allowed(tolerance_of(name, a, b), a)

        pairs, reordered, cut = match_tied_rows(pairs, slack)
        if reordered and reordered not in result.reordered:
            result.reordered.append(reordered)
        if cut and cut not in result.cut_ties:
            result.cut_ties.append(cut)
        ops = {name: _compare_pair(name, a, b, tolerance_of(name, a, b), floor_origin)
               for name, (a, b) in pairs.items()}
        known |= _changing_outputs(ref, feed, pairs, ops, known, tolerance_of, top1_floor)
        for name, (a, b) in pairs.items():
            op = shape_only(name, a, b) if name in known else ops[name]
            seen.setdefault(name, []).append(a)
            if name in merged and (merged[name].unstable or not op.unstable):
                merged[name].merge(op)
            else:  # first seen, or first found unstable: earlier feeds' numbers no longer count
                merged[name] = op
        result.cases += 1
    result.outputs = list(merged.values())
    for o in result.outputs:
        _judge(o, seen[o.name], top1_floor, o.name in known)
    result.unstable = [o.name for o in result.outputs if o.unstable]
    bad = [o for o in result.outputs if not o.passed]
    if bad:
        result.status = FAILED
        result.reason = "; ".join(f"output {o.name!r}: {o.reason}" for o in bad)
    return result


UNSTABLE = ("the reference changes between two runs on the same input (random ops?): only its "
            "shape and dtype are compared")


def _run_reference(ref: Runner, feed: Mapping[str, np.ndarray], index: int, drawn_from: int | None,
                   result: StageParity) -> dict[str, np.ndarray] | None:
    """The reference's outputs on ``feed``; None when it is a feed unframe drew itself (from
    ``drawn_from`` on) that the reference can't run: that was unframe's guess of sizes (dims that
    must agree, a fixed-size reshape), so the feed is dropped with a note, never blamed on the
    user. The first feed (the user's samples, or the graph's declared shapes) raises as it did."""
    try:
        return ref.run(feed)
    except (ResourceLimitError, KeyboardInterrupt):
        raise
    except Exception as exc:
        if drawn_from is None or index < drawn_from:
            raise
        result.dropped.append(index)
        result.dropped_note = (f"{ref.name} can't run the input set unframe drew with other sizes "
                               f"({describe_feed(feed)}): {_error_text(exc)}; compared on the "
                               "first input set's sizes only")
        return None


def _compare_pair(name: str, a: np.ndarray, b: np.ndarray, tol: tolerances.Tolerance,
                  floor_origin: str) -> OutputParity:
    return compare_arrays(name, a, b, tol.atol, tol.rtol, of_scale=tol.of_scale, rounding=tol.floor,
                          atol_scales=tol.atol_scales, rounding_origin=floor_origin, capped=tol.capped)


def _disagrees(op: OutputParity, top1_floor: float) -> bool:
    """On one feed: beyond the tolerance, or a top-1 agreement below the floor."""
    return not op.passed or (op.top1 is not None and op.top1 < top1_floor)


def _changing_outputs(ref: Runner, feed: Mapping[str, np.ndarray],
                      pairs: dict[str, tuple[np.ndarray, np.ndarray]], ops: dict[str, OutputParity],
                      known: set[str], tolerance_of: Any, top1_floor: float) -> set[str]:
    """The outputs that disagree on this feed because the reference itself changes from run to
    run on it (random ops): found by running the reference once more, only when some output
    disagrees (a stage that passes never pays for it)."""
    failing = [n for n, op in ops.items() if _disagrees(op, top1_floor) and n not in known]
    if not failing:
        return set()
    try:
        again = ref.run(feed)
    except Exception:  # noqa: BLE001 - no second run, no evidence: the failure stands
        return set()
    again_pairs, problem = _pair_outputs(again, {n: pairs[n][0] for n in pairs})
    if problem:
        return set()
    changed = set()
    for name in failing:
        first, second = pairs[name][0], again_pairs[name][0]
        if first.shape == second.shape and _disagrees(_compare_pair(
                name, first, second, tolerance_of(name, first, first), ROUNDING_16), top1_floor):
            changed.add(name)
    return changed


def _judge(o: OutputParity, values: Sequence[np.ndarray], top1_floor: float, unstable: bool) -> None:
    """After every feed: why the output is weak, and the top-1 floor over all its rows."""
    if unstable:
        o.unstable, o.weak = True, UNSTABLE
        return
    o.weak = degenerate(values, o.allowed)
    if o.passed and o.top1 is not None and o.top1 < top1_floor:
        o.passed, o.top1_failed = False, True
        o.reason = (f"top-1 agrees on {o.top1:.0%} of {o.top1_rows} rows, below the floor of "
                    f"{top1_floor:.0%} for a classifier-like output (max abs err {o.max_abs:.3g} "
                    f"of the output scale {o.scale:.3g})")


def shape_only(name: str, ref: np.ndarray, out: np.ndarray) -> OutputParity:
    """An output whose values can't be reproduced: its shape and dtype kind still compared."""
    res = OutputParity(name, list(ref.shape), list(out.shape), _dtype_name(ref), _dtype_name(out),
                       total=int(ref.size), unstable=True)
    if ref.shape != out.shape and not (ref.size == out.size and ref.size <= 1):
        res.passed, res.reason = False, f"shape {list(out.shape)} differs from reference {list(ref.shape)}"
    elif _kind(ref) != _kind(out):
        res.passed, res.reason = False, f"dtype {res.out_dtype} differs from reference {res.ref_dtype}"
    return res


def describe_feed(feed: Mapping[str, Any]) -> str:
    """``x [3, 4], mask [3]``: a feed's input names and shapes, for a message."""
    return ", ".join(f"{k} {list(np.shape(v))}" for k, v in feed.items())


def _error_text(exc: BaseException) -> str:
    """A runner's failure in one line: the cause a typed wrapper (``Deferred``) put around it."""
    cause = exc.__cause__ if isinstance(exc, UnframeError) and exc.__cause__ is not None else exc
    return f"{type(cause).__name__}: {' '.join(str(cause).split())[:300] or type(cause).__name__}"


MAX_TIED_ROWS = 1000  # detections per image beyond which rows are not re-matched


def match_tied_rows(pairs: dict[str, tuple[np.ndarray, np.ndarray]], slack: Any
                    ) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], str, str]:
    """Detections come sorted by score, and scores that tie within the tolerance (fp16 can't tell
    0.98050 from 0.98039) may come in either order, their boxes and labels with them. For a 1-D
    float output sorted in descending order in the reference (the scores) and the outputs with
    as many rows (boxes, labels), each reference row is matched to the candidate row whose score
    is within ``slack(name, ref, out)`` of its own and whose other outputs are closest; the rows
    are then compared in that order.

    At the cut (``detections_per_img``: the last kept score) a tie decides *which* detections are
    kept, not only their order: the candidate may keep another detection whose score ties with
    the cut in place of one the reference kept. Where the cut falls inside a band of tied scores
    (the reference's last two kept scores tie), a row that still differs after matching, whose
    scores on both sides tie with the cut, is such a swap; up to ``CUT_SWAPS`` of the kept rows
    (at least one) are left uncompared and the stage is weak, saying so. More than that, or any
    other row without a counterpart, is a difference: the order is left as it is and the
    comparison says what differs, as it does for a candidate whose scores are not themselves in
    descending order (beyond the slack). Returns the pairs, a note on reordered rows and a note
    on swaps at the cut ("" when none)."""
    for name, (a, b) in pairs.items():
        if _kind(a) != "float" or a.ndim != 1 or a.shape != b.shape or not 2 <= a.size <= MAX_TIED_ROWS:
            continue
        ref = a.astype(np.float64)
        if not np.all(np.isfinite(ref)) or not np.all(np.diff(ref) <= 0):
            continue
        rows = [n for n, (x, y) in pairs.items()
                if n != name and x.ndim >= 1 and x.shape[0] == a.shape[0] and y.shape == x.shape]
        if not rows:
            continue
        allowed, out = slack(name, a, b), b.astype(np.float64)
        if not np.all(np.diff(out) <= allowed[1:]):
            continue  # the candidate's rows are not in score order: a difference, not a tie
        found = _match_rows(pairs, rows, ref, out, allowed)
        if found is None:
            return pairs, "", ""
        perm, unmatched = found
        swapped = sorted({*unmatched, *_differing_rows(pairs, rows, perm, slack)})
        crowded = ref[-2] - ref[-1] <= allowed[-2]  # the cut falls inside a band of tied scores
        tied = crowded and all(ref[i] - ref[-1] <= allowed[i] and abs(out[perm[i]] - ref[-1]) <= allowed[-1]
                               for i in swapped)
        # every kept score ties on both sides (a saturated detector: all 1.0): which detections are
        # kept is the tie's choice throughout, so any of the rows may be another one
        every = ref[0] - ref[-1] <= allowed[0] and bool(np.all(np.abs(out - ref[-1]) <= allowed))
        if swapped and (not tied or len(swapped) > (ref.size if every else max(1, int(CUT_SWAPS * ref.size)))):
            swapped = []  # not a tie at the cut: compared as they are, and it fails
            if unmatched:
                return pairs, "", ""
        k = a.shape[0]
        compared = np.ones(k, dtype=bool)
        compared[swapped] = False
        moved = int(np.count_nonzero((perm != np.arange(k)) & compared))
        if not moved and not swapped:
            return pairs, "", ""
        matched = dict(pairs)
        for n in (name, *rows):
            ours = pairs[n][1][perm].copy()
            ours[swapped] = pairs[n][0][swapped]  # another tied detection kept: nothing to compare
            matched[n] = (pairs[n][0], ours)
        names = ", ".join(repr(n) for n in (name, *rows))
        reordered = (f"{moved} of {k} rows of {names} matched across scores that tie within the "
                     "tolerance") if moved else ""
        cut = (f"{len(swapped)} of {k} rows of {names} hold another detection at the cut: scores on "
               f"both sides tie with the last one kept ({ref[-1]:.4g}) within the tolerance, so "
               "either may be kept" + ("; every kept score ties (the reference's scores are one "
                                       "value): which detections are kept is the tie's choice" if every else "")
               ) if swapped else ""
        return matched, reordered, cut
    return pairs, "", ""


CUT_SWAPS = 0.25  # the share of kept detections a tie at the cut may swap (at least one)


def _match_rows(pairs: dict[str, tuple[np.ndarray, np.ndarray]], rows: list[str], ref: np.ndarray,
                out: np.ndarray, allowed: np.ndarray) -> tuple[np.ndarray, list[int]] | None:
    """(the candidate row for each reference row, the reference rows no candidate score ties
    with, given the rows left over), or None when that leaves nothing consistent."""
    k = ref.shape[0]
    used = np.zeros(k, dtype=bool)
    perm = np.empty(k, dtype=np.int64)
    unmatched: list[int] = []
    for i in range(k):
        near = np.flatnonzero(~used & (np.abs(out - ref[i]) <= allowed[i]))
        if near.size == 0:
            unmatched.append(i)
            continue
        cost = [sum(_row_distance(pairs[r][0][i], pairs[r][1][j]) for r in rows) for j in near]
        perm[i] = near[int(np.argmin(cost))]
        used[perm[i]] = True
    perm[unmatched] = np.flatnonzero(~used)[:len(unmatched)]
    return perm, unmatched


def _differing_rows(pairs: dict[str, tuple[np.ndarray, np.ndarray]], rows: list[str], perm: np.ndarray,
                    slack: Any) -> list[int]:
    """Reference rows whose matched candidate row differs beyond the tolerance in any output."""
    bad: set[int] = set()
    for r in rows:
        x, y = pairs[r][0], pairs[r][1][perm]
        if _kind(x) in ("int", "bool", "str"):
            diff = np.asarray(x != y).reshape(x.shape[0], -1).any(axis=1)
        else:
            xf, yf = x.astype(np.float64), y.astype(np.float64)
            over = np.abs(xf - yf) > slack(r, x, y)
            diff = (over & ~(np.isnan(xf) & np.isnan(yf))).reshape(x.shape[0], -1).any(axis=1)
        bad.update(int(i) for i in np.flatnonzero(diff))
    return sorted(bad)


def _row_distance(x: np.ndarray, y: np.ndarray) -> float:
    """How unlike two rows are: any differing integer (a label) outweighs any float distance."""
    if _kind(np.asarray(x)) in ("int", "bool", "str"):
        return 1e12 * float(np.count_nonzero(np.asarray(x) != np.asarray(y)))
    diff = np.abs(np.asarray(x, dtype=np.float64) - np.asarray(y, dtype=np.float64))
    return float(np.nanmax(diff)) if diff.size else 0.0


def _allowed(tol: tolerances.Tolerance, ref: np.ndarray) -> np.ndarray:
    """The absolute difference ``tol`` allows each element of ``ref``."""
    a = np.abs(ref.astype(np.float64))
    scale = float(np.max(a[np.isfinite(a)])) if np.any(np.isfinite(a)) else 0.0
    return np.broadcast_to(tolerances.allowance(tol, a, scale), a.shape)


def degenerate(values: Sequence[np.ndarray], allowed: float = 0.0) -> str:
    """Why a float reference output proves nothing, or "" when it can tell a wrong candidate from
    a right one: near zero for its dtype, the same for every feed (or one value everywhere), not
    finite, or spread over no more than ``allowed`` (the stage's tolerance) across its elements
    and feeds: then a constant passes as well as the model (a softmax of 1/1000 + 1e-7
    everywhere). Integer, boolean and string outputs (labels) are compared exactly and never weak."""
    arrays = [np.asarray(v) for v in values]
    if not arrays or _kind(arrays[0]) != "float" or any(a.size == 0 for a in arrays):
        return ""
    # max, min, isfinite and equality are exact in numpy's own float types: no float64 copies
    wide = [a if str(a.dtype) in ("float16", "float32", "float64") else a.astype(np.float64) for a in arrays]
    if any(not np.all(np.isfinite(a)) for a in wide):
        bad = sum(int(np.count_nonzero(~np.isfinite(a))) for a in wide)
        return f"the reference is not finite ({bad} NaN/inf values)"
    scale = max(float(np.max(np.abs(a))) for a in wide)
    limit = NEAR_ZERO.get(str(arrays[0].dtype), NEAR_ZERO_DEFAULT)
    if scale <= limit:
        return f"the reference is near zero (largest |value| {scale:.2g})"
    if all(a.size > 1 and float(np.ptp(a)) == 0.0 for a in wide):
        return f"the reference is one value everywhere ({wide[0].flat[0]:.4g})"
    if len(wide) > 1 and all(a.shape == wide[0].shape and np.array_equal(a, wide[0]) for a in wide[1:]):
        return "the reference is the same for every input set"
    spread = max(float(np.max(a)) for a in wide) - min(float(np.min(a)) for a in wide)
    if sum(a.size for a in wide) > 1 and spread <= allowed:
        return (f"the reference spreads over {spread:.2g} across its elements and input sets, within "
                f"the tolerance {allowed:.2g}: a constant would pass")
    return ""


def top1_agreement(ref: np.ndarray, out: np.ndarray, name: str = "") -> float | None:
    """For classifier-like outputs ([N, classes] scores, or [N, T, vocab] logits), the share of
    rows whose argmax agrees; None for other outputs."""
    if _kind(ref) != "float" or ref.shape != out.shape or ref.size == 0:
        return None
    if not (ref.ndim == 2 or (ref.ndim == 3 and "logit" in name.lower())) or not 2 <= ref.shape[-1]:
        return None
    with np.errstate(invalid="ignore"):
        return float(np.mean(np.argmax(ref, axis=-1) == np.argmax(out, axis=-1)))


def _pair_outputs(ref: Mapping[str, np.ndarray], out: Mapping[str, np.ndarray]
                  ) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], str]:
    """Match outputs by name when the names agree, else by position (and say so on mismatch)."""
    if set(ref) == set(out):
        return {k: (as_array(ref[k]), as_array(out[k])) for k in ref}, ""
    if len(ref) != len(out):
        return {}, (f"output count differs: reference has {len(ref)} ({', '.join(ref)}), "
                    f"candidate has {len(out)} ({', '.join(out)})")
    return {rk: (as_array(ref[rk]), as_array(out[ok])) for rk, ok in zip(ref, out, strict=True)}, ""


def maps_to_matrix(value: Any) -> np.ndarray | None:
    """A sequence of ``{label: value}`` maps (ONNX ZipMap's output, or a classifier's
    per-row probability dicts) as an [N, K] float64 matrix with columns in sorted label order;
    None when ``value`` is not such a sequence."""
    if isinstance(value, np.ndarray) and (value.ndim == 0 or value.dtype != object):
        return None  # a numeric tensor (a scalar output included), not a sequence of maps
    rows = list(value) if isinstance(value, (list, tuple, np.ndarray)) else None
    if not rows or not all(isinstance(r, dict) for r in rows):
        return None
    keys = sorted(rows[0])
    if any(sorted(r) != keys for r in rows[1:]):
        return None  # ragged maps: leave them for the element-wise comparison to report
    return np.array([[float(r[k]) for k in keys] for r in rows], dtype=np.float64)


def as_array(value: Any) -> np.ndarray:
    """An output as an array for comparison: sequences of maps become matrices."""
    matrix = maps_to_matrix(value)
    return matrix if matrix is not None else np.asarray(value)


def _tolerance(name: str, a: np.ndarray, b: np.ndarray, atol: tolerances.Override,
               rtol: tolerances.Override, exact: Sequence[str],
               defaults: Mapping[str, tuple[float, float]] | None, default_fn: Any, floor: float = 0.0
               ) -> tolerances.Tolerance:
    of_scale = False
    if name in exact:
        base = (0.0, 0.0)
    elif defaults and name in defaults:
        base = defaults[name]
    else:
        base = tolerances.default_for(a.dtype, b.dtype)
        if default_fn is not None:
            backend = default_fn(b.dtype)
            if backend is not None:
                base = (max(base[0], backend[0]), max(base[1], backend[1]))
                of_scale = isinstance(backend, tolerances.Tolerance) and backend.of_scale
    user_atol, user_rtol = tolerances.given(atol, name), tolerances.given(rtol, name)
    defaulted = name not in exact and not user_atol
    return tolerances.Tolerance(tolerances.pick(atol, name, base[0]), tolerances.pick(rtol, name, base[1]),
                                of_scale, atol_scales=defaulted, floor=floor if defaulted else 0.0,
                                capped=of_scale and defaulted and not user_rtol)


def compare_arrays(name: str, ref: np.ndarray, out: np.ndarray, atol: float, rtol: float, *,
                   of_scale: bool = False, rounding: float = 0.0, atol_scales: bool = False,
                   rounding_origin: str = ROUNDING_16, capped: bool = False) -> OutputParity:
    """Element-wise comparison under ``tolerances.Tolerance(atol, rtol, of_scale, atol_scales,
    rounding, capped)`` (see ``unframe.validate.tolerances``): ``of_scale``, rtol is relative to
    the output's scale (its largest finite |value|), not to each element; ``atol_scales``, a
    default atol that follows the output's scale; ``rounding``, the atol floor that rounding
    alone needs and ``rounding_origin`` what measured it, for the report; ``capped``, a 16-bit
    default held within ``tolerances.MAX_16BIT_SHARE`` of the scale. Strings (bytes or str, any
    UTF-8) and integers are compared exactly."""
    res = OutputParity(name, list(ref.shape), list(out.shape), _dtype_name(ref), _dtype_name(out),
                       atol=atol, rtol=rtol, of_scale=of_scale, rounding=rounding,
                       rounding_origin=rounding_origin, total=int(ref.size))
    if ref.shape != out.shape:
        if ref.size == out.size and ref.size <= 1:
            out = out.reshape(ref.shape)  # scalar vs [1]: same value, harmless
        else:
            res.passed, res.reason = False, f"shape {list(out.shape)} differs from reference {list(ref.shape)}"
            return res
    kind_a, kind_b = _kind(ref), _kind(out)
    if kind_a != kind_b:
        res.passed, res.reason = False, f"dtype {res.out_dtype} differs from reference {res.ref_dtype}"
        return res
    tol = tolerances.Tolerance(atol, rtol, of_scale, atol_scales, rounding, capped)
    if kind_a in ("str", "bool", "int") or (atol == 0 and rtol == 0 and kind_a != "float"):
        eq = ref == out if kind_a != "str" else as_text(ref) == as_text(out)
        res.mismatched = int(np.size(eq) - np.count_nonzero(eq))
        if kind_a == "int" and ref.size:
            res.max_abs = float(np.max(np.abs(ref.astype(np.float64) - out.astype(np.float64))))
            res.scale = float(np.max(np.abs(ref.astype(np.float64))))
        elif kind_a != "int":
            res.max_abs = float(res.mismatched > 0)
    else:
        _compare_float(res, ref, out, tol)
        res.top1 = top1_agreement(ref, out, name)
        res.top1_rows = int(np.prod(ref.shape[:-1])) if res.top1 is not None else 0
    if res.mismatched:
        res.passed = False
        res.reason = (f"{res.mismatched} of {res.total} elements differ "
                      f"(max abs err {res.max_abs:.3g}, max rel err {res.max_rel:.3g}, "
                      f"atol {res.atol:g}, rtol {rtol:g}{_tolerance_note(res, tol)})")
    return res


def _tolerance_note(res: OutputParity, tol: tolerances.Tolerance) -> str:
    """How the allowance was read, for a failure's reason."""
    note = f" of the output scale {res.scale:.3g}" if tol.of_scale else ""
    if tol.atol_scales and tol.of_scale and res.scale < 1:
        note += f"; atol is the default times the output scale {res.scale:.3g}"
    elif tol.atol_scales and not tol.of_scale and res.scale > 1:
        note += f"; atol is the default times the output scale {res.scale:.3g}"
    if tol.floor and res.atol > tolerances.effective_atol(tol._replace(floor=0.0), res.scale):
        note += f"; atol raised to {res.atol:.3g} by {res.rounding_origin}"
    if tol.capped and res.allowed >= tolerances.MAX_16BIT_SHARE * res.scale > 0:
        note += f"; capped at {tolerances.MAX_16BIT_SHARE:.0%} of the scale (16-bit)"
    return note


def as_text(values: np.ndarray) -> np.ndarray:
    """String elements as Python str, for an exact comparison: bytes (TensorFlow's tf.string, a
    numpy ``S`` array) decoded as UTF-8, str (onnxruntime, a numpy ``U`` array) as they are.
    Bytes that are not UTF-8 are kept byte for byte (surrogate escapes), so they compare exactly
    too."""
    flat = np.asarray(values, dtype=object).reshape(-1)
    text = np.empty(flat.shape, dtype=object)
    for i, v in enumerate(flat):
        if isinstance(v, (bytes, bytearray, np.bytes_)):
            text[i] = bytes(v).decode("utf-8", errors="surrogateescape")
        else:
            text[i] = str(v)
    return text.reshape(np.shape(values))


CHUNK = 1 << 16  # elements compared at a time: the float64 temporaries stay in cache


def _compare_float(res: OutputParity, ref: np.ndarray, out: np.ndarray, tol: tolerances.Tolerance) -> None:
    """Element-wise comparison in float64, a chunk at a time (the same figures as over the
    whole arrays: maxima, counts; one pass for the scale, one for the rest). Whole 17M-element
    outputs made ~15 full-size float64 temporaries: 6 s a comparison, against 0.25 s chunked. A
    chunk whose values are all finite (the usual case) skips the NaN/inf bookkeeping; a large
    output's chunks are shared among threads (numpy works outside the GIL)."""
    a_all, b_all = ref.reshape(-1), out.reshape(-1)
    n = a_all.size
    starts = range(0, n, CHUNK)
    scale = max(_in_parts(starts, lambda part: max((_chunk_scale(a_all[i:i + CHUNK]) for i in part),
                                                   default=0.0)), default=0.0)
    if n:
        res.scale = scale
    res.atol = tolerances.effective_atol(tol, res.scale)

    def totals_of(part: Sequence[int]) -> _Totals:
        totals = _Totals()
        for start in part:
            a = a_all[start:start + CHUNK].astype(np.float64)
            b = b_all[start:start + CHUNK].astype(np.float64)
            diff = np.abs(a - b)
            if math.isfinite(float(diff.max())):  # both sides finite everywhere in the chunk
                _finite_chunk(totals, diff, np.abs(a), tol, res.scale)
            else:
                _special_chunk(totals, a, b, tol, res.scale)
        return totals

    totals = _Totals.merged(_in_parts(starts, totals_of))
    res.allowed = totals.allowed_max if n else 0.0
    res.mismatched = totals.mismatched
    if n:
        res.max_abs = totals.max_abs
        if totals.max_rel is not None:
            res.max_rel = totals.max_rel
    if totals.special:
        res.max_abs = float("inf")


def _chunk_scale(chunk: np.ndarray) -> float:
    """The largest finite |value| of a chunk of the reference."""
    top = float(np.max(np.abs(chunk))) if chunk.dtype.kind == "f" else float("nan")
    if not math.isfinite(top):  # a NaN/inf of the reference (or no native float): read in float64
        a = np.abs(chunk.astype(np.float64))
        a[~np.isfinite(a)] = 0.0  # the reference's own finite values: a candidate's inf leaves it
        top = float(a.max())
    return top


THREADED_CHUNKS = 16  # an output of this many chunks or more is compared by several threads
_POOL: list[Any] = []


def _in_parts(starts: range, work: Any) -> list[Any]:
    """``work`` on contiguous parts of ``starts``: one part in this thread for a small output,
    one per worker thread (up to 4, as many as there are CPUs) for a large one."""
    import os

    workers = min(4, os.cpu_count() or 1)
    if len(starts) < THREADED_CHUNKS or workers < 2:
        return [work(starts)]
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor

        _POOL.append(ThreadPoolExecutor(max_workers=workers, thread_name_prefix="unframe-compare"))
    size = -(-len(starts) // workers)
    parts = [starts[i:i + size] for i in range(0, len(starts), size)]
    return list(_POOL[0].map(work, parts))


@dataclass
class _Totals:
    allowed_max: float = 0.0
    max_abs: float = 0.0
    max_rel: float | None = None
    mismatched: int = 0
    special: bool = False

    def add_rel(self, rel: float) -> None:
        self.max_rel = rel if self.max_rel is None else max(self.max_rel, rel)

    @staticmethod
    def merged(parts: Sequence[_Totals]) -> _Totals:
        out = _Totals()
        for t in parts:
            out.allowed_max = max(out.allowed_max, t.allowed_max)
            out.max_abs = max(out.max_abs, t.max_abs)
            out.mismatched += t.mismatched
            out.special = out.special or t.special
            if t.max_rel is not None:
                out.add_rel(t.max_rel)
        return out


def _finite_chunk(t: _Totals, diff: np.ndarray, mag: np.ndarray, tol: tolerances.Tolerance, scale: float) -> None:
    allowed = tolerances.allowance(tol, mag, scale)
    t.allowed_max = max(t.allowed_max, float(np.max(allowed)))
    t.mismatched += int(np.count_nonzero(diff > allowed))
    t.max_abs = max(t.max_abs, float(diff.max()))
    significant = mag > 1e-6
    if significant.any():
        t.add_rel(float(np.divide(diff, mag, out=np.zeros_like(diff), where=significant).max()))


def _special_chunk(t: _Totals, a: np.ndarray, b: np.ndarray, tol: tolerances.Tolerance, scale: float) -> None:
    """A chunk with a NaN or an inf on either side: those agree only where both sides hold the
    same one; the finite elements are compared as usual."""
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    inf_a, inf_b = np.isinf(a), np.isinf(b)
    special_bad = (nan_a != nan_b) | ((inf_a | inf_b) & (a != b) & ~(nan_a & nan_b))
    finite = ~(nan_a | nan_b | inf_a | inf_b)
    diff = np.where(finite, np.abs(a - b), 0.0)
    mag = np.abs(a)
    allowed = tolerances.allowance(tol, np.where(finite, mag, 0.0), scale)
    t.allowed_max = max(t.allowed_max, float(np.max(allowed)))
    t.mismatched += int(np.count_nonzero(special_bad | (finite & (diff > allowed))))
    t.max_abs = max(t.max_abs, float(diff.max()))
    significant = finite & (mag > 1e-6)
    if np.any(significant):
        t.add_rel(float((diff[significant] / mag[significant]).max()))
    t.special = t.special or bool(np.any(special_bad))


def _kind(x: np.ndarray) -> str:
    k = x.dtype.kind
    if k == "b":
        return "bool"
    if k in "iu":
        return "int"
    if k in "fc" or str(x.dtype) == "bfloat16":
        return "float"
    if k in "USO":
        return "str"
    return k


def _dtype_name(x: np.ndarray) -> str:
    return str(x.dtype)
