"""MILRunner: evaluate a saved .mlpackage / ML Program .mlmodel with the numpy MIL evaluator.

The package is read back with coremltools' own milproto loader, weights included, so what is
checked is the artifact that ships (after coremltools' passes), not the program in memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from unframe.converters.backends.coreml.mil_eval._ct import import_coremltools
from unframe.converters.backends.coreml.mil_eval.evaluator import evaluate, is_state, numpy_dtype
from unframe.converters.backends.coreml.mil_eval.registry import KernelError
from unframe.errors import InputError
from unframe.validate.runner import Runner, TensorSpec

SANDBOX = "coremltools"


def load_program(source: str | Path | Any, *, vouched: bool = False) -> Any:
    """A coremltools MIL Program from a .mlpackage path, an .mlmodel path or an MLModel.

    A file unframe didn't just write (``vouched``) is opened in a child process first: the
    package reader and the weight-blob reader are native code a malformed file can crash."""
    if isinstance(source, (str, Path)) and not vouched:
        probe_foreign(Path(source))
    ct = _coremltools()
    from coremltools.converters.mil.frontend.milproto.load import load as milproto_load

    model = source if isinstance(source, ct.models.MLModel) else _open_model(ct, Path(source))
    spec = model.get_spec()
    if spec.WhichOneof("Type") != "mlProgram":
        raise InputError(f"{_describe(source)} is a neural network model, not an ML Program",
                         "the MIL evaluator reads ML Programs (convert_to='mlprogram')")
    weights_dir = model.weights_dir if model.is_package else ""
    try:
        return milproto_load(spec, spec.specificationVersion, weights_dir or "")
    except Exception as exc:
        raise InputError(f"coremltools could not load the MIL program of {_describe(source)}: "
                         f"{type(exc).__name__}: {exc}", "check the package is complete") from exc


def probe_foreign(path: Path) -> None:
    """Load the program (weights included) in the coremltools child; a crash is a typed error."""
    from unframe import archives, limits, sandbox

    if not path.exists():
        raise InputError(f"{path} does not exist", "give the path of a .mlpackage or .mlmodel")
    if path.is_dir():
        archives.check_folder(path, "Core ML package")
    sandbox.call(SANDBOX, _load_in_child, path, limits.max_memory(), what=f"coremltools on {path.name}",
                 timeout=read_timeout(path), preload=preload_coremltools, crash_error=InputError,
                 hint="the package is malformed; convert it again")


def read_timeout(path: Path) -> float:
    """Seconds coremltools gets to read a package (once imported): a few, plus 20 MB/s."""
    files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
    return 10.0 + sum(p.stat().st_size for p in files) / 20e6


def preload_coremltools() -> None:
    """(In the child, before a timed call.) coremltools' import is not the reader's time."""
    import_coremltools()


def _load_in_child(path: Path, budget: int) -> None:
    """(In the child.) What ``load_program`` does in the parent."""
    from unframe import limits

    with limits.memory_budget(budget):
        load_program(path, vouched=True)


def _open_model(ct: Any, path: Path) -> Any:
    if not path.exists():
        raise InputError(f"{path} does not exist", "give the path of a .mlpackage or .mlmodel")
    try:
        return ct.models.MLModel(str(path), skip_model_load=True)
    except Exception as exc:
        raise InputError(f"{path} is not a readable Core ML model: {type(exc).__name__}: {exc}",
                         "check the file is a complete .mlpackage or .mlmodel") from exc


def _describe(source: Any) -> str:
    return str(source) if isinstance(source, (str, Path)) else type(source).__name__


def _coremltools() -> Any:
    return import_coremltools()


class MILRunner(Runner):
    """Runs a Core ML ML Program on the numpy MIL evaluator (the only way to run one on Linux)."""

    def __init__(self, source: str | Path | Any, function: str = "main", *, vouched: bool = False) -> None:
        """``vouched``: ``source`` is a package unframe just wrote (not probed in a child first)."""
        self.program = load_program(source, vouched=vouched)
        self.vouched = vouched
        ct = _coremltools()
        self.source = source
        self.function = function
        if function not in self.program.functions:
            raise InputError(f"{_describe(source)} has no function {function!r}",
                             f"functions: {', '.join(self.program.functions)}")
        self.name = f"MIL evaluator (coremltools {ct.__version__})"
        self.ops_evaluated: set[str] = set()
        # the function's states (iOS18), kept from call to call as Core ML's MLState keeps them
        self.states: dict[str, np.ndarray] = {}

    @property
    def _function(self) -> Any:
        return self.program.functions[self.function]

    def input_specs(self) -> list[TensorSpec]:
        return [TensorSpec(name, _shape(var), np.dtype(numpy_dtype(var.dtype)).name)
                for name, var in self._function.inputs.items() if not is_state(var)]

    def output_names(self) -> list[str]:
        return [var.name for var in self._function.outputs]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            return evaluate(self.program, dict(feeds), self.function, record=self.ops_evaluated,
                            states=self.states)
        except KernelError as exc:
            if self.vouched:  # a program unframe wrote: the evaluator's own failure
                raise
            # a foreign package whose op values contradict each other (a softmax axis that is
            # an array, found by the mil_eval campaign): the package's problem, said as such
            raise InputError(f"{_describe(self.source)}: its program can't be evaluated ({exc})",
                             "the package is malformed, or uses an op in a way the MIL evaluator "
                             "doesn't take; re-export it, or report it") from exc


def _shape(var: Any) -> tuple[int | str | None, ...] | None:
    if var.shape is None:
        return None
    return tuple(int(d) if isinstance(d, (int, np.integer)) else str(d) for d in var.shape)
