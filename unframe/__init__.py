"""unframe: one hub for converting trained models, checked at every stage.

The public API is loaded lazily so that ``import unframe`` imports no framework.

    unframe.convert(model, to="onnx", sample_inputs=x, output="model.onnx")
    unframe.convert_opset("model.onnx", 21, output="model21.onnx")
    unframe.check("model.onnx", to="coreml")
    unframe.compare("model.onnx", "model.mlpackage", intermediates=True)
    unframe.load("model.onnx"); unframe.save(model, "out.onnx")
"""

from __future__ import annotations

from typing import Any

__all__ = ["convert", "convert_opset", "check", "compare", "load", "save", "__version__"]


def _version() -> str:
    from unframe.distributions import dist_version

    return dist_version("unframe") or "0.0.0+unknown"


def __getattr__(name: str) -> Any:
    if name in ("convert", "convert_opset", "check", "compare", "load", "save"):
        from unframe import api

        return getattr(api, name)
    if name == "__version__":
        return _version()
    raise AttributeError(f"module 'unframe' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
