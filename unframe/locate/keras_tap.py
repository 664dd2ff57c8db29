"""A tap into a Keras model: each layer's output under the ONNX value name it became.

tf2onnx names graph values after the TensorFlow ops of the traced model, and Keras puts every
layer's ops in a name scope of the layer's name, made unique by TensorFlow when the model is
traced again (``dense_1`` may appear as ``dense_1_1``)::

    Keras:  Conv2D "conv" -> ReLU "act" -> Flatten "flat" -> Dense "hidden" -> Dense "logits"
    ONNX:   net_1/conv_1/convolution:0  net_1/act_1/Relu:0  net_1/flat_1/Reshape:0
            net_1/hidden_1/BiasAdd:0 ...  logits            (a model output keeps its name)

A layer maps to the *last* value in topological order whose name has the layer's scope as one of
its ``/``-separated parts and whose inferred shape fits the layer's output, leaving out values of
nodes tf2onnx inserted (``BiasAdd__6:0``: transposes and reshapes) that take their data from
outside the layer (tf2onnx moves them past the layer's real output); a layer whose output is a model output maps to that graph output. tf2onnx runs convolutions and pooling channels-first
(``NCHW``) between transposes, so a value may be the layer's output with the channels moved to
axis 1: the layout is read from the inferred shapes, or, when they can't tell (``C == H``), from
the transpose the value's data path last went through; the tap gives the value in the ONNX
layout. The values come from one ``keras.Model(model.inputs, [layer.output, ...])`` run in
inference mode.

Best-effort, by design: only top-level layers called once are mapped (a nested model maps as one
layer); a subclassed model has no symbolic layer outputs, so only its outputs are tapped (and
``limitations`` says so). ``layer_of(name)`` names the layer an ONNX value (or node) belongs to,
for the locator's report: ``"layer 'hidden' (Dense)"``.

TensorFlow and Keras are imported inside functions only, and their work runs inside
``unframe.quiet.quiet_native_logs()``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from unframe.quiet import quiet_native_logs

if TYPE_CHECKING:
    import onnx_ir as ir

Dims = tuple[int | str | None, ...]
# ONNX value names carry the op's output index (":0"); scopes are the parts before the op name.
_OUTPUT_INDEX = re.compile(r":\d+$")
SAME, CHANNELS_FIRST = "same", "channels_first"


@dataclass
class LayerMatch:
    """A Keras layer and the ONNX value its output became."""

    layer: Any
    onnx_name: str
    layout: str  # SAME or CHANNELS_FIRST (the ONNX value has the channels on axis 1)

    @property
    def label(self) -> str:
        return describe_layer(self.layer)


class KerasTap:
    """Layer outputs of a Keras model by ONNX value name (see the module docstring).

    ``model``: a ``keras.Model`` (or the TF frontend's loaded model, whose ``obj`` is one).
    ``onnx_model``: the TF frontend's ``ExportResult`` (its ``nchw_inputs`` are then known), an
    ``onnx_ir.Model`` or an ``onnx.ModelProto``. ``nchw_inputs``: inputs that the export made
    channels-first (their feeds are moved back to channels-last for Keras).
    """

    def __init__(self, model: Any, onnx_model: Any, nchw_inputs: Sequence[str] = ()) -> None:
        from unframe.distributions import dist_version

        self.model = getattr(model, "obj", model)
        graph_model, exported_nchw = _unpack(onnx_model)
        self.name = f"keras {dist_version('keras') or '?'}"
        self.limitations: list[str] = []
        self.nchw_inputs = set(nchw_inputs) | set(exported_nchw)
        self._graph = graph_model.graph
        self._output_names = [v.name for v in self._graph.outputs]
        self._probe: Any = None
        with quiet_native_logs():
            self.matches = self._match_layers(graph_model)
        self._scopes = _layer_scopes(self.model, self._graph)

    # ------------------------------------------------------------------------------ API --
    def values(self, feeds: dict[str, np.ndarray],
               names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Each mapped layer's output for ``feeds`` (by ONNX input name), keyed by its ONNX value
        name, in the ONNX layout; only the model outputs when no layer could be mapped."""
        wanted = set(names) if names is not None else None
        with quiet_native_logs():
            if self.matches:
                return self._layer_values(feeds, wanted)
            return self._model_outputs(feeds, wanted)

    def layer_of(self, onnx_name: str) -> str:
        """``"layer 'dense_1' (Dense)"`` for an ONNX value (or node) name in that layer's scope,
        or that is its mapped output; "" when none is known."""
        for match in self.matches:
            if match.onnx_name == onnx_name:
                return match.label
        parts = _scope_parts(onnx_name)
        for segment in reversed(parts):  # the innermost scope that is a layer's
            layer = self._scopes.get(segment)
            if layer is not None:
                return describe_layer(layer)
        return ""

    @property
    def mapping(self) -> dict[str, str]:
        """ONNX value name -> layer label, for every mapped layer."""
        return {m.onnx_name: m.label for m in self.matches}

    # ---------------------------------------------------------------------------- inner --
    def _match_layers(self, graph_model: ir.Model) -> list[LayerMatch]:
        inputs = getattr(self.model, "inputs", None)
        if not inputs:
            self.limitations.append(f"{type(self.model).__name__} has no symbolic inputs (a "
                                    "subclassed model?): only its outputs are tapped")
            return []
        shapes = inferred_shapes(graph_model)
        order = _node_outputs(self._graph)
        producers = {v.name: node for node in self._graph for v in node.outputs if v.name}
        by_output = _outputs_by_layer(self.model, self._output_names)
        parts = _all_scope_parts(self._graph)
        suffix = _common_suffix(self.model, parts)
        matches: list[LayerMatch] = []
        for layer in _top_layers(self.model):
            output = _single_output(layer)
            if output is None:
                continue
            want = tuple(output.shape)
            if layer.name in by_output:
                candidates = [by_output[layer.name]]
            else:
                segment = _scope_of(layer.name, suffix, parts)
                candidates = [n for n in reversed(order) if segment in _scope_parts(n)
                              and (not _inserted(n) or _fed_from(producers, n, segment))]
            match = self._first_fit(layer, candidates, want, shapes)
            if match is not None:
                matches.append(match)
        if not matches:
            self.limitations.append("no Keras layer could be matched to an ONNX value: only the "
                                    "outputs are tapped")
        return matches

    def _first_fit(self, layer: Any, candidates: list[str], want: Dims,
                   shapes: Mapping[str, Dims | None]) -> LayerMatch | None:
        for name in candidates:
            if shapes and shapes.get(name) is None:
                continue  # shape inference ran and knows nothing of it (a loop's state...)
            layout = _layout(want, shapes.get(name))
            if layout == "ambiguous":
                layout = data_path_layout(self._graph, name, self.nchw_inputs)
            if layout in (SAME, CHANNELS_FIRST):
                return LayerMatch(layer, name, layout)
        return None

    def _layer_values(self, feeds: Mapping[str, np.ndarray],
                      wanted: set[str] | None) -> dict[str, np.ndarray]:
        chosen = {m.onnx_name for m in self.matches if wanted is None or m.onnx_name in wanted}
        if not chosen:
            return {}
        if self._probe is None:
            import keras

            self._probe = keras.Model(self.model.inputs, [m.layer.output for m in self.matches])
        results = self._probe(self._keras_inputs(feeds), training=False)
        results = results if isinstance(results, (list, tuple)) else [results]
        out: dict[str, np.ndarray] = {}
        for match, result in zip(self.matches, results, strict=True):
            if match.onnx_name in chosen:
                array = np.asarray(result)
                out[match.onnx_name] = np.moveaxis(array, -1, 1) \
                    if match.layout == CHANNELS_FIRST else array
        return out

    def _model_outputs(self, feeds: Mapping[str, np.ndarray],
                       wanted: set[str] | None) -> dict[str, np.ndarray]:
        import keras

        from unframe.converters.frontends._tf.runners import keras_structure

        arrays = self._channels_last(feeds)
        if getattr(self.model, "inputs", None):
            structured = keras_structure(self.model, arrays)
        else:  # a subclassed model: the graph inputs in order, as its call takes them
            ordered = [arrays[v.name] for v in self._graph.inputs
                       if v.name not in self._graph.initializers]
            structured = ordered[0] if len(ordered) == 1 else ordered
        result = self.model(structured, training=False)
        if isinstance(result, Mapping) and all(n in result for n in self._output_names):
            pairs = [(n, result[n]) for n in self._output_names]
        else:
            pairs = list(zip(self._output_names, keras.tree.flatten(result), strict=False))
        return {n: np.asarray(v) for n, v in pairs if wanted is None or n in wanted}

    def _keras_inputs(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        arrays = self._channels_last(feeds)
        return [arrays[t.name] for t in self.model.inputs]

    def _channels_last(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {name: (np.moveaxis(np.asarray(a), 1, -1) if name in self.nchw_inputs
                       else np.asarray(a)) for name, a in feeds.items()}


# ------------------------------------------------------------------------------------ layers --
def layer_of_node(model: Any, node: ir.Node) -> str:
    """``"layer 'dense_1' (Dense)"`` for an ONNX node of a tf2onnx graph, from the innermost name
    scope of its outputs (or its own name) that is a top-level layer's; "" when none is."""
    graph = node.graph
    if graph is None:
        return ""
    scopes = _layer_scopes(model, graph)
    for name in [*(v.name for v in node.outputs if v.name), node.name or ""]:
        for segment in reversed(_scope_parts(name)):
            if segment in scopes:
                return describe_layer(scopes[segment])
    return ""


def describe_layer(layer: Any) -> str:
    return f"layer '{layer.name}' ({type(layer).__name__})"


def _top_layers(model: Any) -> list[Any]:
    return [layer for layer in model.layers if type(layer).__name__ != "InputLayer"]


def _single_output(layer: Any) -> Any:
    """The layer's one symbolic output; None for a layer called several times, never called, or
    with several outputs."""
    try:
        output = layer.output
    except (AttributeError, ValueError, RuntimeError):
        return None
    return None if isinstance(output, (list, tuple, dict)) else output


def _outputs_by_layer(model: Any, graph_outputs: list[str]) -> dict[str, str]:
    """Layer name -> ONNX graph output, for layers whose output is a model output (the graph
    outputs are named after the model's outputs, else in the same order)."""
    outputs = list(getattr(model, "outputs", None) or [])
    names = list(getattr(model, "output_names", None) or [])
    if len(outputs) != len(graph_outputs):
        return {}
    if sorted(names) == sorted(graph_outputs) and len(names) == len(outputs):
        onnx = names
    else:
        onnx = graph_outputs
    found: dict[str, str] = {}
    for tensor, name in zip(outputs, onnx, strict=True):
        history = getattr(tensor, "_keras_history", None)
        layer = getattr(history, "operation", None) or (history[0] if history else None)
        if layer is not None:
            found[layer.name] = name
    return found


def _layer_scopes(model: Any, graph: ir.Graph) -> dict[str, Any]:
    """The name scope each top-level layer has in the ONNX value names -> the layer."""
    if not getattr(model, "layers", None):
        return {}
    parts = _all_scope_parts(graph)
    suffix = _common_suffix(model, parts)
    return {_scope_of(layer.name, suffix, parts): layer for layer in _top_layers(model)}


def _common_suffix(model: Any, parts: set[str]) -> str:
    """The suffix TensorFlow added to the layers' scopes when the model was traced again
    (``""``, ``"_1"``...): the one under which most layer names appear as scopes."""
    names = {layer.name for layer in getattr(model, "layers", None) or []}
    counts: dict[str, int] = {}
    for part in parts:
        if part in names:
            counts[""] = counts.get("", 0) + 1
        found = re.fullmatch(r"(.+)(_\d+)", part)  # one uniquifying suffix: "dense_1" + "_1"
        if found is not None and found.group(1) in names:
            counts[found.group(2)] = counts.get(found.group(2), 0) + 1
    return max(counts, key=lambda k: (counts[k], k == "")) if counts else ""


def _scope_of(layer_name: str, suffix: str, parts: set[str]) -> str:
    return layer_name + suffix if layer_name + suffix in parts else layer_name


# ------------------------------------------------------------------------------------- graph --
def _unpack(onnx_model: Any) -> tuple[ir.Model, Sequence[str]]:
    import onnx_ir as ir

    if hasattr(onnx_model, "model") and hasattr(onnx_model, "extra"):  # an ExportResult
        return onnx_model.model, tuple(onnx_model.extra.get("nchw_inputs") or ())
    if isinstance(onnx_model, ir.Model):
        return onnx_model, ()
    if type(onnx_model).__name__ == "ModelProto":
        return ir.serde.deserialize_model(onnx_model), ()
    raise TypeError(f"KerasTap takes an ExportResult or an ONNX model, not "
                    f"{type(onnx_model).__name__}")


def _node_outputs(graph: ir.Graph) -> list[str]:
    """Every node output's name, in the graph's (topological) order."""
    return [v.name for node in graph for v in node.outputs if v.name]


def _scope_parts(name: str) -> list[str]:
    """The scopes of a value name: ``net_1/dense_1/BiasAdd:0`` -> ``["net_1", "dense_1"]``."""
    return _OUTPUT_INDEX.sub("", name).split("/")[:-1]


def _inserted(name: str) -> bool:
    """A value of a node tf2onnx inserted (a transpose or reshape around a layout change, a
    cast): its op name is an original one plus ``__<n>`` (``net/conv/BiasAdd__6:0``), and it
    may sit after the layer's real output (a transpose tf2onnx moved past the activation)."""
    return re.search(r"__\d+$", _OUTPUT_INDEX.sub("", name)) is not None


def _fed_from(producers: Mapping[str, ir.Node], name: str, segment: str) -> bool:
    """Whether the node producing ``name`` takes its data from a value of the same scope (an
    inserted node inside the layer) rather than from another layer (one moved past it)."""
    node = producers.get(name)
    data = next((v for v in node.inputs if v is not None and not v.is_initializer()
                 and v.const_value is None), None) if node is not None else None
    return data is not None and segment in _scope_parts(data.name or "")


def _all_scope_parts(graph: ir.Graph) -> set[str]:
    return {p for name in _node_outputs(graph) for p in _scope_parts(name)}


def inferred_shapes(model: ir.Model) -> dict[str, Dims | None]:
    """ONNX shape inference on a serialized copy: value name -> dims (int, a symbol's name, or
    None), or None for a value of unknown rank. Empty when inference fails (a model past 2 GB)."""
    import onnx
    import onnx_ir as ir

    try:
        proto = onnx.shape_inference.infer_shapes(ir.serde.serialize_model(model))
    except Exception:
        return {}
    found: dict[str, Dims | None] = {}
    for info in [*proto.graph.value_info, *proto.graph.output, *proto.graph.input]:
        tensor = info.type.tensor_type
        if not tensor.HasField("shape"):
            found[info.name] = None
            continue
        found[info.name] = tuple(d.dim_value if d.HasField("dim_value")
                                 else (d.dim_param or None) for d in tensor.shape.dim)
    return found


def _fits(want: Dims, got: Dims) -> bool:
    return len(want) == len(got) and all(
        not isinstance(w, int) or not isinstance(g, int) or w == g
        for w, g in zip(want, got, strict=True))


def _layout(want: Dims, got: Dims | None) -> str:
    """How the ONNX value's dims relate to the Keras output's: SAME, CHANNELS_FIRST,
    "ambiguous" (both fit, or the ONNX dims are unknown because shape inference failed as a
    whole) or "" (neither fits)."""
    if got is None:
        return SAME if len(want) <= 2 else "ambiguous"
    same = _fits(want, got)
    moved = len(want) >= 3 and _fits((want[0], want[-1], *want[1:-1]), got)
    if same and moved:
        return "ambiguous"
    return SAME if same else CHANNELS_FIRST if moved else ""


# Ops that keep their data input's layout (a walk back through them reaches the last transpose).
_LAYOUT_KEEPING = {"Conv", "ConvTranspose", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip",
                   "Elu", "Selu", "HardSigmoid", "HardSwish", "Softplus", "Mul", "Add", "Sub",
                   "Div", "BatchNormalization", "MaxPool", "AveragePool", "Identity", "Cast",
                   "Pad", "Neg", "Abs", "Exp", "Sqrt", "Pow", "Max", "Min", "PRelu", "Erf"}


def data_path_layout(graph: ir.Graph, name: str, nchw_inputs: set[str]) -> str:
    """SAME or CHANNELS_FIRST from the transpose the value's data path last went through
    (following each node's first non-constant input back); "" when the path passes an op that
    may change the layout otherwise."""
    values = {v.name: v for node in graph for v in node.outputs}
    value = values.get(name)
    for _ in range(10_000):
        if value is None:
            return ""
        if value.is_graph_input():
            return CHANNELS_FIRST if value.name in nchw_inputs else SAME
        node = value.producer()
        if node is None:
            return ""
        if node.op_type == "Transpose":
            perm = list(node.attributes.get_ints("perm", []) or [])
            rank = len(perm)
            if perm == [0, rank - 1, *range(1, rank - 1)]:
                return CHANNELS_FIRST
            if perm == [0, *range(2, rank), 1]:
                return SAME
            return ""
        if node.op_type not in _LAYOUT_KEEPING:
            return ""
        value = next((v for v in node.inputs if v is not None and not v.is_initializer()
                      and v.const_value is None), None)
    return ""
