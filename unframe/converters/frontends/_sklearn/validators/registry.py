"""The registry of skops type validators (``@validates``), which the family modules import.

Apart from the package's ``__init__`` (``load_validated``, which looks validators up), so that a
family module never imports the code that loads it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from unframe.converters.frontends._sklearn.validators._skops import Invalid, require
from unframe.registry import Registry

__all__ = ["CRAFTED_HINT", "VALIDATORS", "Invalid", "Validator", "require", "validates"]

CheckFn = Callable[[Any], None]

_FAMILIES = ("trees", "neighbors", "boosters", "plain")

CRAFTED_HINT = ("the file is damaged or was crafted; re-save the fitted model with "
                "skops.io.dump")


@dataclass(frozen=True)
class Validator:
    type_name: str
    loaders: tuple[str, ...]  # the skops node kinds this type may be stored as
    check: CheckFn
    many: bool = False  # check takes every node of the type in the file at once (vectorized)

    @property
    def summary(self) -> str:
        """What the validator checks: its docstring's first paragraph, one line."""
        doc = inspect.getdoc(self.check) or ""
        return " ".join(doc.split("\n\n")[0].split())


VALIDATORS: Registry[Validator] = Registry(
    "skops type validator",
    builtins=[f"unframe.converters.frontends._sklearn.validators.{f}" for f in _FAMILIES])


def validates(*type_names: str, loaders: tuple[str, ...] = ("ObjectNode",), many: bool = False
              ) -> Callable[[CheckFn], CheckFn]:
    """Register ``fn(node)`` as the validator of each fully qualified type name; with ``many``,
    ``fn(nodes)`` gets all of them at once and marks a failure's node with ``Invalid.index``."""

    def deco(fn: CheckFn) -> CheckFn:
        for name in type_names:
            VALIDATORS.register(name, Validator(name, loaders, fn, many))
        return fn

    return deco
