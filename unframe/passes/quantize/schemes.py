"""The ``--quantize`` schemes, the request a backend reads, and the accuracy guard's thresholds.

| scheme         | weights                              | activations                         |
|----------------|--------------------------------------|-------------------------------------|
| ``int8``         | int8, per output channel             | int8, static (ranges calibrated)    |
| ``int8-dynamic`` | int8, per output channel             | int8, ranges computed at run time   |
| ``w8``           | int8, per output channel             | float                               |
| ``w4``           | int4, blocks of 32 along the input   | float                               |
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from unframe.errors import UsageError


@dataclass(frozen=True)
class Scheme:
    name: str
    weight_bits: int
    activations: str  # "static" | "dynamic" | "float"
    about: str

    @property
    def calibrated(self) -> bool:
        """Whether the scheme needs activation ranges measured on calibration inputs."""
        return self.activations == "static"


SCHEMES: dict[str, Scheme] = {s.name: s for s in (
    Scheme("int8", 8, "static", "int8 weights (per channel) and activations (static, calibrated)"),
    Scheme("int8-dynamic", 8, "dynamic", "int8 weights (per channel), activations quantized at run time"),
    Scheme("w8", 8, "float", "int8 weights (per channel), float activations"),
    Scheme("w4", 4, "float", "int4 weights in blocks of 32, float activations"),
)}


def scheme_of(name: Any) -> Scheme:
    key = str(name).strip().lower().replace("_", "-")
    if key not in SCHEMES:
        raise UsageError(f"--quantize {name}: unknown scheme", f"use one of: {', '.join(SCHEMES)}")
    return SCHEMES[key]


@dataclass(frozen=True)
class Thresholds:
    """What the quantized artifact must keep of the float model's answers on held-out inputs:
    top-1 agreement of classifier-like outputs (a last axis of scores), the score-weighted share
    of a detector's detections found on both sides (``validate.detections``) and cosine
    similarity of every other float output; for a decoder (``input_ids`` in, ``logits`` out),
    greedy tokens and perplexity instead.
    ``--accuracy top1=0.99,cos=0.995,det=0.9,tokens=0.9,ppl=0.05`` overrides them."""

    top1: float = 0.98
    cos: float = 0.99
    det: float = 0.9  # detectors: the score-weighted share of detections matched (same label, IoU >= 0.5)
    tokens: float = 0.9  # decoders: the share of 32 greedy tokens identical from the start
    ppl: float = 0.05  # decoders: the largest rise of perplexity on the held-out sequences

    def describe(self, decoder: bool = False, detections: bool = False) -> str:
        if decoder:
            return f"greedy tokens >= {self.tokens:.0%}, perplexity within +{self.ppl:.0%}"
        return f"top-1 >= {self.top1:.0%}, cosine >= {self.cos:g}" + (
            f", detections found >= {self.det:.0%}" if detections else "")


def parse_accuracy(spec: Any) -> Thresholds:
    """``"top1=0.99,cos=0.995"``, a dict, or None (the defaults)."""
    if spec is None or isinstance(spec, Thresholds):
        return spec or Thresholds()
    items = spec.items() if isinstance(spec, dict) else (
        part.split("=", 1) for part in str(spec).split(",") if part.strip())
    values: dict[str, float] = {}
    for item in items:
        try:
            key, raw = item
            values[str(key).strip().lower()] = float(raw)
        except ValueError:
            raise UsageError(f"--accuracy {spec}: expected name=value pairs",
                             "e.g. --accuracy top1=0.99,cos=0.995") from None
    unknown = set(values) - {"top1", "cos", "det", "tokens", "ppl"}
    if unknown:
        raise UsageError(f"--accuracy: unknown measure {', '.join(sorted(unknown))}",
                         "use top1, cos (classifiers and tensors), det (detectors), tokens, ppl (decoders)")
    if any(not 0.0 <= v <= 1.0 for v in values.values()):
        raise UsageError(f"--accuracy {spec}: thresholds lie between 0 and 1", "e.g. top1=0.99")
    return Thresholds(**values)


@dataclass
class QuantRequest:
    """What a backend reads from ``target.options["quantize"]``: the scheme, the calibration
    input sets (feeds by the model's input names; none for weight-only schemes), where they came
    from, and the nodes (ONNX node names) to keep in float, chosen by the sensitivity pass."""

    scheme: Scheme
    calibration: list[dict[str, Any]] = field(default_factory=list)
    origin: str = ""  # "24 sets from calib.npz", "32 sets drawn by unframe"
    drawn: bool = False
    exclude: tuple[str, ...] = ()
    # "" = the backend's own quantizer; else another it can use (``Backend.other_quantizers``),
    # tried when its own artifact failed the accuracy guard
    quantizer: str = ""

    def describe(self) -> str:
        text = self.scheme.name
        if self.quantizer:
            text += f" by {self.quantizer}"
        if self.scheme.calibrated:
            text += f", calibrated on {self.origin}"
        if self.exclude:
            text += f", {len(self.exclude)} layer(s) kept in float"
        return text
