"""Tiny facts the spine needs before the full ``unframe.opset`` package is loaded."""

from __future__ import annotations

import functools


@functools.cache
def newest_known_opset() -> int:
    import onnx.defs

    return int(onnx.defs.onnx_opset_version())


def model_opset(opset_imports: dict[str, int], domain: str = "") -> int | None:
    if domain == "":
        return opset_imports.get("", opset_imports.get("ai.onnx"))
    return opset_imports.get(domain)
