"""torch -> .tflite through litert-torch (``litert_torch.convert``: torch.export, then its own
lowering to TFLite).

The module is wrapped so that litert-torch sees one flat tensor per input leaf and returns one flat
tuple of output tensors: its signature keys are then ``args_<i>`` and ``output_<j>`` in the order
of the frontend's names (``ModelInputs.names``) and of the outputs' leaves, whatever pytree the
model takes or returns (non-tensor leaves of the samples are baked in, as torch.export does)::

    model(x, {"mask": m}, flag=True) -> {"logits": a, "hidden": (b, c)}
    flat(x, m) -> (a, b, c)          signature: args_0, args_1 -> output_0, output_1, output_2

``stamp`` renames the signature keys to the source's names (x, mask -> logits, hidden_0...).
Dynamic axes are the frontend's (``ModelInputs.dynamic``), as named ``torch.export.Dim``s.
``--precision fp16`` stores the weights in float16 (litert-torch's fp16 weight-only recipe,
applied by ai-edge-quantizer); the interpreter computes in float32.
"""

from __future__ import annotations

import functools
import re
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unframe import timing
from unframe.converters.backends.litert import common
from unframe.converters.base import Artifact, Target
from unframe.errors import Blocker, MissingExtraError, UnframeError, UnsupportedError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from unframe.converters.frontends._torch.inputs import ModelInputs

CONVERTER = "litert-torch"
PACKAGES = "litert-torch (pip install --no-deps litert-torch litert-converter xdsl, as `make install` does)"
# The last conversion per module: check_from_torch and the convert_from_torch after it convert once
_DONE: weakref.WeakKeyDictionary[Any, tuple[str, Artifact | UnsupportedError]] = weakref.WeakKeyDictionary()


def convert_from_torch(native: Any, example: ModelInputs, target: Target, workdir: Path,
                       *, output_names: Sequence[str] | None = None) -> Artifact:
    """``native``: the nn.Module (or ExportedProgram) the torch frontend loaded; ``example``: its
    ModelInputs (args/kwargs of sample tensors, their names, the dynamic axes). ``output_names``:
    the names the source runner gives the outputs (default: the frontend's rule, dict keys or
    ``output_<i>``). ``workdir`` is unused: the flatbuffer stays in memory until ``write``."""
    done = _outcome(native, example, target, output_names)
    if isinstance(done, UnsupportedError):
        raise done
    return done


def check_from_torch(native: Any, example: ModelInputs, target: Target,
                     *, output_names: Sequence[str] | None = None) -> list[Blocker]:
    """Every blocker, found by converting (kept for the ``convert_from_torch`` that follows, so the
    two can't disagree and the model converts once)."""
    done = _outcome(native, example, target, output_names)
    return list(done.blockers) if isinstance(done, UnsupportedError) else []


def _outcome(native: Any, example: ModelInputs, target: Target, output_names: Sequence[str] | None
             ) -> Artifact | UnsupportedError:
    key = repr((common.precision(target), list(example.names), sorted(example.dynamic.items()),
                [tuple(t.shape) for t in example.tensor_leaves()], list(output_names or []),
                common.quantize_key(target)))
    cached = _DONE.get(native)
    if cached is not None and cached[0] == key:
        return cached[1]
    try:
        done: Artifact | UnsupportedError = _convert(native, example, target, output_names)
    except UnsupportedError as exc:
        done = exc
    try:
        _DONE[native] = (key, done)
    except TypeError:  # not weak-referenceable: no cache
        pass
    return done


def _convert(native: Any, example: ModelInputs, target: Target, output_names: Sequence[str] | None) -> Artifact:

    from unframe.converters.frontends._torch.inputs import export_example, numpy_of
    from unframe.converters.frontends._torch.inputs import output_names as name_outputs
    from unframe.converters.frontends._torch.runner import callable_of, flat_outputs, run_model

    precision = common.precision(target)
    litert_torch = _import()
    module = callable_of(native)
    eager = run_model(module, example.args, example.kwargs, type(module).__name__)
    outputs = flat_outputs(eager)
    names_out = list(output_names) if output_names else name_outputs(eager)
    flat = flat_module(module, example)
    flat.training = False  # the wrapper only: an ExportedProgram's module refuses train()/eval()
    traced = _leaves(export_example(example))
    started = time.perf_counter()
    kwargs: dict[str, Any] = {}
    if precision == "fp16":
        from litert_torch.generative.quantize.quant_recipes import full_fp16_recipe

        kwargs["quant_config"] = full_fp16_recipe()
    dynamic = dict(example.dynamic)
    notes: list[str] = []
    request = target.get("quantize")
    try:
        shapes = _dynamic_shapes(example) if dynamic else None
        module = flat
        if request is not None:
            from unframe.converters.backends.litert.quantize import torch_prepare

            with common.quiet():
                module, kwargs, quantized = torch_prepare(flat, traced, shapes, request, example)
            notes.append(quantized)
        content = _lower(litert_torch, module, traced, shapes, kwargs)
    except UnframeError:  # calibration sets that don't fit the inputs: the user's to fix
        raise
    except Exception as exc:  # noqa: BLE001 - torch.export's and the lowering's errors, all kinds
        # litert-torch 0.10 fails to lower some ops on a dynamic axis (an integer tensor times a
        # Python number: "AssertionError: int32[-9223372036854775808,3]"). Refused here, not built
        # static behind the caller's back: the direct stage builds it from the frontend's static
        # copy of the inputs and checks it on the samples only (a static .tflite resized to the
        # probe's batch fails wherever a reshape holds the traced batch)
        raise refusal(exc) from exc
    seconds = time.perf_counter() - started
    tensors = _signature_tensors(content, len(traced), len(outputs))
    shapes = [[None if a in dynamic.get(n, {}) else int(d) for a, d in enumerate(t.shape)]
              for n, t in zip(example.names, example.tensor_leaves(), strict=True)]
    record = common.io_record(tensors[0], example.names, [common.np_name(numpy_of(t).dtype)
                                                          for t in example.tensor_leaves()],
                              shapes, tensors[1], names_out,
                              [common.np_name(numpy_of(t).dtype) for t in outputs])
    notes.insert(0, f"converted by litert-torch {_version()} in {seconds:.1f} s"
                 + (" with 16-bit weights (fp16 weight-only recipe)" if precision == "fp16" and not request else ""))
    narrowed = [n for n, e in zip(example.names, record["inputs"], strict=True) if e["dtype"] in ("int64", "float64")]
    if narrowed:
        notes.append(f"64-bit inputs {', '.join(narrowed)} are 32-bit in the .tflite (litert-torch's "
                     "default for on-device runtimes); the runner casts them")
    artifact = common.make_artifact(content, record, target, f"litert-torch {_version()}", notes)
    return common.quantized(artifact, content, target) if request is not None else artifact


def _lower(litert_torch: Any, flat: Any, traced: list[Any], shapes: Any, kwargs: dict[str, Any]) -> bytes:
    import torch

    with common.quiet(), torch.no_grad(), timing.tool("litert_torch.convert"):
        edge = litert_torch.convert(flat, tuple(traced), dynamic_shapes=shapes, **kwargs)
        return bytes(edge.model_content())


def _import() -> Any:
    import logging
    import os

    os.environ.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")  # else rich progress lines on stdout
    logging.getLogger("torchao").setLevel(logging.ERROR)  # its CUDA kernels "failed to load" here
    try:
        with common.quiet():
            import litert_torch
    except ImportError as exc:
        raise MissingExtraError("converting a torch model to LiteRT", "litert", PACKAGES) from exc
    return litert_torch


def _version() -> str:
    from unframe.distributions import dist_version

    return dist_version("litert-torch") or "?"


def _leaves(traced: tuple[tuple[Any, ...], dict[str, Any]]) -> list[Any]:
    """The tensor leaves of (args, kwargs) in the frontend's leaf order."""
    import torch
    import torch.utils._pytree as pytree

    return [x for x in pytree.tree_leaves(traced) if isinstance(x, torch.Tensor)]


def _dynamic_shapes(example: ModelInputs) -> tuple[Any, ...]:
    """``(per-leaf {axis: Dim})`` for ``forward(*xs)``: torch.export binds ``*xs`` as one tuple.
    Leaves sharing a dim name share one Dim (a batch is one batch)."""
    from torch.export import Dim

    dims: dict[str, Any] = {}

    def dim(name: str) -> Any:
        ident = re.sub(r"\W", "_", name) or "dim"
        if not ident[0].isalpha():
            ident = f"d_{ident}"
        if name not in dims:
            dims[name] = Dim(ident)
        return dims[name]

    marks = tuple({axis: dim(name) for axis, name in example.dynamic[n].items()} if n in example.dynamic else None
                  for n in example.names)
    return (marks,)


def _signature_tensors(content: bytes, n_in: int, n_out: int) -> tuple[list[str], list[str]]:
    """Tensor names of ``args_<i>`` and ``output_<j>`` in litert-torch's one signature."""
    from unframe.converters.backends.litert import flatbuf

    signatures = flatbuf.describe(content, "the converted model")["signatures"]
    if len(signatures) != 1:
        raise UnsupportedError(f"litert-torch wrote {len(signatures)} signatures, expected one",
                               blockers=[Blocker("*", "unexpected signatures in litert-torch's output")])
    tensors = signatures[0]["tensors"]
    keys_in = [f"args_{i}" for i in range(n_in)]
    keys_out = [f"output_{j}" for j in range(n_out)]
    missing = [k for k in keys_in + keys_out if k not in tensors]
    if missing:
        raise UnsupportedError(f"litert-torch's signature lacks {', '.join(missing)}",
                               blockers=[Blocker("*", f"litert-torch's signature lacks {', '.join(missing)}")])
    return [tensors[k] for k in keys_in], [tensors[k] for k in keys_out]


@functools.cache
def _flat_module_class() -> type:
    import torch

    class Flat(torch.nn.Module):
        """The model called with its sample pytree rebuilt from flat tensors; flat outputs."""

        def __init__(self, inner: Any, example: ModelInputs) -> None:
            super().__init__()
            self.inner = inner
            self._example = example

        def forward(self, *xs: Any) -> tuple[Any, ...]:
            from unframe.converters.frontends._torch.runner import flat_outputs

            args, kwargs = self._example.rebuild(dict(zip(self._example.names, xs, strict=True)))
            return tuple(flat_outputs(self.inner(*args, **kwargs)))

    return Flat


def flat_module(inner: Any, example: ModelInputs) -> Any:
    """``Flat`` (its class is made on first use: torch is imported then)."""
    return _flat_module_class()(inner, example)


# litert-torch's messages name the op it could not lower in one of these forms
_OP_PATTERNS = (r"failed to legalize operation '([\w.]+)'", r"'(tfl\.[\w.]+|stablehlo\.[\w.]+|tf\.[\w.]+)'",
                r"(aten\.[\w.]+)", r"No registered lowering for (\S+)")


def refusal(exc: BaseException) -> UnsupportedError:
    """A conversion failure as an exit-4 refusal: the op it names, else the first line."""
    text = f"{type(exc).__name__}: {exc}"[:4000]  # the op is named early; graph dumps follow
    ops = []
    for pattern in _OP_PATTERNS:
        ops += [m for m in re.findall(pattern, text) if m not in ops]
    line = common.first_line(exc)
    blockers = [Blocker(op, f"litert-torch can't convert it: {line}", hint="--to onnx or executorch may take it")
                for op in ops[:5]] or [Blocker("*", f"litert-torch: {type(exc).__name__}: {line}",
                                               hint="--to onnx or executorch may take it")]
    return UnsupportedError(f"litert-torch can't convert the model ({type(exc).__name__}: {line[:160]})",
                            "run `unframe check --to litert` for the blockers", blockers=blockers)
