"""The Runner protocol: anything that turns named numpy inputs into named numpy outputs.

Every stage of a route has a runner (the source framework, onnxruntime on an ONNX graph, the
MIL evaluator on a saved CoreML package, a TensorRT engine) so that ``compare()`` can check each
stage's numbers against the stage before it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from unframe import timing


@dataclass(frozen=True)
class TensorSpec:
    """Name, shape and dtype of one model input or output.

    ``shape`` entries are ints for fixed dims, strings for named dynamic dims, None for unknown.
    ``dtype`` is a numpy dtype name ("float32", "int64", "bool", "str", ...).
    """

    name: str
    shape: tuple[int | str | None, ...] | None
    dtype: str

    @property
    def is_dynamic(self) -> bool:
        return self.shape is None or any(not isinstance(d, int) for d in self.shape)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": None if self.shape is None else list(self.shape),
                "dtype": self.dtype}


class Runner(ABC):
    """Runs one stage's model. Subclasses set ``name`` (e.g. "onnxruntime 1.31.1").

    A runner's ``run`` is its runtime's own time (``unframe.timing``): each subclass that defines
    ``run`` has it timed as a tool block named after the runner. A runner that only wraps another
    (built on first use, remembered outputs, a recording) sets ``timed = False``: the one it
    wraps is timed."""

    name: str = "runner"
    timed: bool = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        run = cls.__dict__.get("run")
        if run is not None and cls.__dict__.get("timed", True) and not getattr(run, "__unframe_timed__", False):
            cls.run = timing.timed_as(lambda self: str(self.name))(run)  # type: ignore[method-assign]

    def input_specs(self) -> list[TensorSpec] | None:
        """Inputs this runner expects, when it knows them."""
        return None

    def output_names(self) -> list[str] | None:
        return None

    @abstractmethod
    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once. Returns outputs by name, in the model's output order."""

    def close(self) -> None:  # noqa: B027  # pragma: no cover - most runners hold nothing
        pass
