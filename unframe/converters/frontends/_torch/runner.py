"""Torch eager as a parity runner: ONNX-named numpy feeds in, ONNX-named numpy outputs out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from unframe import timing
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
    out, exc = try_model(fn, args, kwargs)
    if exc is not None:
        from unframe.converters.frontends._torch.sources import first_line

        raise InputError(f"running {what} on the sample inputs failed: {first_line(exc)}",
                         "check the sample inputs' shapes and dtypes against the model") from exc
    return out


def try_model(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Exception | None]:
    """The model's outputs on these inputs, or the exception it raised (for a caller that
    decides whose fault it is: the user's samples, or a probe unframe drew)."""
    import torch

    from unframe.converters.frontends._torch.preserve import full_float32

    try:  # full float32 again here: torch.export's own save and restore of the flags can undo it
        with torch.no_grad(), full_float32(), timing.tool(f"torch {torch.__version__} eager"):
            return fn(*args, **kwargs), None
    except Exception as exc:  # noqa: BLE001 - handed to the caller
        return None, exc


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
        self.widen = False  # float feeds go in as float64 (a float64 copy of the model)
        self._known: list[tuple[dict[str, np.ndarray], list[np.ndarray]]] = []
        # floating inputs the model takes in another dtype than the graph (a bfloat16 model
        # exported in float32 for a runtime that holds no bfloat16): cast on the way in
        self._dtypes = {n: t.dtype for n, t in zip(inputs.names, inputs.tensor_leaves(), strict=True)
                        if t.dtype.is_floating_point}
        # complex inputs travel as torch.onnx's graph takes them: (..., 2) real (``numpy_of``)
        self._complex = {n for n, t in zip(inputs.names, inputs.tensor_leaves(), strict=True) if t.is_complex()}

    def remember(self, feeds: Mapping[str, np.ndarray], outputs: list[np.ndarray]) -> None:
        """The outputs of a run the frontend already made on ``feeds`` (its eager runs on the
        samples and on the batch probe): the first ``run`` on those very feeds returns them
        instead of running again (once each)."""
        self._known.append((dict(feeds), outputs))

    def input_specs(self) -> list[TensorSpec]:
        return [TensorSpec(n, tuple(int(d) for d in t.shape), str(t.dtype).removeprefix("torch."))
                for n, t in zip(self._inputs.names, self._inputs.tensor_leaves(), strict=True)]

    def output_names(self) -> list[str]:
        return list(self._outputs)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        for i, (fed, outputs) in enumerate(self._known):
            if not self.widen and _same_feeds(fed, feeds, self._inputs.names):
                del self._known[i]
                return dict(zip(self._outputs, outputs, strict=True))
        if self.widen:
            feeds = {n: a.astype(np.float64) if a.dtype.kind == "f" else a
                     for n, a in ((n, np.asarray(feeds[n])) for n in self._inputs.names)}
        # copies: a forward that writes its input must not change the caller's feeds
        tensors = {n: tensor_of(np.array(feeds[n]), self._device) for n in self._inputs.names}
        if not self.widen:
            tensors = {n: (t.to(self._dtypes[n]) if n in self._dtypes and t.is_floating_point()
                           and t.dtype != self._dtypes[n] else t) for n, t in tensors.items()}
        tensors = {n: (_complex(t) if n in self._complex else t) for n, t in tensors.items()}
        args, kwargs = self._inputs.rebuild(tensors)
        outs = flat_outputs(run_model(self._fn, args, kwargs, self._what))
        return {n: numpy_of(t) for n, t in zip(self._outputs, outs, strict=True)}


def _complex(t: Any) -> Any:
    import torch

    return torch.view_as_complex(t.contiguous()) if not t.is_complex() and t.shape[-1:] == (2,) else t


def _same_feeds(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], names: list[str]) -> bool:
    return all(n in a and n in b and a[n].dtype == np.asarray(b[n]).dtype and a[n].shape == np.shape(b[n])
               and np.array_equal(a[n], b[n]) for n in names)


FLOAT64_MAX_WEIGHT_BYTES = 512 << 20  # a float64 copy holds the float32 weights twice over


def float64_runner(native: Any, inputs: ModelInputs, outputs: list[str], what: str) -> Runner | None:
    """A float64 copy of an ``nn.Module`` on the CPU as a runner (float feeds widened); None for
    what can't be copied or widened that way (an ExportedProgram, TorchScript, a model past
    ``FLOAT64_MAX_WEIGHT_BYTES``, one that deep-copying fails on). A module that casts to
    float32 inside runs those parts in float32: its measured error is smaller, never larger."""
    import copy

    import torch

    if not isinstance(native, torch.nn.Module) or isinstance(native, torch.jit.ScriptModule):
        return None
    tensors = [*native.parameters(), *native.buffers()]
    if sum(t.numel() * t.element_size() for t in tensors if t.is_floating_point()) > FLOAT64_MAX_WEIGHT_BYTES:
        return None
    try:
        wide = copy.deepcopy(native).to(device="cpu", dtype=torch.float64)
    except Exception:  # noqa: BLE001 - a module deepcopy can't take: no floor
        return None
    runner = TorchRunner(wide, inputs, outputs, f"{what} in float64")
    runner.name = f"torch {torch.__version__} eager, float64"
    runner.widen = True
    return runner
