"""The two torch.onnx exporters, and one-line explanations of their failures.

- dynamo: ``torch.onnx.export(..., dynamo=True)``: torch.export captures the graph, onnxscript's
  torchlib translates it; the result is already an ``onnx_ir.Model`` (no serialization, so a
  model over 2 GB is fine here).
- torchscript: the legacy tracer (``dynamo=False``), written to a file in a temp folder (its C++
  side writes external data itself past 2 GB) and read back with onnx_ir.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import os
import re
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnx_ir as ir

from unframe import quiet as native_logs
from unframe import timing
from unframe.converters.frontends._torch import isolate
from unframe.converters.frontends._torch.inputs import (
    ModelInputs,
    dynamic_shapes,
    export_example,
    param_names,
)
from unframe.errors import ConversionError, UnframeError, UnsupportedError

LOG = logging.getLogger("unframe.torch")

DYNAMO_OPSETS = (18, 23)  # torchlib is written at 18; torch converts up to ONNX_MAX_OPSET
TORCHSCRIPT_OPSETS = (7, 20)


def clamp(opset: int, bounds: tuple[int, int]) -> int:
    return max(bounds[0], min(bounds[1], opset))


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The exporters print progress, warnings and listings (torch.export prints the partial FX
    graph of each failed attempt on ``sys.stderr``: thousands of lines before a fallback); the
    report says what matters. What they print goes to the debug log (logger ``unframe.torch``),
    native output on fd 2 to ``unframe.quiet``'s capture; ``--debug`` lets both through."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._dynamo",
                                              "torch.fx.experimental.symbolic_shapes",
                                              "onnxscript", "torch._export")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    printed = io.StringIO()
    keep = native_logs.debug_enabled()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(printed), \
                (contextlib.nullcontext() if keep else contextlib.redirect_stderr(printed)), \
                native_logs.quiet_native_logs():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
        if printed.getvalue().strip():
            LOG.debug("the torch exporter printed:\n%s", printed.getvalue())


_TORCHLIB_OPS: dict[str, Any] = {}


@contextlib.contextmanager
def cached_torchlib() -> Iterator[None]:
    """torch.onnx rebuilds onnxscript's torchlib table on every export (about 5 s here, parsing
    the source of ~500 functions); the table is the same each time, so build it once per
    process. Swapped in only for the duration of our own export call."""
    try:
        from torch.onnx._internal.exporter import _registration
    except ImportError:  # a torch without this layout: nothing to cache
        yield
        return
    apis = _registration.onnxscript_apis
    original = apis.get_torchlib_ops

    def cached() -> Any:
        if "ops" not in _TORCHLIB_OPS:
            _TORCHLIB_OPS["ops"] = original()
        return _TORCHLIB_OPS["ops"]

    apis.get_torchlib_ops = cached
    try:
        yield
    finally:
        apis.get_torchlib_ops = original


@contextlib.contextmanager
def math_attention() -> Iterator[None]:
    """Trace ``scaled_dot_product_attention`` with its math kernel's layout.

    torch.export records a model's ``reshape`` of the attention output as a ``view`` when the
    traced kernel (CPU flash attention) returns a [B, L, H, D]-strided result. torch.onnx keeps
    the attention op whole and re-traces it with the math kernel's contiguous [B, H, L, D]
    result, where that view is impossible ("Cannot view a tensor ... after a transpose": BEiT,
    Swin, T5 on torch 2.13). Tracing with the math kernel from the start records what the
    re-trace will see. The op in the graph is the same either way: only trace-time strides
    change, and the exported attention is translated by torchlib as before."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # a torch without the selector: nothing to pin
        yield
        return
    with sdpa_kernel([SDPBackend.MATH]):
        yield


def export_dynamo(model: Any, inputs: ModelInputs | None, outputs: list[str] | None,
                  opset: int, optimize: bool = True) -> ir.Model:
    """``optimize=False`` skips onnxscript's optimizer (see ``precision.optimizer_safe``)."""
    import torch

    from unframe.converters.frontends._torch.translations import translation_table

    kwargs: dict[str, Any] = dict(dynamo=True, opset_version=opset, verbose=False,
                                  output_names=outputs, optimize=optimize,
                                  custom_translation_table=translation_table())
    if isinstance(model, torch.export.ExportedProgram):
        args: tuple[Any, ...] = ()
    else:
        assert inputs is not None
        args, call_kwargs = export_example(inputs)
        shapes = dynamic_shapes(inputs, model) if inputs.dynamic else None
        args, call_kwargs, shapes = trailing_dict_by_name(model, args, call_kwargs, shapes)
        kwargs.update(kwargs=call_kwargs, input_names=inputs.names, dynamic_shapes=shapes)
    # traced without autograd, as an inference export is: with grad mode on (a training script's
    # default) torch.export's fake-tensor trace records autograd for every parameter, 20-40 %
    # slower (googlenet 12.7 s vs 9.1 s best of 3), for the same graph
    with quiet(), cached_torchlib(), math_attention(), torch.no_grad(), timing.tool("torch.onnx.export (dynamo)"):
        program = torch.onnx.export(model, args, **kwargs)
    # the decomposed program the graph was translated from (its FX names are the ONNX value
    # names): the divergence locator runs it instead of capturing the model again
    program.model.meta[EXPORTED_PROGRAM] = program.exported_program
    return program.model


EXPORTED_PROGRAM = "unframe.torch.exported_program"  # ir.Model.meta key (never serialized)


def trailing_dict_by_name(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], shapes: Any
                           ) -> tuple[tuple[Any, ...], dict[str, Any], Any]:
    """torch.onnx reads a trailing dict in ``args`` as keyword arguments when ``kwargs`` is
    empty; pass such a dict argument by its parameter name instead (same leaf order). Shapes
    given by parameter name (a dict) bind the same either way."""
    params = param_names(model) or []
    if kwargs or not args or not isinstance(args[-1], dict) or len(args) > len(params):
        return args, kwargs, shapes
    name = params[len(args) - 1]
    if isinstance(shapes, (tuple, list)):
        shapes = {**{params[i]: s for i, s in enumerate(shapes[:-1])}, name: shapes[-1]}
    return args[:-1], {name: args[-1]}, shapes


def export_torchscript(model: Any, inputs: ModelInputs, outputs: list[str] | None, opset: int,
                       workdir: Path, what: str = "the model", device: Any = None) -> ir.Model:
    """The TorchScript exporter, in a forked child where it can be (``isolate``): a failed
    trace can corrupt torch's heap, and the next conversion in this process would die of it."""
    path = workdir / "model.onnx"

    def step() -> None:
        _trace(model, inputs, outputs, opset, path)

    with timing.tool("torch.onnx.export (torchscript)"):
        if isolate.can_fork(device):
            isolate.run(step, lambda exc: (explain(exc, f"torchscript export of {what}"),
                                           is_data_dependent(exc)),
                        f"the TorchScript export of {what}")
        else:
            step()
    return ir.load(str(path))


def _trace(model: Any, inputs: ModelInputs, outputs: list[str] | None, opset: int, path: Path) -> None:
    import torch

    args, call_kwargs = export_example(inputs)
    if args and isinstance(args[-1], dict) and not call_kwargs:
        args = (*args, {})  # a trailing dict would otherwise be read as keyword arguments
    with quiet(), torch.no_grad():
        torch.onnx.export(model, args, str(path), kwargs=call_kwargs or None, dynamo=False,
                          opset_version=opset, input_names=inputs.names, output_names=outputs,
                          dynamic_axes=inputs.dynamic or None, verbose=False)


def new_workdir() -> tempfile.TemporaryDirectory[str]:
    """The export's own folder: its external data is read from there by the tools that check it."""
    from unframe import io

    return io.private_dir("unframe-torch-")


# ----------------------------------------------------------------------------- explanations --
_CALL_SITE = re.compile(r'File "([^"]+)", line (\d+), in (\w+)\n\s+(.+)')
_DATA_DEPENDENT = ("GuardOnDataDependentSymNode", "data-dependent", "DataDependent",
                   "UserError: Dynamic control flow", "UncapturedHigherOrderOpError")


def explain(exc: BaseException, what: str) -> str:
    """One line: what failed, where in the user's code, and the op."""
    if isinstance(exc, isolate.ChildFailure):
        return exc.line  # explained in the child, where the chain and its frames were
    chain = _chain(exc)
    text = "\n".join(f"{type(e).__name__}: {e}" for e in chain)
    root = chain[-1]
    reason = _first_meaningful_line(root)
    site = _call_site(text) or _user_frame(chain)
    kind = type(root).__name__
    where = f" at {site}" if site else ""
    if is_data_dependent(exc):
        return f"{what}: data-dependent control flow{where} ({kind}: {reason})"
    return f"{what}{where}: {kind}: {reason}"


def is_data_dependent(exc: BaseException) -> bool:
    if isinstance(exc, isolate.ChildFailure):
        return exc.data_dependent
    text = "\n".join(f"{type(e).__name__}: {e}" for e in _chain(exc))
    return any(marker in text for marker in _DATA_DEPENDENT)


def _chain(exc: BaseException) -> list[BaseException]:
    out = [exc]
    while out[-1].__cause__ is not None and len(out) < 8:
        out.append(out[-1].__cause__)
    return out


def _call_site(text: str) -> str:
    sites = [m for m in _CALL_SITE.finditer(text) if "site-packages" not in m.group(1)]
    if not sites:
        return ""
    file, line, func, code = sites[-1].groups()
    return f"{os.path.basename(file)}:{line} in {func}() `{code.strip()}`"


def _user_frame(chain: list[BaseException]) -> str:
    """The innermost frame of the user's code in the exceptions' own tracebacks (an error the
    user's forward raised under the tracer carries no stack in its message)."""
    import traceback

    # unframe's own folder (this file is unframe/converters/frontends/_torch/export.py)
    ours = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    for exc in reversed(chain):
        frames = [f for f in traceback.extract_tb(exc.__traceback__)
                  if "site-packages" not in f.filename and not f.filename.startswith(ours)
                  and not f.filename.startswith("<")]
        if frames:
            f = frames[-1]
            return f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}() `{(f.line or '').strip()}`"
    return ""


def _first_meaningful_line(exc: BaseException) -> str:
    for line in str(exc).splitlines():
        line = re.sub(r"\x1b\[[0-9;]*m", "", line).strip(" #-")
        if line and not line.startswith(("Failed to export", "This is step")):
            return line[:240]
    return type(exc).__name__


def conversion_error(failures: list[str], data_dependent: bool, tried: tuple[str, ...], *,
                     exported_program: bool = False) -> UnframeError:
    """The failures of every exporter tried, and a hint that suggests only what was not tried.
    Data-dependent code that every exporter was tried on (and refused) is a model the exporters
    can't take: exit 4, as an unsupported op is, not a failure of the conversion (exit 9)."""
    untried = [route for route in ("dynamo", "torchscript") if route not in tried]
    ops = sorted({op for f in failures for op in _untranslated_ops(f)})
    if ops and not untried and all(_untranslated_ops(f) for f in failures):
        from unframe.errors import Blocker

        return UnsupportedError(
            f"no torch.onnx exporter translates {', '.join(ops)} to ONNX: " + " | ".join(failures),
            "replace the op in the model, or convert to a target that converts the module itself "
            "(--to executorch, litert)",
            blockers=[Blocker(op, "torch.onnx has no ONNX translation for it", hint="replace it in the model")
                      for op in ops])
    if data_dependent and not untried and not exported_program:
        return UnsupportedError(
            "no torch.onnx exporter takes this model's data-dependent code: " + " | ".join(failures),
            "pass --static or sample inputs that avoid the data-dependent branch, move the "
            "data-dependent part (e.g. detection post-processing) out of the exported module, "
            "or export it to ONNX yourself")
    steps = [f"try --exporter {untried[0]}"] if untried else []
    if data_dependent:
        steps.append("pass --static or sample inputs that avoid the data-dependent branch")
    if exported_program:
        steps.append("convert the nn.Module the program was exported from (unframe exports it itself)")
    elif not untried:
        steps.append("simplify the model (static shapes, no data-dependent branches) or export it "
                     "to ONNX yourself")
    return ConversionError(" | ".join(failures), "; ".join(steps))


# how the exporters say an op has no ONNX translation: dynamo's dispatcher, TorchScript's symbolic
_NO_TRANSLATION = (re.compile(r"No ONNX function found for <OpOverload\(op='([\w.]+)'"),
                   re.compile(r"Exporting the operator '?([\w:.]+)'? to ONNX opset version \d+ is not supported"))


def _untranslated_ops(failure: str) -> list[str]:
    return [m.group(1).replace("::", ".") for pattern in _NO_TRANSLATION for m in pattern.finditer(failure)]


def unlifted(program: Any, inputs: ModelInputs) -> Any:
    """``program.module()`` for the TorchScript exporter. That module refuses ``train()`` and
    ``eval()`` (torch.export fixed its mode) and the exporter calls them, so it is wrapped in a
    module whose mode switch stops at the wrapper. The tracer passes keyword inputs by position
    (or as a trailing dict); the wrapper hands them on by the names the program was exported
    with."""
    import torch

    positional, names = len(inputs.args), list(inputs.kwargs)

    class ExportedModule(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def train(self, mode: bool = True) -> ExportedModule:
            self.training = mode  # the program's own mode was fixed when it was exported
            return self

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            if not kwargs and names and len(args) == positional + 1 and isinstance(args[-1], dict):
                args, kwargs = args[:-1], dict(args[-1])  # the tracer's trailing keyword dict
            elif not kwargs and len(args) == positional + len(names):
                kwargs = dict(zip(names, args[positional:], strict=True))
                args = args[:positional]
            return self.inner(*args, **kwargs)

    # the exporter matches a trailing keyword dict against the forward's parameter names
    params = ["self", *(f"arg{i}" for i in range(positional)), *names]
    ExportedModule.forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in params])
    return ExportedModule(program.module())
