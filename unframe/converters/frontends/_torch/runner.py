"""Torch eager as a parity runner: ONNX-named numpy feeds in, ONNX-named numpy outputs out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from unframe.converters.frontends._torch.inputs import ModelInputs, numpy_of, tensor_of
from unframe.errors import InputError
from unframe.validate.runner import Runner, TensorSpec


def callable_of(native: Any) -> Any:
    """What to call: ExportedPrograms run through their ``module()``."""
    import torch

    if isinstance(native, torch.export.ExportedProgram):
        return native.module()
    return native


def device_of(fn: Any) -> Any:
    """Where the module's weights live (None: no weights, or not a module)."""
    import torch

    if not isinstance(fn, torch.nn.Module):
        return None
    for t in [*fn.parameters(), *fn.buffers()]:
        return t.device
    return None


def run_model(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], what: str) -> Any:
    import torch

    try:
        with torch.no_grad():
            return fn(*args, **kwargs)
    except Exception as exc:
        from unframe.converters.frontends._torch.sources import first_line

        raise InputError(f"running {what} on the sample inputs failed: {first_line(exc)}",
                         "check the sample inputs' shapes and dtypes against the model") from exc


def flat_outputs(outputs: Any) -> list[Any]:
    import torch
    import torch.utils._pytree as pytree

    return [x for x in pytree.tree_leaves(outputs) if isinstance(x, torch.Tensor)]


class TorchRunner(Runner):
    def __init__(self, native: Any, inputs: ModelInputs, outputs: list[str], what: str) -> None:
        import torch

        self.name = f"torch {torch.__version__} eager"
        self._fn = callable_of(native)
        self._device = device_of(self._fn)  # a model on CUDA runs there, unmoved
        self._inputs = inputs
        self._outputs = outputs
        self._what = what

    def input_specs(self) -> list[TensorSpec]:
        return [TensorSpec(n, tuple(int(d) for d in t.shape), str(t.dtype).removeprefix("torch."))
                for n, t in zip(self._inputs.names, self._inputs.tensor_leaves(), strict=True)]

    def output_names(self) -> list[str]:
        return list(self._outputs)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:

        tensors = {n: tensor_of(feeds[n], self._device) for n in self._inputs.names}
        args, kwargs = self._inputs.rebuild(tensors)
        outs = flat_outputs(run_model(self._fn, args, kwargs, self._what))
        return {n: numpy_of(t) for n, t in zip(self._outputs, outs, strict=True)}
