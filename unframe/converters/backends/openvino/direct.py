"""OpenVINO IR straight from the source framework, without ONNX: OpenVINO's own PyTorch and
TensorFlow frontends (``openvino.convert_model`` on an ``ExportedProgram`` or a Keras model).

These are plain functions for the route planner's direct routes (load -> backend from the native
model -> parity of the source runner against the artifact's -> write). Each returns the same
``Artifact`` as the ONNX route (``backend.finish``: the IR saved at the target's precision in
``workdir`` and read back, its I/O named as the frontend names them) and refuses with the same
``UnsupportedError`` (exit 4) and blockers: the frontend's unconverted ops, then the CPU plugin's
``query_model``.

What they take from the frontends:

* ``convert_from_torch(native, example, target, workdir, output_names=None)``: ``native`` an
  ``nn.Module`` in eval mode or a ``torch.export.ExportedProgram``; ``example`` the torch
  frontend's ``ModelInputs`` (read by attribute, nothing else of it): ``args``/``kwargs`` (the
  example pytree), ``names`` (one input name per tensor leaf, in flatten order), ``dynamic``
  ({name: {axis: dim name}}: the axes proven dynamic) and ``example`` (the (args, kwargs) to trace
  with when not the samples, or None). ``output_names``: the names the torch runner gives the
  outputs; by default the torch frontend's rule (dict keys along the output pytree, else
  ``output_<i>``).
* ``convert_from_tf(native, example, target, workdir, output_names=None)``: ``native`` the TF
  frontend's ``TfModel`` (``kind`` "keras", "saved_model" or "function"; ``obj``, ``path``,
  ``outputs`` read) or a bare Keras model; ``example`` the input ``TensorSpec`` list
  (``resolve_inputs`` / ``declared_inputs``: name, shape with None for a dynamic dim, dtype).
  ``output_names``: by default ``TfModel.outputs`` (the Keras runner's names).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from unframe.converters.backends.openvino.backend import finish
from unframe.converters.backends.openvino.importer import plugin_blockers
from unframe.converters.backends.openvino.runner import NUMPY_OF
from unframe.converters.backends.openvino.runtime import first_line, import_openvino, ov_tool, quiet_openvino
from unframe.converters.backends.openvino.shapes import Dim, partial_shape
from unframe.converters.base import Artifact, Target
from unframe.errors import Blocker, UnsupportedError
from unframe.validate.runner import TensorSpec


# ------------------------------------------------------------------------------------ torch --
def convert_from_torch(native: Any, example: Any, target: Target, workdir: Path,
                       output_names: Sequence[str] | None = None) -> Artifact:
    """An ``nn.Module`` (exported here with ``torch.export``, the example's dynamic axes left to
    torch: ``Dim.AUTO``) or an ``ExportedProgram``, through OpenVINO's PyTorch frontend."""
    import torch

    ep = native if isinstance(native, torch.export.ExportedProgram) else _export(native, example)
    converted = _convert(ep, "PyTorch")
    names = list(getattr(example, "names", None) or [])
    shapes = _torch_shapes(ep, names)
    _rename_inputs(converted, names or list(shapes))
    notes = _reshape(converted, shapes)
    _refuse(plugin_blockers(converted))
    outs = list(output_names) if output_names else _torch_output_names(ep)
    outputs = _name_outputs(converted, outs, [None] * len(converted.outputs))
    return finish(converted, target, Path(workdir), outputs, notes + ["direct route: torch.export "
                  "then OpenVINO's PyTorch frontend (no ONNX)"])


def _export(module: Any, example: Any) -> Any:
    """``torch.export`` of the module on the example; axes the frontend found dynamic are
    ``Dim.AUTO`` (torch keeps them symbolic where the program allows, and says which)."""
    import torch
    import torch.utils._pytree as pytree

    args, kwargs = _example_inputs(example)
    dynamic = getattr(example, "dynamic", None) or {}
    names = iter(getattr(example, "names", None) or [])
    shapes = torch.export.ShapesCollection()
    for leaf in pytree.tree_leaves((args, kwargs)):
        if isinstance(leaf, torch.Tensor):
            axes = dynamic.get(next(names, ""), {})
            if axes:
                shapes[leaf] = {int(a): torch.export.Dim.AUTO for a in axes}
    try:
        with quiet_openvino():  # torch's export warnings: off the user's terminal
            return torch.export.export(module, tuple(args), dict(kwargs),
                                       dynamic_shapes=shapes if dynamic else None)
    except Exception as exc:
        raise UnsupportedError(f"torch.export can't capture the model for OpenVINO's direct route: "
                               f"{type(exc).__name__}: {first_line(exc)}",
                               "use the ONNX route (the default), which has more ways to export",
                               blockers=[Blocker("*", f"torch.export failed: {first_line(exc)}")]) from exc


def _example_inputs(example: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """What to trace with: the frontend's own choice (``example.example``), else the samples with
    each dynamic axis of size 1 repeated to 2 (torch.export fixes a dim of size 1)."""
    import torch
    import torch.utils._pytree as pytree

    chosen = getattr(example, "example", None)
    if chosen is not None:
        return tuple(chosen[0]), dict(chosen[1])
    args, kwargs = tuple(getattr(example, "args", ())), dict(getattr(example, "kwargs", {}) or {})
    dynamic = getattr(example, "dynamic", None) or {}
    names = iter(getattr(example, "names", None) or [])
    leaves, spec = pytree.tree_flatten((args, kwargs))
    grown = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            for axis in sorted(dynamic.get(next(names, ""), {})):
                if leaf.dim() > int(axis) and leaf.shape[int(axis)] == 1:
                    leaf = torch.cat([leaf, leaf], dim=int(axis))
        grown.append(leaf)
    new_args, new_kwargs = pytree.tree_unflatten(grown, spec)
    return tuple(new_args), dict(new_kwargs)


def _torch_shapes(ep: Any, names: list[str]) -> dict[str, list[Dim]]:
    """Each user input's partial shape: its dims as the exported program has them (an int stays
    fixed, a symbol is dynamic). OpenVINO's frontend alone leaves every dim but the channels ``?``."""
    import torch

    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    user = set(ep.graph_signature.user_inputs)
    out: dict[str, list[Dim]] = {}
    tensors = [n for n in placeholders if n.name in user and isinstance(n.meta.get("val"), torch.Tensor)]
    for i, node in enumerate(tensors):
        dims: list[Dim] = [int(d) if isinstance(d, int) else None for d in node.meta["val"].shape]
        out[names[i] if i < len(names) else node.name] = dims
    return out


def _torch_output_names(ep: Any) -> list[str]:
    """The torch frontend's names: dict keys along the output pytree, else ``output_<i>``."""
    import re

    import torch.utils._pytree as pytree

    spec = ep.call_spec.out_spec
    count = len(ep.graph_signature.user_outputs)
    leaves = pytree.tree_unflatten(list(range(count)), spec) if spec is not None else list(range(count))
    flat, _ = pytree.tree_flatten_with_path(leaves)
    names: list[str] = []
    for i, (path, _leaf) in enumerate(flat):
        keys = [k for k in path if not hasattr(k, "idx")]
        if keys:
            first = next(j for j, k in enumerate(path) if not hasattr(k, "idx"))
            label = "_".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path[first:])
        else:
            label = f"output_{i}"
        label = re.sub(r"\W+", "_", label).strip("_") or "output"
        unique, n = label, 1
        while unique in names:
            unique, n = f"{label}_{n}", n + 1
        names.append(unique)
    return names


# --------------------------------------------------------------------------------- tf/keras --
def convert_from_tf(native: Any, example: Sequence[TensorSpec], target: Target, workdir: Path,
                    output_names: Sequence[str] | None = None) -> Artifact:
    """A Keras model, a SavedModel or a tf.function through OpenVINO's TensorFlow frontend."""
    obj, outs = _tf_source(native)
    converted = _convert(obj, "TensorFlow")
    specs = list(example)
    _rename_inputs(converted, [t.name for t in specs], by_name=True)
    notes = _reshape(converted, {t.name: [d if isinstance(d, int) else None for d in t.shape]
                                 for t in specs if t.shape is not None})
    _refuse(plugin_blockers(converted))
    names = list(output_names) if output_names else outs
    outputs = _name_outputs(converted, names or [f"output_{i}" for i in range(len(converted.outputs))],
                            _keras_tensor_names(native))
    return finish(converted, target, Path(workdir), outputs, notes + ["direct route: OpenVINO's "
                  "TensorFlow frontend (no ONNX)"])


def _tf_source(native: Any) -> tuple[Any, list[str]]:
    """What ``convert_model`` takes (a Keras model, a SavedModel path, a concrete function) and
    the runner's output names."""
    kind = getattr(native, "kind", None)
    if kind is None:  # a bare Keras model
        return native, [str(n) for n in getattr(native, "output_names", None) or []]
    outs = [str(n) for n in getattr(native, "outputs", None) or []]
    if kind == "saved_model" and getattr(native, "path", None) is not None:
        return str(native.path), outs
    if kind in ("keras", "function", "saved_model"):
        return native.obj, outs
    raise UnsupportedError(f"OpenVINO's TensorFlow frontend has no direct route for a {kind} model",
                           "use the ONNX route (the default)",
                           blockers=[Blocker("*", f"a {kind} source has no direct OpenVINO route")])


def _keras_tensor_names(native: Any) -> list[str | None]:
    """The Keras model's output tensor names, in its output order: OpenVINO names its outputs
    after them (in an order of its own)."""
    model = getattr(native, "obj", native)
    tensors = getattr(model, "outputs", None)
    if not isinstance(tensors, (list, tuple)):
        return []
    return [getattr(t, "name", None) for t in tensors]


# ----------------------------------------------------------------------------------- shared --
def _convert(source: Any, framework: str) -> Any:
    from unframe.converters.backends.openvino.importer import FAILED, NO_RULE

    ov = import_openvino()
    try:
        with quiet_openvino(), ov_tool():
            return ov.convert_model(source)
    except Exception as exc:
        blockers = []
        for line in str(exc).splitlines():
            for prefix in (NO_RULE, FAILED):
                if line.strip().startswith(prefix):
                    blockers += [Blocker(op.strip(), f"OpenVINO's {framework} frontend "
                                         + ("has no conversion for this op" if prefix == NO_RULE else "failed on it"))
                                 for op in line.strip()[len(prefix):].split(",") if op.strip()]
        blockers = blockers or [Blocker("*", f"OpenVINO's {framework} frontend refused the model: "
                                             f"{first_line(exc)}")]
        raise UnsupportedError(f"OpenVINO's {framework} frontend can't convert the model "
                               f"({len(blockers)} blockers)", "use the ONNX route (the default)",
                               blockers=blockers) from exc


def _refuse(blockers: list[Blocker]) -> None:
    if blockers:
        raise UnsupportedError(f"OpenVINO's CPU plugin can't take the model ({len(blockers)} blockers)",
                               "see the list", blockers=blockers)


def _rename_inputs(converted: Any, names: list[str], by_name: bool = False) -> None:
    """Give the inputs the frontend's names (the runners feed by them): by position, or where a
    port already carries one of the names, that one (a Keras model's inputs, in its own order)."""
    ports = list(converted.inputs)
    if by_name and all(any(n in p.get_names() for n in names) for p in ports):
        for port in ports:
            port.get_tensor().set_names({next(n for n in names if n in port.get_names())})
        return
    for port, name in zip(ports, names, strict=False):
        port.get_tensor().set_names({name})


def _reshape(converted: Any, shapes: dict[str, list[Dim]]) -> list[str]:
    wanted = {}
    for port in converted.inputs:
        dims = shapes.get(port.get_any_name())
        if dims is not None and len(dims) == port.get_partial_shape().rank.get_length():
            wanted[port] = partial_shape(dims)
    if wanted:
        converted.reshape(wanted)
    dynamic = [f"{p.get_any_name()}{p.get_partial_shape()}" for p in converted.inputs
               if p.get_partial_shape().is_dynamic]
    return [f"dynamic input dims as OpenVINO partial shapes: {', '.join(dynamic)}"] if dynamic else []


def _name_outputs(converted: Any, names: list[str], source_names: list[str | None]) -> list[dict[str, Any]]:
    """Name the outputs ``names[i]`` (the source runner's), matching port ``i`` by the source's
    own tensor name where OpenVINO kept it (its order may differ), else by position. Returns the
    runner's output records, in ``names`` order."""
    from unframe.errors import ConversionError

    remaining = list(converted.outputs)
    if len(names) != len(remaining):
        raise ConversionError(f"OpenVINO's model has {len(remaining)} outputs, the source {len(names)}",
                              "use the ONNX route (the default)")
    chosen: list[Any] = []
    for i in range(len(names)):
        tensor = source_names[i] if i < len(source_names) else None
        port = next((p for p in remaining if tensor and tensor in p.get_names()), remaining[0])
        remaining.remove(port)
        chosen.append(port)
    for port, name in zip(chosen, names, strict=True):
        port.get_tensor().set_names({name})
    return [{"name": n, "dtype": NUMPY_OF.get(p.get_element_type().get_type_name())}
            for n, p in zip(names, chosen, strict=True)]


__all__ = ["convert_from_tf", "convert_from_torch"]
