"""The registries of frontends and backends. Built-ins are listed here; third parties use the
entry-point groups ``unframe.frontends`` and ``unframe.backends`` (the object is a Frontend or
Backend subclass or instance, registered under its ``name``)."""

from __future__ import annotations

from typing import Any, TypeVar

from unframe.converters.base import Backend, Frontend
from unframe.registry import Registry

FRONTENDS: Registry[Frontend] = Registry(
    "frontend",
    entry_point_group="unframe.frontends",
    builtins=[
        "unframe.converters.frontends.onnx",
        "unframe.converters.frontends.torch",
        "unframe.converters.frontends.tensorflow",
        "unframe.converters.frontends.sklearn",
    ],
    coerce=lambda obj: instance(obj),
)
BACKENDS: Registry[Backend] = Registry(
    "backend",
    entry_point_group="unframe.backends",
    builtins=[
        "unframe.converters.backends.onnx",
        "unframe.converters.backends.coreml.backend",
        "unframe.converters.backends.tensorrt.backend",
        "unframe.converters.backends.openvino.backend",
        "unframe.converters.backends.litert.backend",
        "unframe.converters.backends.executorch.backend",
    ],
    coerce=lambda obj: instance(obj),
)

C = TypeVar("C", bound=type)


def register_frontend(cls: C) -> C:
    FRONTENDS.register(cls.name, cls())
    return cls


def register_backend(cls: C) -> C:
    BACKENDS.register(cls.name, cls())
    return cls


def instance(obj: Any) -> Any:
    """Entry points may name a class or an instance."""
    return obj() if isinstance(obj, type) else obj
