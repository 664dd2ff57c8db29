"""A tap into the torch source model: its intermediate tensors under the ONNX names they became.

The dynamo exporter (``torch.onnx.export(..., dynamo=True)``) captures an ``ExportedProgram``,
decomposes it for ONNX, and names every ONNX value after the FX node that produced it
(``conv2d``, ``relu_1``, ``getitem_3``; a node with several outputs gives ``name__0``,
``name__1``...; graph outputs take the names the frontend gave them). ``TorchTap`` redoes the
capture and the decomposition the same way (same capture strategies, same torchlib registry,
so the same node names), runs the decomposed program's graph module with a
``torch.fx.Interpreter`` that records each ``call_function`` node's output, and keeps those whose
name is a value of the ONNX graph with a matching shape and dtype kind::

    FX:   %getitem_3 = getitem(%_native_batch_norm_legit_no_training_1, 0)   -> tensor [2, 8, 8, 8]
    ONNX: Conv(max_pool2d, conv2.weight, conv2.bias) -> getitem_3            (BN folded into Conv)
    tap:  {"getitem_3": array of shape (2, 8, 8, 8), ...}

An ONNX value without an FX counterpart (a constant, an op's internal step) is simply not given.

``source_location(node)`` reads the metadata the dynamo exporter writes on every ONNX node
(``pkg.torch.onnx.stack_trace``, ``pkg.torch.onnx.name_scopes``,
``pkg.torch.onnx.class_hierarchy``; also ``namespace`` and ``pkg.torch.onnx.fx_node``, and
``pkg.onnxscript.rewriter.rule_name`` on nodes an onnxscript rewrite produced) and says where in
the user's code the node comes from: ``"conv2 (Conv2d) at model.py:30"``.

Limits: a graph from the TorchScript exporter has other value names, so the tap gives only its
outputs (``limitations`` says so); the capture uses private torch.onnx helpers where they exist
and falls back to ``torch.export.export`` + ``run_decompositions()`` (fewer names may match).
torch is imported inside functions only.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from unframe.converters.frontends._torch.export import EXPORTED_PROGRAM

if TYPE_CHECKING:
    import onnx_ir as ir

Feeds = dict[str, np.ndarray]
# feeds by ONNX input name -> (args, kwargs) for the torch model
FeedsToTorch = Callable[[Mapping[str, np.ndarray]], tuple[tuple[Any, ...], dict[str, Any]]]

_EXPORTERS = {"torchscript": "TorchScript", "dynamo": "dynamo"}
STACK_TRACE = "pkg.torch.onnx.stack_trace"
NAME_SCOPES = "pkg.torch.onnx.name_scopes"
CLASS_HIERARCHY = "pkg.torch.onnx.class_hierarchy"
FX_NODE = "pkg.torch.onnx.fx_node"
REWRITE_RULE = "pkg.onnxscript.rewriter.rule_name"


class Tap(Protocol):
    """The locator's tap protocol (``unframe.locate.taps.Tap``), restated to stay self-contained."""

    name: str

    def values(self, feeds: dict[str, np.ndarray],
               names: Sequence[str] | None = None) -> dict[str, np.ndarray]: ...


class TorchTap:
    """Intermediate values of a torch model (``nn.Module`` or ``ExportedProgram``) by ONNX name.

    ``export`` is the frontend's ``ExportResult`` (preferred: it carries the exporter route, the
    inputs' structure and dynamic axes) or the exported ONNX model itself (``onnx_ir.Model`` or
    ``onnx.ModelProto``). ``feeds_to_torch`` turns feeds by ONNX input name into the model's
    ``(args, kwargs)``; by default the ``ExportResult``'s inputs are rebuilt with the feeds, or,
    without them, the graph inputs are passed positionally in order.
    """

    def __init__(self, native: Any, export: Any, feeds_to_torch: FeedsToTorch | None = None
                 ) -> None:
        import torch

        model, route, inputs, opset = _unpack(export)
        self.name = f"torch {torch.__version__} (decomposed ExportedProgram)"
        self.limitations: list[str] = []
        self._native = native
        self._model_inputs = inputs  # the frontend's ModelInputs, when known
        self._opset = opset
        graph = model.graph
        self._values_by_name = _graph_values(graph)
        self._input_names = [v.name for v in graph.inputs if v.name not in graph.initializers]
        self._output_names = [v.name for v in graph.outputs]
        self._feeds_to_torch = feeds_to_torch or self._default_feeds_to_torch
        # the exporter's own decomposed program when it kept it (no second capture)
        self._program: Any = model.meta.get(EXPORTED_PROGRAM) if self._reusable(model) else None
        self._renames: dict[str, str] = {}  # FX node name -> graph output name
        if self._program is not None:
            self._renames = _output_renames(self._program, self._output_names)
        self._by_name = route == "dynamo" if route else _has_fx_names(graph)
        if not self._by_name:
            self._outputs_only(f"the graph came from the {_EXPORTERS.get(route, route)} exporter, "
                               "whose value names are not the FX graph's" if route else
                               "the graph has no dynamo exporter metadata, so its value names "
                               "can't be tied to the FX graph's")

    # ------------------------------------------------------------------------------ API --
    def values(self, feeds: dict[str, np.ndarray],
               names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """The source model's tensors for ``feeds``, keyed by ONNX value name (``names``: only
        these, when they are available)."""
        args, kwargs = self._feeds_to_torch(feeds)
        wanted = set(names) if names is not None else None
        if self._by_name:
            program = self._exported(args, kwargs)
            if program is not None:
                return self._intermediates(program, args, kwargs, wanted)
        return self._outputs(args, kwargs, wanted)

    def source_location(self, node: ir.Node) -> str:
        return source_location(node)

    # ---------------------------------------------------------------------------- inner --
    @staticmethod
    def _reusable(model: ir.Model) -> bool:
        return EXPORTED_PROGRAM in model.meta

    def _default_feeds_to_torch(self, feeds: Mapping[str, np.ndarray]
                                ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        import torch

        def tensor(name: str) -> Any:
            return torch.from_numpy(np.ascontiguousarray(feeds[name]))

        if self._model_inputs is not None:
            return self._model_inputs.rebuild({n: tensor(n) for n in self._model_inputs.names})
        return tuple(tensor(n) for n in self._input_names), {}

    def _outputs_only(self, why: str) -> None:
        self._by_name = False
        self.limitations.append(f"{why}: only the graph outputs are tapped")

    def _exported(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The decomposed ExportedProgram, captured once (None when capture fails)."""
        if self._program is None:
            try:
                self._program = _decomposed_program(self._native, self._model_inputs, args,
                                                    kwargs, self._opset, self.limitations)
            except Exception as exc:  # the tap is a diagnosis aid: degrade, don't fail
                self._outputs_only(f"re-capturing the ExportedProgram failed "
                                   f"({type(exc).__name__}: {_first_line(exc)})")
                return None
            self._renames = _output_renames(self._program, self._output_names)
        return self._program

    def _intermediates(self, program: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                       wanted: set[str] | None) -> dict[str, np.ndarray]:
        fx_wanted = None
        if wanted is not None:
            back = {onnx: fx for fx, onnx in self._renames.items()}
            fx_wanted = {back.get(n, n) for n in wanted}
        call_args, call_kwargs = _as_captured(self._native, args, kwargs)
        try:
            recorded = record_fx_values(program, call_args, call_kwargs, fx_wanted)
        except Exception:
            if self._model_inputs is not None or _is_program(self._native):
                raise
            # captured from earlier feeds with static shapes: capture again for these
            self._program = None
            program = self._exported(args, kwargs)
            if program is None:
                return self._outputs(args, kwargs, wanted)
            recorded = record_fx_values(program, call_args, call_kwargs, fx_wanted)
        out: dict[str, np.ndarray] = {}
        for fx_name, array in recorded.items():
            name = self._renames.get(fx_name, fx_name)
            value = self._values_by_name.get(name)
            if value is None or (wanted is not None and name not in wanted):
                continue
            if fits(array, value):
                out[name] = array
        return out

    def _outputs(self, args: tuple[Any, ...], kwargs: dict[str, Any],
                 wanted: set[str] | None) -> dict[str, np.ndarray]:
        import torch
        import torch.utils._pytree as pytree

        fn = self._native.module() if isinstance(self._native, torch.export.ExportedProgram) \
            else self._native
        with torch.no_grad():
            result = fn(*args, **kwargs)
        tensors = [x for x in pytree.tree_leaves(result) if isinstance(x, torch.Tensor)]
        return {name: _to_numpy(t) for name, t in zip(self._output_names, tensors, strict=False)
                if wanted is None or name in wanted}


# ---------------------------------------------------------------------------------- capture --
def _unpack(export: Any) -> tuple[ir.Model, str, Any, int | None]:
    """(ONNX model, exporter route or "", the frontend's ModelInputs or None, export opset)."""
    import onnx_ir as ir

    if hasattr(export, "model") and hasattr(export, "extra"):  # an ExportResult
        model = export.model
        return model, export.route or "", export.extra.get("inputs"), export.opset
    if isinstance(export, ir.Model):
        return export, "", None, export.opset_imports.get("")
    if type(export).__name__ == "ModelProto":
        model = ir.serde.deserialize_model(export)
        return model, "", None, model.opset_imports.get("")
    raise TypeError(f"TorchTap takes an ExportResult or an ONNX model, not {type(export).__name__}")


def _decomposed_program(native: Any, inputs: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                        opset: int | None, limitations: list[str]) -> Any:
    """The ExportedProgram the dynamo exporter translated: captured from ``native`` as the torch
    frontend did (its example inputs and dynamic axes when known, else ``args``/``kwargs``),
    then decomposed with torch.onnx's own registry so that node names agree."""
    import torch

    from unframe.converters.frontends._torch.export import cached_torchlib, quiet

    with quiet(), cached_torchlib():
        try:
            from torch.onnx._internal.exporter import _constants, _core, _registration
        except ImportError:
            limitations.append("this torch has no torch.onnx._internal.exporter: decomposed with "
                               "run_decompositions(), fewer names may match")
            program = native if isinstance(native, torch.export.ExportedProgram) else \
                torch.export.export(native, args, kwargs=kwargs, strict=False)
            return program.run_decompositions()
        if isinstance(native, torch.export.ExportedProgram):
            program = native
        else:
            program = _capture(native, inputs, args, kwargs)
        level = max(_constants.TORCHLIB_OPSET, opset or 0)
        registry = _registration.ONNXRegistry.from_torchlib(opset_version=level)
        return _core._prepare_exported_program_for_export(program, registry=registry)


def _capture(model: Any, inputs: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """torch.onnx's capture strategies in its order, on the frontend's export example."""
    from torch.onnx._internal.exporter import _capture_strategies, _dynamic_shapes

    from unframe.converters.frontends._torch import export as exp
    from unframe.converters.frontends._torch import inputs as inp

    shapes: Any = None
    if inputs is not None:
        args, kwargs = inp.export_example(inputs)
        shapes = inp.dynamic_shapes(inputs, model) if inputs.dynamic else None
        args, kwargs, shapes = exp.trailing_dict_by_name(model, args, kwargs, shapes)
        shapes, _ = _dynamic_shapes.convert_str_to_export_dim(shapes)
    errors: list[BaseException] = []
    for strategy in _capture_strategies.CAPTURE_STRATEGIES:
        result = strategy(verbose=False)(model, args, kwargs, dynamic_shapes=shapes)
        if result.exported_program is not None:
            return result.exported_program
        if result.exception is not None:
            errors.append(result.exception)
    raise errors[0] if errors else RuntimeError("no capture strategy produced a program")


def _is_program(native: Any) -> bool:
    import torch

    return isinstance(native, torch.export.ExportedProgram)


def _as_captured(native: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
                 ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call as the frontend handed it to the capture (a trailing dict argument by name)."""
    import torch

    if isinstance(native, torch.export.ExportedProgram):
        return args, kwargs
    from unframe.converters.frontends._torch.export import trailing_dict_by_name

    args, kwargs, _ = trailing_dict_by_name(native, args, kwargs, None)
    return args, kwargs


def record_fx_values(program: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                     wanted: set[str] | None = None) -> dict[str, np.ndarray]:
    """Run ``program``'s graph module on (args, kwargs) and return every ``call_function``
    node's tensor output as numpy by node name (``wanted``: only these names). A node with
    several outputs gives ``name__0``, ``name__1``... (the dynamo exporter's naming) and ``name``
    for the first."""
    import torch

    flat = _flat_inputs(program, args, kwargs)
    seen: dict[str, np.ndarray] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            result = super().run_node(n)
            if n.op == "call_function":
                _store(seen, n.name, result, wanted)
            return result

    with torch.no_grad():
        Recorder(program.graph_module).run(*flat)
    return seen


def _flat_inputs(program: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The lifted graph module's inputs: parameters, buffers and constants, then user inputs."""
    flatten = getattr(program, "_graph_module_flat_inputs", None)
    if flatten is not None:
        return tuple(flatten(args, kwargs))
    import torch.utils._pytree as pytree
    from torch.export.graph_signature import InputKind

    state = {**program.state_dict, **program.constants}
    lifted = [state[s.target] for s in program.graph_signature.input_specs
              if s.kind != InputKind.USER_INPUT]
    return (*lifted, *pytree.tree_leaves((args, kwargs)))


def _store(seen: dict[str, np.ndarray], name: str, result: Any, wanted: set[str] | None) -> None:
    import torch

    if isinstance(result, torch.Tensor):
        items = [(name, result)]
    elif isinstance(result, (tuple, list)):
        items = [(f"{name}__{i}", t) for i, t in enumerate(result)]
        if result:
            items.append((name, result[0]))
    else:
        return
    for key, tensor in items:
        if isinstance(tensor, torch.Tensor) and (wanted is None or key in wanted):
            seen[key] = _to_numpy(tensor)


def _to_numpy(tensor: Any) -> np.ndarray:
    import torch

    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor)  # the exporter's complex_to_float layout
    # a copy: later in-place work on the same storage must not change what was recorded
    return np.array(tensor.numpy(), copy=True)


def _output_renames(program: Any, onnx_outputs: list[str]) -> dict[str, str]:
    """FX node name -> ONNX graph output name, for the user outputs (the frontend renames them
    ``output_0``... or as the model's output keys)."""
    from torch.export.graph_signature import OutputKind

    user = [s.arg.name for s in program.graph_signature.output_specs
            if s.kind == OutputKind.USER_OUTPUT and hasattr(s.arg, "name")]
    if len(user) != len(program.graph_signature.user_outputs) or len(user) > len(onnx_outputs):
        return {}
    tail = onnx_outputs[len(onnx_outputs) - len(user):]
    return {fx: onnx for fx, onnx in zip(user, tail, strict=True) if fx != onnx}


# ------------------------------------------------------------------------------------ graph --
def _graph_values(graph: ir.Graph) -> dict[str, ir.Value]:
    values: dict[str, ir.Value] = {v.name: v for v in graph.inputs if v.name}
    for node in graph:
        for value in node.outputs:
            if value.name:
                values[value.name] = value
    return values


def _has_fx_names(graph: ir.Graph) -> bool:
    return any(FX_NODE in node.metadata_props for node in graph)


def fits(array: np.ndarray, value: ir.Value) -> bool:
    """Whether ``array`` can be the value: same rank and known dims, and the same kind of dtype
    (a name that matched by chance, or a layout the exporter changed, is left out)."""
    import onnx_ir as ir

    if value.type is not None and not isinstance(value.type, ir.TensorType):
        return False
    if value.shape is not None:
        if len(value.shape) != array.ndim:
            return False
        if any(isinstance(d, int) and d != n for d, n in zip(value.shape, array.shape, strict=True)):
            return False
    dtype = value.dtype
    if dtype is None:
        return True
    kind = array.dtype.kind
    if dtype == ir.DataType.BOOL:
        return kind == "b"
    if dtype.is_floating_point():
        return kind == "f"
    if dtype.is_integer():
        return kind in "iu"
    return True


# ---------------------------------------------------------------------------------- sources --
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in ([^\n]+)\n([^\n]*)')


def source_location(node: ir.Node) -> str:
    """Where a dynamo-exported node comes from: ``"conv2 (Conv2d) at model.py:30"``, from its
    metadata (the innermost frame of the stack trace outside torch itself, the innermost module
    of the name scopes and its class). ``self`` names the root module. A node that reads another
    module's weights (an onnxscript rewrite folded a BatchNorm into the Conv before it, or
    weights are shared) says so: ``"bn2 (BatchNorm2d) at model.py:30 [reads conv2.weight,
    conv2.bias; rewritten by FuseBatchNormIntoConv]"``. "" when the node has no such metadata."""
    props = node.metadata_props
    scopes = _literal_list(props.get(NAME_SCOPES, ""))
    classes = _literal_list(props.get(CLASS_HIERARCHY, ""))
    site = user_frame(props.get(STACK_TRACE, ""))
    module = ""
    if len(scopes) >= 2:
        cls = classes[-2].rsplit(".", 1)[-1] if len(classes) == len(scopes) else ""
        module = f"{scopes[-2] or 'self'}" + (f" ({cls})" if cls else "")
    text = " at ".join(part for part in (module, site[0] if site else "") if part)
    if not text:
        return ""
    notes = []
    foreign = _foreign_weights(node, scopes[-2] if len(scopes) >= 2 else "")
    if foreign:
        notes.append("reads " + ", ".join(foreign))
    if props.get(REWRITE_RULE):
        notes.append(f"rewritten by {props[REWRITE_RULE]}")
    return text + (f" [{'; '.join(notes)}]" if notes else "")


def source_line(node: ir.Node) -> str:
    """The user's line of code the node comes from (the stack trace's innermost user frame)."""
    site = user_frame(node.metadata_props.get(STACK_TRACE, ""))
    return site[1] if site else ""


def user_frame(stack_trace: str) -> tuple[str, str] | None:
    """("file.py:123", code) of the innermost frame that is not in torch's own package."""
    frames = [m for m in _FRAME.finditer(stack_trace) if not _in_torch(m.group(1))]
    if not frames:
        return None
    file, line, _func, code = frames[-1].groups()
    return f"{os.path.basename(file)}:{line}", code.strip()


def _foreign_weights(node: ir.Node, module: str) -> list[str]:
    """Names of the parameters (dotted initializers) the node reads that belong to a module other
    than its own name scope."""
    names = []
    for value in node.inputs:
        if value is None or not value.is_initializer() or "." not in value.name:
            continue
        owner = value.name.rsplit(".", 1)[0]
        if owner != module:
            names.append(value.name)
    return names


def _literal_list(text: str) -> list[str]:
    if not text:
        return []
    try:
        parsed = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return []
    return [str(x) for x in parsed] if isinstance(parsed, (list, tuple)) else []


@lru_cache(maxsize=1)
def _torch_dirs() -> tuple[str, ...]:
    """torch's package folder (found without importing torch)."""
    spec = importlib.util.find_spec("torch")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return tuple(os.path.realpath(p) + os.sep for p in locations)


def _in_torch(path: str) -> bool:
    real = os.path.realpath(path)
    dirs = _torch_dirs()
    if dirs:
        return real.startswith(dirs)
    return f"{os.sep}torch{os.sep}" in path and "site-packages" in path


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""
