"""Parsing of the CLI's compact option syntaxes into the values the stages take."""

from __future__ import annotations

from typing import Any

from unframe import limits
from unframe.errors import UsageError


def tolerance(values: tuple[str, ...], flag: str) -> float | dict[str, float] | None:
    """``--atol 1e-3`` (all outputs) and/or ``--atol name=1e-3`` (one output)."""
    if not values:
        return None
    default: float | None = None
    per: dict[str, float] = {}
    for v in values:
        name, sep, num = v.rpartition("=")
        try:
            x = float(num)
        except ValueError:
            raise UsageError(f"bad {flag} value {v!r}", f"use {flag} 1e-3 or {flag} OUTPUT=1e-3") from None
        if sep:
            per[name] = x
        else:
            default = x
    if not per:
        return default

    class _PerOutput(dict):  # falls back to the global value for unnamed outputs
        def get(self, key: str, fallback: Any = None) -> Any:
            return super().get(key, default if default is not None else fallback)

    return _PerOutput(per)


def shape(text: str, flag: str) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        raise UsageError(f"bad shape {text!r} in {flag}", "write shapes like 1x3x224x224") from None


def dynamic_axis(text: str) -> tuple[str, int, str | None]:
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[1].lstrip("-").isdigit():
        raise UsageError(f"bad --dynamic {text!r}", "use --dynamic NAME:AXIS[:DIMNAME]")
    return parts[0], int(parts[1]), parts[2] if len(parts) == 3 else None


def profile(text: str) -> tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    parts = text.split(":")
    if len(parts) != 4:
        raise UsageError(f"bad --shapes {text!r}", "use --shapes NAME:MIN:OPT:MAX, e.g. x:1x3x64x64:4x3x64x64:8x3x64x64")
    return parts[0], shape(parts[1], "--shapes"), shape(parts[2], "--shapes"), shape(parts[3], "--shapes")


def dim_range(text: str) -> tuple[str, int, int]:
    parts = text.split(":")
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit() or int(parts[1]) > int(parts[2]):
        raise UsageError(f"bad --dim {text!r}", "use --dim NAME:MIN:MAX with MIN <= MAX")
    return parts[0], int(parts[1]), int(parts[2])


def enumerated(values: tuple[str, ...]) -> dict[str, list[tuple[int, ...]]]:
    """``--enumerated NAME:SHAPE,SHAPE...`` (repeatable), e.g. ``x:1x3x224x224,1x3x320x320``."""
    out: dict[str, list[tuple[int, ...]]] = {}
    for text in values:
        name, _, shapes = text.rpartition(":")
        try:
            parsed = [tuple(int(d) for d in s.split("x")) for s in shapes.split(",")]
        except ValueError:
            parsed = []
        if not name or not parsed or any(d <= 0 for s in parsed for d in s):
            raise UsageError(f"bad --enumerated {text!r}",
                             "use --enumerated NAME:SHAPE,SHAPE with shapes like 1x3x224x224")
        out.setdefault(name, []).extend(parsed)
    return out


def size(text: str) -> int:
    return limits.size_of(text)


def stage_options(raw: dict[str, Any]) -> dict[str, Any]:
    """The stage-specific CLI options, parsed, with unset ones dropped."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None or value == () or value is False:
            continue
        if key == "deploy_target":
            out["target"] = value
        elif key == "dims":
            out["dims"] = [dim_range(v) for v in value]
        elif key == "enumerated":
            out["enumerated"] = enumerated(value)
        elif key == "shapes":
            out["shapes"] = [profile(v) for v in value]
        elif key in ("workspace", "max_memory"):
            out[key] = size(value)
        elif key == "bias":
            out["bias"] = [float(b) for b in value.split(",")]
        else:
            out[key] = value
    return out
