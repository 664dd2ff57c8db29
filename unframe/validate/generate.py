"""Token-level parity for decoders: greedy generation run on both sides of a stage.

Tensor parity on one feed says little about a language model: an error well inside the logits'
tolerance can still flip a near-tie and send generation elsewhere. For a graph that looks like a
decoder (an ``input_ids`` input and a ``logits`` output), each parity stage also runs greedy
generation from the same prompt on its reference and its candidate and compares the tokens:

- with a KV cache (``past_key_values.{i}.key|value`` in, ``present.{i}.key|value`` out): a prefill
  of the prompt from an empty cache, then one token per step with the cache fed back;
- without one: the whole sequence again at every step.

Every step records the reference's top-1 margin (its best logit minus the second best). A token
that differs where the reference's margin is wider than what the logits' tolerance allows both
sides to move (``2 * (atol + rtol * |logit|)``) fails the stage; a difference at a narrower
margin is a tie the tolerance admits: generation is compared up to it and the stage says so
(weak). The prompt is the first feed's ``input_ids`` row (its attended tokens), so the prefill's
logits are the "logits on a fixed prompt" and are compared within the stage's tolerance too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from unframe.validate.runner import Runner
from unframe.validate.tolerances import Tolerance

PAST_PREFIX, PRESENT_PREFIX = "past_key_values.", "present."
DEFAULT_STEPS = 32  # greedy tokens compared (the prefill's token and then one per decode step)


@dataclass(frozen=True)
class DecoderSignature:
    """How to drive a decoder graph, read from its input and output names."""

    logits: str
    attention_mask: str | None
    position_ids: str | None
    cache: tuple[tuple[str, str], ...]  # (past input, present output) pairs

    @classmethod
    def of(cls, inputs: list[str], outputs: list[str]) -> DecoderSignature | None:
        if "input_ids" not in inputs or "logits" not in outputs:
            return None
        past = [n for n in inputs if n.startswith(PAST_PREFIX)]
        pairs = tuple((p, PRESENT_PREFIX + p[len(PAST_PREFIX):]) for p in past)
        if any(present not in outputs for _, present in pairs):
            return None  # a cache in without the same cache out: not a decoder we can drive
        known = {"input_ids", "attention_mask", "position_ids", *past}
        if any(n not in known for n in inputs):
            return None  # other inputs (pixel values, encoder states): no prompt to build
        return cls("logits", "attention_mask" if "attention_mask" in inputs else None,
                   "position_ids" if "position_ids" in inputs else None, pairs)


@dataclass
class Generation:
    tokens: list[int] = field(default_factory=list)
    margins: list[float] = field(default_factory=list)  # top-1 minus top-2 logit per step
    scales: list[float] = field(default_factory=list)  # largest |logit| per step
    prefill_logits: np.ndarray | None = None


@dataclass
class GenerationParity:
    """Greedy tokens of both sides of a stage, and the margins that make the check meaningful."""

    steps: int
    cached: bool  # run with the KV cache (prefill + decode steps) or by recomputing
    prompt_tokens: int = 0
    identical: int = 0  # leading tokens that agree
    reference_tokens: list[int] = field(default_factory=list)
    candidate_tokens: list[int] = field(default_factory=list)
    min_margin: float = 0.0  # the reference's smallest top-1 margin over the compared steps
    tie_tolerance: float = 0.0  # the largest margin the logits' tolerance could flip
    decisive: int = 0  # compared steps whose margin is wider than their tolerance could flip
    prefill_max_abs: float = 0.0  # prefill logits, candidate vs reference
    prefill_tolerance: float = 0.0
    status: str = "passed"  # passed | failed | tie (weak: a near-tie was flipped)
    reason: str = ""

    def __bool__(self) -> bool:
        return self.status != "failed"

    def summary(self) -> str:
        how = (f"prefill + {self.steps - 1} decode steps with the KV cache" if self.cached
               else f"{self.steps} steps recomputing the sequence")
        text = (f"greedy {self.identical}/{self.steps} tokens identical ({how}), smallest top-1 "
                f"margin {self.min_margin:.3g} (ties below {self.tie_tolerance:.2g}; "
                f"{self.decisive} steps decisive), prefill "
                f"logits max abs err {self.prefill_max_abs:.3g}")
        return text + (f"; {self.reason}" if self.reason else "")


def greedy(runner: Runner, sig: DecoderSignature, prompt: np.ndarray, steps: int,
           cache_template: dict[str, tuple[tuple[int, ...], np.dtype]]) -> Generation:
    """``steps`` greedy tokens after ``prompt`` (1-D token ids), on any runner."""
    out = Generation()
    sequence = [int(t) for t in prompt]
    cache = {p: np.zeros(shape, dtype) for p, (shape, dtype) in cache_template.items()}
    new = list(sequence)
    for _ in range(steps):
        feeds = _feeds(sig, sequence, new, cache)
        result = runner.run(feeds)
        logits = np.asarray(result[sig.logits], dtype=np.float64)[0, -1]
        if out.prefill_logits is None:
            out.prefill_logits = np.asarray(result[sig.logits], dtype=np.float64)
        token, margin = _top1(logits)
        out.tokens.append(token)
        out.margins.append(margin)
        out.scales.append(float(np.max(np.abs(logits))))
        sequence.append(token)
        if sig.cache:
            cache = {past: np.asarray(result[present]) for past, present in sig.cache}
            new = [token]
        else:
            new = list(sequence)
    return out


def _feeds(sig: DecoderSignature, sequence: list[int], new: list[int],
           cache: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One step's inputs: the new tokens, a mask over everything seen, their positions."""
    attended = len(sequence) if sig.cache else len(new)
    feeds: dict[str, np.ndarray] = {"input_ids": np.array([new], dtype=np.int64)}
    if sig.attention_mask:
        feeds[sig.attention_mask] = np.ones((1, attended), dtype=np.int64)
    if sig.position_ids:
        start = attended - len(new)
        feeds[sig.position_ids] = np.arange(start, attended, dtype=np.int64)[None]
    feeds.update(cache)
    return feeds


def _top1(logits: np.ndarray) -> tuple[int, float]:
    order = np.argsort(logits)[::-1]
    margin = float(logits[order[0]] - logits[order[1]]) if logits.size > 1 else float("inf")
    return int(order[0]), margin


def prompt_of(feed: dict[str, np.ndarray]) -> np.ndarray:
    """The first row's attended tokens (padding left out); the whole row when its mask attends
    to none (a drawn feed's mask can be all zeros: an empty prompt can't be run)."""
    ids = np.asarray(feed["input_ids"])[0]
    mask = feed.get("attention_mask")
    if mask is not None and np.asarray(mask).shape[-1] == ids.shape[-1]:
        attended = ids[np.asarray(mask)[0] != 0]
        ids = attended if attended.size else ids
    return ids.astype(np.int64)


def cache_template(sig: DecoderSignature, feed: dict[str, np.ndarray]
                   ) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """An empty cache for one sequence, shaped and typed like the feed's: [1, heads, 0, dim]."""
    template = {}
    for past, _ in sig.cache:
        value = np.asarray(feed[past])
        shape = (1, *value.shape[1:])
        template[past] = (shape[:2] + (0,) + shape[3:], value.dtype)
    return template


def compare_generation(ref: Runner, cand: Runner, sig: DecoderSignature, feed: dict[str, np.ndarray],
                       steps: int, tolerance: tuple[float, float] | Tolerance) -> GenerationParity:
    """Greedy generation on both runners from the feed's prompt; see the module docstring. A
    ``Tolerance`` whose rtol is of the scale (16-bit compute) holds the prefill logits to
    ``atol + rtol * scale``, the scale being their largest |value|."""
    atol, rtol = tolerance[0], tolerance[1]
    of_scale = isinstance(tolerance, Tolerance) and tolerance.of_scale
    prompt = prompt_of(feed)
    template = cache_template(sig, feed)
    a = greedy(ref, sig, prompt, steps, template)
    b = greedy(cand, sig, prompt, steps, template)
    result = GenerationParity(steps, bool(sig.cache), int(prompt.size),
                              reference_tokens=a.tokens, candidate_tokens=b.tokens)
    assert a.prefill_logits is not None and b.prefill_logits is not None
    if a.prefill_logits.shape == b.prefill_logits.shape:
        diff = np.abs(a.prefill_logits - b.prefill_logits)
        mag = np.abs(a.prefill_logits)
        allowed = atol + rtol * (np.where(np.isfinite(mag), mag, 0.0).max() if of_scale else mag)
        allowed = np.broadcast_to(allowed, mag.shape)
        result.prefill_max_abs = float(diff.max())
        result.prefill_tolerance = float(allowed.max())
        if np.any(diff > allowed):
            result.status = "failed"
            result.reason = (f"prefill logits differ by up to {result.prefill_max_abs:.3g} "
                             f"(atol {atol:g}, rtol {rtol:g})")
    else:
        result.status = "failed"
        result.reason = (f"prefill logits shape {list(b.prefill_logits.shape)} differs from "
                         f"{list(a.prefill_logits.shape)}")
    _compare_tokens(result, a, atol, rtol)
    return result


def _compare_tokens(result: GenerationParity, a: Generation, atol: float, rtol: float) -> None:
    ties = [2 * (atol + rtol * s) for s in a.scales]
    result.tie_tolerance = max(ties, default=0.0)
    mismatch = next((i for i, (x, y) in enumerate(zip(a.tokens, result.candidate_tokens,
                                                      strict=True)) if x != y), None)
    compared = len(a.tokens) if mismatch is None else mismatch + 1
    result.identical = compared if mismatch is None else mismatch
    result.min_margin = min(a.margins[:compared], default=0.0)
    result.decisive = sum(m > t for m, t in zip(a.margins[:compared], ties[:compared], strict=True))
    if mismatch is None:
        return
    margin = a.margins[mismatch]
    where = (f"token {mismatch + 1} differs ({result.candidate_tokens[mismatch]} instead of "
             f"{a.tokens[mismatch]}) where the reference's top-1 margin is {margin:.3g}")
    if margin > ties[mismatch]:
        result.status = "failed"
        result.reason = "; ".join(r for r in (result.reason, where + f", wider than the "
                                  f"tolerance could flip ({ties[mismatch]:.2g})") if r)
    elif result.status != "failed":
        result.status = "tie"
        result.reason = where + f", a tie within the logits' tolerance ({ties[mismatch]:.2g}): " \
            "compared up to it"
