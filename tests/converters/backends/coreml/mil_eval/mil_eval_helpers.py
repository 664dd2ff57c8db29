"""Helpers for the MIL evaluator tests: build one-op programs with coremltools' builder, run them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from unframe.converters.backends.coreml.mil_eval._ct import import_coremltools
from unframe.errors import MissingExtraError

try:
    ct = import_coremltools()
except MissingExtraError:
    pytest.skip("needs coremltools (the 'coreml' extra)", allow_module_level=True)
from coremltools.converters.mil import Builder as mb  # noqa: E402

from unframe.converters.backends.coreml.mil_eval import evaluate  # noqa: E402

TARGETS = {15: ct.target.iOS15, 16: ct.target.iOS16, 17: ct.target.iOS17, 18: ct.target.iOS18}


def flat(outputs: Any) -> tuple[Any, ...]:
    if isinstance(outputs, (list, tuple)):
        return tuple(v for o in outputs for v in flat(o))
    return (outputs,)


def build(body: Callable[..., Any], specs: Sequence[tuple[tuple[int, ...], Any]] = (),
          opset: int = 17) -> Any:
    """A one-function program: ``body(*placeholders)`` returns its output var(s)."""
    from coremltools.converters.mil.mil import Function, Program

    placeholders = {f"x{i}": mb.TensorSpec(shape=shape, dtype=dtype) for i, (shape, dtype) in enumerate(specs)}
    with Function(placeholders, opset_version=TARGETS[opset]) as func:
        func.set_outputs(list(flat(body(*[func.inputs[k] for k in placeholders]))))
    prog = Program()
    prog.add_function("main", func)
    return prog


def run(prog: Any, feeds: dict[str, np.ndarray] | None = None) -> tuple[list[np.ndarray], set[str]]:
    """Outputs in program order and the op types the evaluator ran."""
    seen: set[str] = set()
    out = evaluate(prog, feeds or {}, record=seen)
    return list(out.values()), seen


def input_names(prog: Any) -> list[str]:
    return list(prog.functions["main"].inputs)
