"""TF/Keras -> ONNX through tf2onnx, with fallbacks.

Routes, tried in order until one gives a graph onnxruntime loads and whose numbers match
TensorFlow on the first parity feed:

1. tf2onnx on the source kind (``from_keras``, ``from_function``, the SavedModel loader +
   ``from_graph_def``, ``from_graph_def`` for a frozen graph, ``from_tflite``) at the wanted
   opset; a Keras model built on a dict goes to ``from_function`` on its call here;
2. for other Keras models, tf2onnx's ``from_function`` on the model's call (Keras 3 Sequential
   models fail in ``from_keras``'s output naming);
3. Keras' own ONNX export (``model.export(path, format="onnx")``, a dict signature for a dict
   model), for Keras models;
4. tf2onnx again at another opset (18, or 15 when 18 was the one that failed);
5. for functions, Keras models and frozen graphs, tf2onnx allowed onnxruntime's contrib ops
   (``com.microsoft``: ``MatrixInverse`` -> ``Inverse``); that graph runs on onnxruntime only.

Every failed attempt is recorded in ``ExportResult.notes``. When every route fails because ops
have no ONNX mapping, ``UnsupportedError`` names them.

After export the graph is edited with onnx-ir: inputs/outputs get the model's own names (made
unique as tf2onnx does: a Keras layer with three outputs gives ``lstm``, ``lstm_1``, ``lstm_2``),
dynamic dims get readable names ("batch"), and ``nchw_inputs`` adds a Transpose at the graph edge:

    before:  image[N,H,W,C] -> (model)
    after:   image[N,C,H,W] -> Transpose(perm=[0,2,3,1]) -> (model)
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from unframe import timing
from unframe.converters.frontends._tf.common import error_line
from unframe.converters.frontends._tf.native import TfModel, unique_names
from unframe.converters.frontends._tf.signature import call_specs, to_tf_specs
from unframe.errors import Blocker, ConversionError, UnsupportedError
from unframe.validate.runner import Runner, TensorSpec

MAX_OPSET = 18  # tf2onnx 1.17's newest
MIN_OPSET = 10
FALLBACK_OPSETS = (18, 15)


@dataclass
class Attempt:
    route: str
    tool: str
    opset: int
    build: Callable[[], onnx.ModelProto]


@dataclass
class Outcome:
    proto: onnx.ModelProto | None = None
    problem: str = ""
    unmapped: list[Blocker] = field(default_factory=list)
    parity_failed: bool = False


def clamp_opset(wanted: int) -> int:
    return max(MIN_OPSET, min(MAX_OPSET, wanted))


# -- routes ---------------------------------------------------------------------------------
def attempts(model: TfModel, inputs: Sequence[TensorSpec], opset: int) -> list[Attempt]:
    primary = _primary(model, inputs)
    tool = _TOOLS[model.kind]
    out = [Attempt(f"{tool} (opset {opset})", tool, opset, lambda: primary(opset))]
    if model.kind == "keras":
        if not isinstance(getattr(model.obj, "_inputs_struct", None), dict):  # else the first route
            out.append(Attempt(f"tf2onnx from_function on the model's call (opset {opset})",
                               "tf2onnx from_function", opset,
                               lambda: from_keras_call(model, inputs, opset)))
        out.append(Attempt(f"keras export format=onnx (opset {opset})",
                           "keras.Model.export(format='onnx')", opset,
                           lambda: keras_export(model, inputs, opset)))
    other = next(o for o in FALLBACK_OPSETS if o != opset)
    out.append(Attempt(f"{tool} (opset {other})", tool, other, lambda: primary(other)))
    contrib = _with_contrib_ops(model, inputs)
    if contrib is not None:
        out.append(Attempt(f"{tool} with onnxruntime's contrib ops (opset {opset})", tool, opset,
                           lambda: contrib(opset)))
    return out


CONTRIB = "com.microsoft"


def _with_contrib_ops(model: TfModel, inputs: Sequence[TensorSpec]
                      ) -> Callable[[int], onnx.ModelProto] | None:
    """The last route: tf2onnx allowed onnxruntime's contrib ops (``extra_opset`` com.microsoft),
    for TF ops standard ONNX has no op for (``MatrixInverse`` -> ``com.microsoft::Inverse``). Its
    graph runs on onnxruntime only; tried when every standard route failed."""
    from onnx import helper

    extra = [helper.make_opsetid(CONTRIB, 1)]
    if model.kind == "function":
        return lambda opset: from_function(model, inputs, opset, extra)
    if model.kind == "keras":
        return lambda opset: from_keras_call(model, inputs, opset, extra)
    if model.kind == "graph_def":
        return lambda opset: from_graph_def(model, inputs, opset, extra)
    return None


_TOOLS = {"keras": "tf2onnx from_keras", "function": "tf2onnx from_function",
          "saved_model": "tf2onnx from_saved_model", "tflite": "tf2onnx from_tflite",
          "graph_def": "tf2onnx from_graph_def"}


def _primary(model: TfModel, inputs: Sequence[TensorSpec]) -> Callable[[int], onnx.ModelProto]:
    if model.kind == "keras":
        return lambda opset: from_keras(model, inputs, opset)
    if model.kind == "function":
        return lambda opset: from_function(model, inputs, opset)
    if model.kind == "saved_model":
        return lambda opset: from_saved_model(model, inputs, opset)
    if model.kind == "graph_def":
        return lambda opset: from_graph_def(model, inputs, opset)
    return lambda opset: from_tflite(model, inputs, opset)


def from_keras(model: TfModel, inputs: Sequence[TensorSpec], opset: int) -> onnx.ModelProto:
    import tf2onnx

    register_tf2onnx_extensions()
    if isinstance(getattr(model.obj, "_inputs_struct", None), dict):
        return from_keras_call(model, inputs, opset)
    with warnings.catch_warnings():
        # tf2onnx calls dict-input models with a list; Keras warns but maps them by name.
        warnings.filterwarnings("ignore", message="The structure of `inputs` doesn't match")
        proto, _ = tf2onnx.convert.from_keras(model.obj, input_signature=to_tf_specs(inputs),
                                              opset=opset)
    return proto


def from_keras_call(model: TfModel, inputs: Sequence[TensorSpec], opset: int,
                    extra_opset: list[Any] | None = None) -> onnx.ModelProto:
    """tf2onnx's ``from_function`` on a function that calls the Keras model with its inputs in the
    structure it was built on (one tensor, a list, or a dict: keras-hub backbones refuse the list
    tf2onnx's ``from_keras`` passes, "The structure of `inputs` doesn't match"), returning the
    outputs in the order the frontend names them (``model.outputs``). Unlike ``from_keras`` it
    needs no output names from Keras (Keras 3 Sequential models fail there on ``keras_tensor_3``),
    and the constants it captures become initializers (``inline_captures``)."""
    import keras
    import tensorflow as tf
    import tf2onnx

    register_tf2onnx_extensions()
    net = model.obj
    struct = getattr(net, "_inputs_struct", None)
    names = [t.name for t in inputs]

    def call(*tensors: Any) -> list[Any]:
        if isinstance(struct, dict):
            key_of = {value.name: key for key, value in struct.items()}
            args: Any = {key_of.get(n, n): t for n, t in zip(names, tensors, strict=True)}
        elif len(tensors) == 1 and not isinstance(struct, (list, tuple)):
            args = tensors[0]
        else:
            args = list(tensors)
        result = net(args, training=False)
        if isinstance(result, dict) and all(name in result for name in model.outputs):
            return [result[name] for name in model.outputs]
        return keras.tree.flatten(result)

    specs = to_tf_specs(inputs)
    fn = tf.function(call, input_signature=specs)
    proto, _ = tf2onnx.convert.from_function(fn, input_signature=specs, opset=opset,
                                             extra_opset=extra_opset)
    return inline_captures(proto, fn.get_concrete_function(*specs))


def from_function(model: TfModel, inputs: Sequence[TensorSpec], opset: int,
                  extra_opset: list[Any] | None = None) -> onnx.ModelProto:
    import tf2onnx

    register_tf2onnx_extensions()
    specs = call_specs(model, inputs)
    proto, _ = tf2onnx.convert.from_function(model.obj, input_signature=specs, opset=opset,
                                             extra_opset=extra_opset)
    return inline_captures(proto, model.obj.get_concrete_function(*specs))


def inline_captures(proto: onnx.ModelProto, concrete: Any) -> onnx.ModelProto:
    """tf2onnx's ``from_function`` lists every non-resource capture of the traced function as a
    graph input: a constant the function closed over (an eager tensor a layer computed at build
    time, keras-hub Gemma's ``gemma_backbone_1/Mul/y:0``) becomes an input nobody feeds, and
    onnxruntime refuses the run. Each such input becomes the initializer it stands for::

        before:  inputs [x, mul/y:0]    Mul(x, mul/y:0)
        after:   inputs [x]             Mul(x, mul/y:0 = <the captured value>)
    """
    from onnx import numpy_helper

    captured = {}
    for external, internal in getattr(concrete.graph, "captures", ()):
        value = getattr(external, "numpy", None)
        if value is not None and getattr(external, "dtype", None) is not None \
                and external.dtype.name != "resource":
            captured[internal.name] = external
    graph = proto.graph
    for value_info in [v for v in graph.input if v.name in captured]:
        array = np.asarray(captured[value_info.name].numpy())
        graph.input.remove(value_info)
        graph.initializer.append(numpy_helper.from_array(array, value_info.name))
    return proto


def from_graph_def(model: TfModel, inputs: Sequence[TensorSpec], opset: int,
                   extra_opset: list[Any] | None = None) -> onnx.ModelProto:
    """A frozen graph: its Placeholders (and the defaults the caller feeds) in, the chosen tensors
    out; the shapes the frontend chose (fixed, or ``None`` where proven dynamic) override the
    Placeholders'; its lookup tables' contents as the graph's session holds them."""
    from unframe.converters.frontends._tf.graphdef import onnx_name, pin_defaults, tensor_name

    graph_def, session = model.obj
    names = [tensor_name(t.name) for t in inputs]
    shapes = {tensor_name(t.name): list(t.shape)
              for t in inputs if t.shape is not None}
    renames = {n: onnx_name(n) for n in names + list(model.graph_outputs)}
    pinned = pin_defaults(graph_def, {t.name.split(":")[0] for t in inputs})
    return frozen_to_onnx(pinned, names, list(model.graph_outputs), opset, shapes or None, renames,
                          extra_opset, session.tables(pinned))


def frozen_to_onnx(graph_def: Any, input_names: list[str], output_names: list[str], opset: int,
                   shape_override: dict[str, list[Any]] | None, renames: dict[str, str],
                   extra_opset: list[Any] | None = None,
                   tables: dict[bytes, tuple[Any, Any]] | None = None) -> onnx.ModelProto:
    """tf2onnx on a frozen graph. Its ``from_graph_def`` refuses a graph without inputs ("input_names
    needs to be provided") and takes no table contents, so those two go through the steps it is
    made of: grappler's inference optimization, ``process_tf_graph`` (with ``initialized_tables``)
    and tf2onnx's graph optimizer."""
    import tensorflow as tf
    import tf2onnx
    from tf2onnx import optimizer, tf_loader, tfonnx

    register_tf2onnx_extensions()
    if input_names and not tables:
        proto, _ = tf2onnx.convert.from_graph_def(graph_def, input_names=input_names,
                                                  output_names=output_names, opset=opset,
                                                  shape_override=shape_override,
                                                  tensors_to_rename=renames, extra_opset=extra_opset)
        return proto
    with tf.device("/cpu:0"):
        with tf.Graph().as_default():  # grappler reads a meta graph: not in eager mode
            optimized = tf_loader.tf_optimize(input_names, output_names, graph_def)
        with tf.Graph().as_default() as tf_graph:
            tf.import_graph_def(optimized, name="")
            graph = tfonnx.process_tf_graph(tf_graph, continue_on_error=True, opset=opset,
                                            extra_opset=extra_opset, shape_override=shape_override,
                                            input_names=input_names, output_names=output_names,
                                            tensors_to_rename=renames, initialized_tables=tables)
    graph = optimizer.optimize_graph(graph, catch_errors=True)
    return graph.make_model("converted from a frozen graph")


def from_saved_model(model: TfModel, inputs: Sequence[TensorSpec], opset: int
                     ) -> onnx.ModelProto:
    """tf2onnx's SavedModel loader freezes the signature; its rename map gives the graph the
    signature's input and output keys."""
    import tf2onnx
    from tf2onnx import tf_loader

    register_tf2onnx_extensions()
    tags = tf1_tags(model.path)
    if tags is not None:
        return from_tf1_saved_model(model, inputs, opset, tags)
    shapes = {f"{t.name}:0": list(t.shape) for t in inputs if t.shape is not None}
    graph_def, in_names, out_names, tables, renames = tf_loader.from_saved_model(
        str(model.path), None, None, None, [model.signature], None, False,
        return_initialized_tables=True, return_tensors_to_rename=True)
    shape_override = {n: shapes[renames[n] + ":0"] for n in in_names
                      if renames.get(n, "") + ":0" in shapes}
    proto, _ = tf2onnx.convert.from_graph_def(graph_def, input_names=in_names,
                                              output_names=out_names, opset=opset,
                                              tensors_to_rename=renames,
                                              shape_override=shape_override or None)
    return proto


def tf1_tags(path: Any) -> list[str] | None:
    """The tags of a TF1 SavedModel's serving meta graph (one with no object graph: written by
    ``tf.compat.v1.saved_model.Builder``, an Estimator's export), else None."""
    from tensorflow.python.saved_model import loader_impl

    metas = loader_impl.parse_saved_model(str(path)).meta_graphs
    if not metas or any(m.HasField("object_graph_def") and m.object_graph_def.nodes for m in metas):
        return None
    serving = [m for m in metas if "serve" in m.meta_info_def.tags] or list(metas)
    return list(serving[0].meta_info_def.tags)


def from_tf1_saved_model(model: TfModel, inputs: Sequence[TensorSpec], opset: int,
                         tags: list[str]) -> onnx.ModelProto:
    """A TF1 SavedModel, loaded as TF1 loads it (a session that runs its main op: its lookup
    tables filled from its assets) and frozen with the tables' contents. tf2onnx's own SavedModel
    loader goes through TF2's loader and grappler, which fail on such a model with tables
    ("Failed to import metagraph")."""
    import tensorflow as tf

    from unframe.converters.frontends._tf.graphdef import table_contents

    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as sess:
        meta = tf.compat.v1.saved_model.loader.load(sess, tags, str(model.path))
        sig = meta.signature_def[model.signature]
        in_names = [sig.inputs[k].name for k in sorted(sig.inputs)]
        out_names = [sig.outputs[k].name for k in model.outputs]
        whole = graph.as_graph_def()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            frozen = tf.compat.v1.graph_util.convert_variables_to_constants(  # inputs kept:
                sess, whole, [n.split(":")[0] for n in out_names + in_names])  # used or not
        tables = table_contents(sess, frozen)
    renames = {sig.inputs[k].name: k for k in sig.inputs}
    renames.update({sig.outputs[k].name: k for k in model.outputs})
    by_key = {t.name: list(t.shape) for t in inputs if t.shape is not None}
    shapes = {sig.inputs[k].name: by_key[k] for k in sig.inputs if k in by_key}
    return frozen_to_onnx(frozen, in_names, out_names, opset, shapes or None, renames,
                          tables=tables or None)


def from_tflite(model: TfModel, inputs: Sequence[TensorSpec], opset: int) -> onnx.ModelProto:
    import tf2onnx

    register_tf2onnx_extensions()
    # from_tflite ignores shape_override: finish() writes static dims on the graph inputs.
    proto, _ = tf2onnx.convert.from_tflite(str(model.path), opset=opset)
    for value in list(proto.graph.input) + list(proto.graph.output):
        if value.name in model.tflite_names:
            _rename_proto_value(proto.graph, value.name, model.tflite_names[value.name])
    return proto


def keras_export(model: TfModel, inputs: Sequence[TensorSpec], opset: int) -> onnx.ModelProto:
    """Keras' own exporter (tf2onnx from_function on the model's serving function)."""
    import contextlib
    import io

    with tempfile.TemporaryDirectory(prefix="unframe-keras-") as tmp:
        path = os.path.join(tmp, "model.onnx")
        with contextlib.redirect_stdout(io.StringIO()):  # it prints "Saved artifact at ..."
            model.obj.export(path, format="onnx", input_signature=keras_signature(model, inputs),
                             opset_version=opset, verbose=False)
        return onnx.load(path)


def keras_signature(model: TfModel, inputs: Sequence[TensorSpec]) -> list[Any]:
    """Keras' export takes the signature in the structure the model was built on: a dict-input
    model (every keras-hub backbone) gets one dict of specs, not a flat list."""
    specs = to_tf_specs(inputs)
    struct = getattr(model.obj, "_inputs_struct", None)
    if isinstance(struct, dict):
        by_name = dict(zip([t.name for t in inputs], specs, strict=True))
        return [{key: by_name[value.name] for key, value in struct.items()}]
    return specs


def _rename_proto_value(graph: onnx.GraphProto, old: str, new: str) -> None:
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        if vi.name == old:
            vi.name = new
    for node in graph.node:
        node.input[:] = [new if n == old else n for n in node.input]
        node.output[:] = [new if n == old else n for n in node.output]


# -- tf2onnx extension ----------------------------------------------------------------------
@contextlib.contextmanager
def grouped_convs_traced_plain() -> Iterator[None]:
    """While a route traces the model: Keras' TensorFlow backend wraps a grouped convolution
    (``Conv2D(groups=g)``, ConvNeXt's depthwise 7x7) in an XLA-compiled ``tf.function``, since TF's
    CPU kernel lacks groups; the graph then holds a ``StatefulPartitionedCall`` tf2onnx can't
    inline or map. Tracing only builds a graph (nothing runs the CPU kernel), so here the
    convolution is traced as the plain ``tf.nn.convolution`` it wraps, which tf2onnx maps to
    ``Conv(group=g)``. Before/after::

        StatefulPartitionedCall(f=__inference__conv_xla)  ->  Conv2D(x, W[kh, kw, C/g, F])

    The parity reference still runs Keras' own (XLA) convolution. Nothing changes when the
    installed Keras has no such wrapper."""
    try:
        import keras.src.backend.tensorflow.nn as knn
    except ImportError:
        yield
        return
    original = getattr(knn, "conv", None)
    if original is None or not hasattr(knn, "_convert_data_format"):
        yield
        return

    def conv(inputs: Any, kernel: Any, strides: Any = 1, padding: str = "valid", data_format: Any = None,
             dilation_rate: Any = 1) -> Any:
        import tensorflow as tf
        from keras.src import backend

        fmt = backend.standardize_data_format(data_format)
        channels = inputs.shape[-1] if fmt == "channels_last" else inputs.shape[1]
        if channels is None or channels == kernel.shape[-2] or len(inputs.shape) != 4:
            return original(inputs, kernel, strides, padding, data_format, dilation_rate)
        return tf.nn.convolution(inputs, kernel, strides, padding.upper(),
                                 data_format=knn._convert_data_format(fmt, len(inputs.shape)),
                                 dilations=dilation_rate)

    knn.conv = conv
    try:
        yield
    finally:
        knn.conv = original


_REGISTERED = False


def register_tf2onnx_extensions() -> None:
    """Fill tf2onnx 1.17's gaps through its own ``@tf_op`` hook (not a fork).

    ``Erfc`` (exact GELU, ``tf.nn.gelu(approximate=False)``) has no handler: tf2onnx leaves it
    in the graph and onnxruntime rejects the model. Before/after:

        Erfc(x)  ->  Sub(1, Erf(x))
    """
    global _REGISTERED
    if _REGISTERED:
        return
    from tf2onnx import utils
    from tf2onnx.handler import tf_op

    handled = {name for opsets in tf_op.get_opsets().values() for d in opsets for name in d}
    if "Erfc" not in handled:
        class Erfc:
            @classmethod
            def version_9(cls, ctx: Any, node: Any, **kwargs: Any) -> None:
                dtype = utils.map_onnx_to_numpy_type(ctx.get_dtype(node.input[0]))
                erf = ctx.make_node("Erf", [node.input[0]], op_name_scope=node.name)
                one = ctx.make_const(utils.make_name(f"{node.name}_one"), np.array(1, dtype=dtype))
                node.type = "Sub"
                ctx.replace_inputs(node, [one.output[0], erf.output[0]])

        tf_op("Erfc")(Erfc)
    _REGISTERED = True


# -- checks -----------------------------------------------------------------------------------
def unmapped_ops(proto: onnx.ModelProto) -> list[Blocker]:
    """Nodes tf2onnx left unconverted (TF/TFLite op types that are no ONNX op)."""
    found: dict[str, Blocker] = {}
    for node in _all_nodes(proto):
        domain = node.domain or ""
        if domain in ("", "ai.onnx", "ai.onnx.ml"):
            if _is_onnx_op(node.op_type, domain):
                continue
        elif domain == "com.microsoft" or _is_function(proto, node):
            continue  # onnxruntime contrib ops / local functions
        if node.op_type not in found:
            found[node.op_type] = Blocker(node.op_type, "tf2onnx has no ONNX mapping for this op",
                                          node=node.name, domain=domain,
                                          hint="replace the op in the model, or register a "
                                               "tf2onnx handler for it")
    return list(found.values())


def _is_onnx_op(op_type: str, domain: str) -> bool:
    return onnx.defs.has(op_type, "" if domain == "ai.onnx" else domain)


def _is_function(proto: onnx.ModelProto, node: onnx.NodeProto) -> bool:
    return any(f.name == node.op_type and f.domain == node.domain for f in proto.functions)


def _all_nodes(proto: onnx.ModelProto) -> list[onnx.NodeProto]:
    out: list[onnx.NodeProto] = []
    stack = [proto.graph] + [f for f in proto.functions]
    while stack:
        graph = stack.pop()
        for node in graph.node:
            out.append(node)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    stack.append(attr.g)
                stack.extend(attr.graphs)
    return out


def try_attempt(attempt: Attempt, check: Callable[[onnx.ModelProto], str]) -> Outcome:
    """Run one route; ``check`` returns a problem ("" when the graph loads and matches)."""
    try:
        with grouped_convs_traced_plain(), timing.tool(attempt.tool):
            proto = attempt.build()
    except Exception as exc:  # tf2onnx/keras raise anything from ValueError to KeyError
        return Outcome(problem=f"{attempt.route} failed: {error_line(exc)}")
    unmapped = unmapped_ops(proto)
    if unmapped:
        ops = ", ".join(b.op for b in unmapped)
        return Outcome(proto, f"{attempt.route} left op(s) with no ONNX mapping: {ops}",
                       unmapped=unmapped)
    problem = check(proto)
    return Outcome(proto, f"{attempt.route}: {problem}" if problem else "",
                   parity_failed=problem.startswith("parity"))


def give_up(model: TfModel, outcomes: Sequence[Outcome]) -> None:
    """Raise the error that explains why no route worked."""
    unmapped = next((o.unmapped for o in outcomes if o.unmapped), None)
    notes = "; ".join(o.problem for o in outcomes)
    if unmapped and all(o.unmapped or o.proto is None for o in outcomes):
        ops = ", ".join(f"{b.op} (node {b.node!r})" for b in unmapped)
        raise UnsupportedError(f"{model.source}: tf2onnx can't map op(s) {ops} to ONNX",
                               "replace them in the model, or register a tf2onnx handler",
                               blockers=unmapped, details={"attempts": notes})
    raise ConversionError(f"{model.source}: every TF->ONNX route failed ({notes})",
                          "run with --debug; try another --opset or report the model",
                          details={"attempts": notes})


# -- graph edits ------------------------------------------------------------------------------
def finish(proto: onnx.ModelProto, inputs: Sequence[TensorSpec], outputs: Sequence[str],
           batch_named: bool, nchw: Sequence[str],
           dim_names: dict[tuple[str, int], str] | None = None) -> ir.Model:
    """``dim_names``: names the caller gave dynamic axes, ``{(input, axis): name}``."""
    model = ir.serde.deserialize_model(proto)
    _import_used_domains(model)
    _name_io(model.graph.inputs, [t.name for t in inputs])
    if outputs:
        _name_io(model.graph.outputs, unique_names(outputs))
    _name_dims(model, batch_named, dim_names or {}, {t.name: t.shape for t in inputs})
    for name in nchw:
        transpose_input_to_nchw(model, name)
    return model


def _import_used_domains(model: ir.Model) -> None:
    """tf2onnx can put an onnxruntime contrib op (``com.microsoft::Range``) inside a Loop body
    without importing its domain: onnxruntime runs it, onnx.checker refuses the model. The domain
    is imported at version 1, the only one onnxruntime's contrib ops have::

        before:  opset_imports {"": 18}                       Loop { Range[com.microsoft] }
        after:   opset_imports {"": 18, "com.microsoft": 1}
    """
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.domain == "com.microsoft" and node.domain not in model.opset_imports:
            model.opset_imports[node.domain] = 1


def _name_io(values: Sequence[ir.Value], names: list[str]) -> None:
    """Positional renames when a route named tensors after graph internals ("Identity:0")."""
    if len(values) != len(names) or [v.name for v in values] == names:
        return
    if set(v.name for v in values) == set(names):
        return  # same names, other order: leave it, runners map by name
    taken = {v.name for v in values}
    for value, name in zip(values, names, strict=False):
        if value.name != name and name in taken:
            value.name = f"{value.name}__tmp"
    for value, name in zip(values, names, strict=False):
        value.name = name


def _name_dims(model: ir.Model, batch_named: bool, given: dict[tuple[str, int], str],
               shapes: dict[str, tuple[int | str | None, ...] | None]) -> None:
    """tf2onnx names unknown dims "unk__12"; give them stable names: the caller's, else
    "batch" (axis 0 of a Keras-like model) or "<input>_dim<axis>". Dims the input spec fixes
    are written as ints (routes such as from_tflite ignore the requested shapes)."""
    renames: dict[str, str] = {}
    for value in model.graph.inputs:
        if value.shape is None:
            continue
        dims = list(value.shape)
        wanted = shapes.get(value.name)
        for axis, dim in enumerate(dims):
            if isinstance(dim, int):
                continue
            if wanted is not None and len(wanted) == len(dims) and isinstance(wanted[axis], int):
                dims[axis] = wanted[axis]
                continue
            new = given.get((value.name, axis)) or (
                "batch" if axis == 0 and batch_named else f"{value.name}_dim{axis}")
            if isinstance(dim, ir.SymbolicDim) and dim.value:
                renames.setdefault(dim.value, new)
            dims[axis] = new
        value.shape = ir.Shape(dims)
    for value in model.graph.outputs:
        if value.shape is None:
            continue
        dims = [renames.get(d.value, d.value) if isinstance(d, ir.SymbolicDim) and d.value else d
                for d in value.shape]
        if batch_named and dims and not isinstance(dims[0], int):
            dims[0] = "batch"
        value.shape = ir.Shape(dims)


def transpose_input_to_nchw(model: ir.Model, name: str) -> None:
    """Make input ``name`` channels-first; a Transpose restores channels-last for the graph."""
    graph = model.graph
    index = next(i for i, v in enumerate(graph.inputs) if v.name == name)
    old = graph.inputs[index]
    rank = len(old.shape)
    perm_in = [0, rank - 1] + list(range(1, rank - 1))  # NH..C -> NC..H
    perm_back = [0] + list(range(2, rank)) + [1]  # NC..H -> NH..C
    new = ir.Value(name=name, shape=ir.Shape([old.shape[i] for i in perm_in]), type=old.type)
    old.name = f"{name}__channels_last"
    node = ir.node("Transpose", [new], attributes={"perm": perm_back},
                   name=f"{name}__to_channels_last")
    node.outputs[0].name = f"{name}__nhwc"
    node.outputs[0].shape = old.shape
    node.outputs[0].type = old.type
    old.replace_all_uses_with(node.outputs[0])
    graph.inputs[index] = new
    graph.insert_before(graph[0], node) if len(graph) else graph.append(node)


def load_problem(onnx_model: ir.Model, runner_factory: Callable[[ir.Model], Runner]) -> str:
    """"" when onnxruntime loads the graph, else why not."""
    try:
        runner_factory(onnx_model)
    except Exception as exc:
        return f"onnxruntime rejects the graph: {error_line(exc)}"
    return ""


def parity_problem(ref: Runner, onnx_model: ir.Model,
                   feeds: dict[str, np.ndarray] | list[dict[str, np.ndarray]],
                   runner_factory: Callable[[ir.Model], Runner],
                   tolerances: dict[str, tuple[float, float]] | None = None,
                   results: list[Any] | None = None) -> str:
    """"" when onnxruntime loads the graph and matches ``ref`` on the feeds (one feed, or a list:
    the first and a probe with the dynamic axes changed), else why not (``tolerances``: per-output
    (atol, rtol) the model's compute precision needs). The comparison is appended to ``results``."""
    from unframe.validate.compare import compare

    try:
        candidate = runner_factory(onnx_model)
    except Exception as exc:
        return f"onnxruntime rejects the graph: {error_line(exc)}"
    try:
        result = compare(ref, candidate, feeds if isinstance(feeds, list) else [feeds],
                         stage="export", defaults=tolerances or None)
    except Exception as exc:
        return f"running the graph failed: {error_line(exc)}"
    if results is not None:
        results.append(result)
    return "" if result else f"parity: {result.reason}"

