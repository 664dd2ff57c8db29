"""Model inputs: from samples, ``--inputs`` specs or an ExportedProgram's own example inputs.

Everything is kept as one pytree ``(args, kwargs)``; its tensor leaves, in flatten order, are the
ONNX graph inputs. Names come from the forward's parameter names (``x``, ``input_ids``) and, for
nested inputs such as a dict argument, the keys (``image``, ``mask``).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from unframe import limits
from unframe.converters.base import InputSpec
from unframe.errors import InputError, UsageError
from unframe.validate.runner import TensorSpec

BATCH_DIM = "batch"
# Filled into dynamic dims of --inputs specs when building example tensors.
SPEC_FILL = 2


@dataclass
class ModelInputs:
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    names: list[str] = field(default_factory=list)  # ONNX input names, one per tensor leaf
    dynamic: dict[str, dict[int, str]] = field(default_factory=dict)  # name -> {axis: dim}
    batch: int | None = None  # the samples' batch size when the batch axis is dynamic
    # inputs whose axis 0 is dynamic by unframe's guess (not the user's word): kept only where
    # the model runs with it changed and the export takes it (``_torch/dynamic.py``)
    guessed: set[str] = field(default_factory=set)
    # what the exporters trace with, when not the samples: (args, kwargs) the model ran on
    example: tuple[tuple[Any, ...], dict[str, Any]] | None = None

    def static_copy(self) -> ModelInputs:
        """The same inputs with unframe's guessed axes fixed (the user's own stay dynamic)."""
        dynamic = {n: {a: d for a, d in axes.items() if not (a == 0 and n in self.guessed)}
                   for n, axes in self.dynamic.items()}
        dynamic = {n: axes for n, axes in dynamic.items() if axes}
        batch = self.batch if any(0 in axes for axes in dynamic.values()) else None
        return ModelInputs(self.args, self.kwargs, list(self.names), dynamic, batch, set(), None)

    def leaves(self) -> tuple[list[Any], Any]:
        import torch.utils._pytree as pytree

        return pytree.tree_flatten((self.args, self.kwargs))

    def tensor_leaves(self) -> list[Any]:
        import torch

        return [x for x in self.leaves()[0] if isinstance(x, torch.Tensor)]

    def rebuild(self, tensors: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """(args, kwargs) with each tensor leaf replaced by ``tensors[name]``."""
        import torch
        import torch.utils._pytree as pytree

        leaves, spec = self.leaves()
        names = iter(self.names)
        new = [tensors[next(names)] if isinstance(x, torch.Tensor) else x for x in leaves]
        args, kwargs = pytree.tree_unflatten(new, spec)
        return tuple(args), dict(kwargs)


# ------------------------------------------------------------------------------ arrays ------
def numpy_of(t: Any) -> np.ndarray:
    """A tensor as a numpy array on the CPU; bfloat16 as ml_dtypes' bfloat16 (numpy has none,
    and onnxruntime and onnx's evaluator take that type); a complex tensor as torch.onnx's graph
    holds it, real and imaginary parts on a last axis of 2 (``torch.view_as_real``)."""
    import torch

    t = t.detach().cpu()
    if t.is_complex():
        t = torch.view_as_real(t.resolve_conj())
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def tensor_of(a: np.ndarray, device: Any = None) -> Any:
    """The inverse of ``numpy_of``, on ``device`` (a model on CUDA is fed there)."""
    import torch

    a = np.ascontiguousarray(a)
    if str(a.dtype) == "bfloat16":
        t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(a)
    return t if device is None or t.device == device else t.to(device)


def tensor_copies(inputs: ModelInputs) -> dict[str, Any]:
    """A copy of each tensor input, by name (for a run that may write them)."""
    return {n: t.detach().clone() for n, t in zip(inputs.names, inputs.tensor_leaves(), strict=True)}


def own_copies(inputs: ModelInputs) -> None:
    """Tensor inputs replaced by copies: what the model does to them stays inside unframe."""
    leaves = dict(zip(inputs.names, inputs.tensor_leaves(), strict=True))
    inputs.args, inputs.kwargs = inputs.rebuild({n: t.detach().clone() for n, t in leaves.items()})


def to_device(inputs: ModelInputs, device: Any) -> None:
    """Tensor inputs onto the model's device (samples given as numpy arrays are on the CPU)."""
    if device is None:
        return
    leaves = dict(zip(inputs.names, inputs.tensor_leaves(), strict=True))
    if all(t.device == device for t in leaves.values()):
        return
    inputs.args, inputs.kwargs = inputs.rebuild({n: t.to(device) for n, t in leaves.items()})


# ------------------------------------------------------------------------------ parameters --
def param_names(model: Any) -> list[str] | None:
    """Names of the forward's parameters (without self), when they can be known."""
    import torch

    if isinstance(model, torch.jit.ScriptModule):
        try:
            return [a.name for a in model.forward.schema.arguments[1:]]
        except Exception:
            return None
    forward = getattr(model, "forward", model)
    try:
        sig = inspect.signature(forward)
    except (TypeError, ValueError):
        return None
    return [p.name for p in sig.parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def bind(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], what: str) -> tuple[
        tuple[Any, ...], dict[str, Any]]:
    """Check the inputs against the forward's signature; positional where possible."""
    import torch

    if isinstance(model, torch.jit.ScriptModule):
        return args, kwargs
    try:
        sig = inspect.signature(getattr(model, "forward", model))
        bound = sig.bind(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ValueError):
            return args, kwargs
        raise InputError(f"sample inputs don't match {what}.forward{_sig_text(model)}: {exc}",
                         "pass one input per forward parameter (a tuple, or a dict by name)"
                         ) from exc
    return tuple(bound.args), dict(bound.kwargs)


def _sig_text(model: Any) -> str:
    try:
        return str(inspect.signature(model.forward))
    except (TypeError, ValueError, AttributeError):
        return "(...)"


# ---------------------------------------------------------------------------------- sources --
def from_samples(model: Any, samples: Any, what: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A tensor, array, tuple/list (positional) or dict (by parameter name, or the single dict
    argument of a forward that takes one)."""
    samples = to_torch(samples)
    params = param_names(model) or []
    if isinstance(samples, (list, tuple)) and len(samples) == 1 and isinstance(samples[0], Mapping) \
            and samples[0] and all(k in params for k in samples[0]):
        samples = samples[0]  # a list of feed dicts (an .npz): the first one, by input name
    if isinstance(samples, Mapping):
        if samples and (all(k in params for k in samples) or _takes_by_name(model, samples)):
            return bind(model, (), dict(samples), what)
        return bind(model, (dict(samples),), {}, what)
    if isinstance(samples, (tuple, list)):
        return bind(model, tuple(samples), {}, what)
    return bind(model, (samples,), {}, what)


def _takes_by_name(model: Any, samples: Mapping[str, Any]) -> bool:
    """A forward with ``**kwargs`` takes a dict of samples by name when the dict names every
    parameter the forward requires (``forward(x, **kwargs)`` with {"x": ..., "scale": ...});
    else the dict is one argument."""
    try:
        sig = inspect.signature(getattr(model, "forward", model))
    except (TypeError, ValueError):
        return False
    params = list(sig.parameters.values())
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        return False
    required = [p.name for p in params if p.default is p.empty
                and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if required:
        return all(name in samples for name in required)
    return all(isinstance(k, str) for k in samples)


def to_torch(obj: Any) -> Any:
    """numpy arrays (anywhere in the structure) to tensors; everything else kept."""
    import torch.utils._pytree as pytree

    def convert(x: Any) -> Any:
        if isinstance(x, np.ndarray) or isinstance(x, np.generic):
            return tensor_of(np.asarray(x))
        return x

    if isinstance(obj, Mapping) and not isinstance(obj, dict):
        obj = dict(obj)
    return pytree.tree_map(convert, obj)


def from_tensor_specs(model: Any, specs: Sequence[TensorSpec], what: str) -> tuple[
        tuple[Any, ...], dict[str, Any]]:
    """Seeded example tensors for ``--inputs name:shape:dtype``; by name when the names are the
    forward's parameters, else positional."""
    import torch

    gen = torch.Generator().manual_seed(0)
    tensors = {s.name: _example_tensor(s, gen) for s in specs}
    params = param_names(model) or []
    if all(name in params for name in tensors):
        return bind(model, (), tensors, what)
    return bind(model, tuple(tensors.values()), {}, what)


def _example_tensor(spec: TensorSpec, gen: Any) -> Any:
    import torch

    if spec.shape is None:
        raise UsageError(f"--inputs {spec.name}: a shape is needed to build example inputs",
                         "give it as name:2x3x224x224:float32")
    shape = tuple(d if isinstance(d, int) else SPEC_FILL for d in spec.shape)
    dtype = np.dtype(spec.dtype)
    limits.check_array(shape, np.float32, f"example input {spec.name!r}")
    if dtype.kind == "f":
        return torch.randn(shape, generator=gen).to(getattr(torch, dtype.name))
    if dtype.kind in "iu":
        # Small non-negative ints stay valid indices (token ids, class ids).
        return torch.randint(0, 3, shape, generator=gen).to(getattr(torch, dtype.name))
    if dtype.kind == "b":
        return torch.rand(shape, generator=gen) < 0.5
    raise UsageError(f"--inputs {spec.name}: dtype {spec.dtype} is not supported for torch",
                     "use a float, int or bool dtype")


def from_exported_program(ep: Any) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """The example inputs saved with the program, else tensors shaped like its placeholders."""
    import torch

    if ep.example_inputs is not None:
        args, kwargs = ep.example_inputs
        return tuple(args), dict(kwargs or {})
    user = set(ep.graph_signature.user_inputs)
    tensors = []
    for node in ep.graph.nodes:
        if node.op == "placeholder" and node.name in user:
            val = node.meta.get("val")
            if not isinstance(val, torch.Tensor):
                return None
            shape = [d if isinstance(d, int) else SPEC_FILL for d in val.shape]
            limits.check_array(shape, np.float32, f"example input {node.name!r} of the program")
            tensors.append(torch.randn(shape).to(val.dtype) if val.dtype.is_floating_point
                           else torch.zeros(shape, dtype=val.dtype))
    return tuple(tensors), {}


# ------------------------------------------------------------------------------------ names --
def finalize(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], spec: InputSpec,
             what: str) -> ModelInputs:
    """Name the tensor leaves and decide the dynamic axes."""
    inputs = ModelInputs(args=args, kwargs=kwargs)
    if not inputs.tensor_leaves():
        raise InputError(f"{what}: the sample inputs hold no tensor",
                         "pass torch tensors or numpy arrays as sample inputs")
    dense = [t for t in inputs.tensor_leaves() if t.layout != _strided()]
    if dense:
        from unframe.errors import UnsupportedError

        raise UnsupportedError(f"{what}: a sample input is a {str(dense[0].layout).removeprefix('torch.')} "
                               "tensor; ONNX graphs take dense tensors only",
                               "pass dense inputs (tensor.to_dense()) to a model that takes them")
    inputs.names = leaf_names(args, kwargs, param_names(model) or [])
    _decide_dynamic(inputs, spec, _listed_leaves(args, kwargs, inputs.names))
    return inputs


def _strided() -> Any:
    import torch

    return torch.strided


def _listed_leaves(args: tuple[Any, ...], kwargs: dict[str, Any], names: list[str]) -> set[str]:
    """Names of the tensor leaves that sit in a list or tuple argument: such a list is itself
    the batch (torchvision detection takes list[Tensor[C, H, W]]), so their axis 0 is not."""
    import torch
    import torch.utils._pytree as pytree

    flat, _ = pytree.tree_flatten_with_path((args, kwargs))
    paths = [path for path, leaf in flat if isinstance(leaf, torch.Tensor)]
    return {name for name, path in zip(names, paths, strict=True)
            if any(hasattr(k, "idx") for k in path[2:])}


def leaf_names(args: tuple[Any, ...], kwargs: dict[str, Any], params: list[str]) -> list[str]:
    import torch
    import torch.utils._pytree as pytree

    flat, _ = pytree.tree_flatten_with_path((args, kwargs))
    single = len(args) + len(kwargs) == 1
    names: list[str] = []
    for path, leaf in flat:
        if not isinstance(leaf, torch.Tensor):
            continue
        top = _key(path[1])
        if path[0].idx == 0:  # a positional argument: its parameter's name
            top = params[int(top)] if int(top) < len(params) else f"input_{top}"
        rest = [_key(k) for k in path[2:]]
        if single and rest and all(hasattr(k, "idx") for k in path[2:]):
            # the one argument is a list (list[Tensor] images): name its leaves after the
            # parameter, numbered by _unique (images, images_1...), never a bare index like "0"
            rest = []
        parts = rest if single and rest else [top, *rest]
        names.append(_unique(_clean("_".join(parts)), names))
    return names


def output_names(outputs: Any, given: Sequence[str] | None = None) -> list[str]:
    """Dict / ModelOutput keys where outputs are named, else output_0, output_1..."""
    import torch
    import torch.utils._pytree as pytree

    flat, _ = pytree.tree_flatten_with_path(outputs)
    tensors = [(path, leaf) for path, leaf in flat if isinstance(leaf, torch.Tensor)]
    if given:
        if len(given) != len(tensors):
            raise UsageError(f"--output-names gives {len(given)} names but the model has "
                             f"{len(tensors)} outputs", "give one name per output tensor")
        return list(given)
    names: list[str] = []
    for i, (path, _leaf) in enumerate(tensors):
        keys = [k for k in path if not hasattr(k, "idx")]
        if keys:
            # positions before the first key (a list of dicts, one per image) are numbered by
            # _unique (boxes, boxes_1), not spelled out as 0_boxes
            first = next(i for i, k in enumerate(path) if not hasattr(k, "idx"))
            label = "_".join(_key(k) for k in path[first:])
        else:
            label = f"output_{i}"
        names.append(_unique(_clean(label), names))
    return names


def _key(key: Any) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _clean(name: str) -> str:
    return re.sub(r"\W+", "_", name).strip("_") or "input"


def _unique(name: str, taken: list[str]) -> str:
    out, i = name, 1
    while out in taken:
        out, i = f"{name}_{i}", i + 1
    return out


# ------------------------------------------------------------------------------ dynamic axes --
def _decide_dynamic(inputs: ModelInputs, spec: InputSpec, listed: set[str] = frozenset()) -> None:
    """Candidate axes: axis 0 of every input whose axis 0 has the first input's size (a guess:
    ``guessed``, proven or dropped by ``_torch/dynamic.py``), plus the axes the user named."""
    tensors = dict(zip(inputs.names, inputs.tensor_leaves(), strict=True))
    if not spec.static:
        batched = [t for name, t in tensors.items() if t.dim() >= 1 and name not in listed]
        if batched and int(batched[0].shape[0]) > 0:  # an empty axis has no rows to vary
            inputs.batch = int(batched[0].shape[0])
            for name, t in tensors.items():
                if t.dim() >= 1 and int(t.shape[0]) == inputs.batch and name not in listed:
                    inputs.dynamic.setdefault(name, {})[0] = BATCH_DIM
                    inputs.guessed.add(name)
    for ts in spec.tensors or []:
        if ts.name in tensors and ts.shape is not None and not spec.static:
            for axis, dim in enumerate(ts.shape):
                if not isinstance(dim, int) and axis > 0:
                    inputs.dynamic.setdefault(ts.name, {})[axis] = dim or f"{ts.name}_dim{axis}"
                elif not isinstance(dim, int) and axis == 0 and 0 in inputs.dynamic.get(ts.name, {}):
                    inputs.guessed.discard(ts.name)  # the user's spec says axis 0 is free
    for name, axis, dim in spec.dynamic:
        if name not in tensors:
            raise UsageError(f"--dynamic {name}:{axis}: the model has no input {name!r}",
                             f"inputs are: {', '.join(tensors)}")
        if axis >= tensors[name].dim():
            raise UsageError(f"--dynamic {name}:{axis}: {name} has only {tensors[name].dim()} axes",
                             "count axes from 0")
        inputs.dynamic.setdefault(name, {})[axis] = dim or f"{name}_dim{axis}"
        inputs.guessed.discard(name)


def dynamic_shapes(inputs: ModelInputs, model: Any) -> Any:
    """torch.export's dynamic_shapes: {axis: name} per tensor leaf, None for every other leaf,
    in the structure torch.export binds the inputs to: by parameter name, a ``*args`` parameter
    as one tuple and a ``**kwargs`` one as one dict (what ``signature.bind(...).arguments``
    gives, as torch.export does). Without a signature to bind to: positional, as given."""
    import torch
    import torch.utils._pytree as pytree

    leaves, treespec = inputs.leaves()
    names = iter(inputs.names)
    marks = [inputs.dynamic.get(next(names)) if isinstance(x, torch.Tensor) else None
             for x in leaves]
    args_ds, kwargs_ds = pytree.tree_unflatten(marks, treespec)
    sig = _forward_signature(model)
    if sig is not None:
        try:
            return dict(sig.bind(*args_ds, **kwargs_ds).arguments)
        except TypeError:
            pass
    if not kwargs_ds:
        return tuple(args_ds)
    params = param_names(model) or []
    out = {params[i]: ds for i, ds in enumerate(args_ds)}
    out.update(kwargs_ds)
    return out


def _forward_signature(model: Any) -> inspect.Signature | None:
    import torch

    if isinstance(model, torch.jit.ScriptModule):
        return None
    try:
        return inspect.signature(model.forward if isinstance(model, torch.nn.Module) else model)
    except (TypeError, ValueError):
        return None


def export_example(inputs: ModelInputs) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The inputs to trace with: those the probe ran the model on when the samples have a batch
    of 1 (torch.export specializes size-1 dims: the batch would come out static); else a batch of
    1 is repeated to 2 for an axis the user made dynamic."""
    if inputs.example is not None:
        return inputs.example
    if inputs.batch != 1:
        return inputs.args, inputs.kwargs
    grown = {name: (t.repeat(2, *([1] * (t.dim() - 1))) if 0 in inputs.dynamic.get(name, {}) else t)
             for name, t in zip(inputs.names, inputs.tensor_leaves(), strict=True)}
    return inputs.rebuild(grown)


# ------------------------------------------------------------------------------------ feeds --
def feeds(inputs: ModelInputs) -> dict[str, np.ndarray]:
    """The inputs' tensors as one numpy feed, by ONNX input name (copies)."""
    return {n: numpy_of(t).copy() for n, t in zip(inputs.names, inputs.tensor_leaves(), strict=True)}


def probe_size(batch: int) -> int:
    """The batch size the probe runs the model at: another one than the samples'."""
    return batch + 1 if batch > 1 else 3


def probe_tensors(inputs: ModelInputs, names: set[str], seed: int = 0) -> dict[str, Any]:
    """The samples with axis 0 of ``names`` re-drawn at ``probe_size`` (rows of the samples,
    so integer inputs stay valid ids), the other inputs as they are."""
    import torch

    assert inputs.batch is not None
    rows = np.random.default_rng(seed).integers(0, inputs.batch, size=probe_size(inputs.batch))
    index = torch.from_numpy(rows)
    return {n: (t.index_select(0, index.to(t.device)) if n in names else t)
            for n, t in zip(inputs.names, inputs.tensor_leaves(), strict=True)}
