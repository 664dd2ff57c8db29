"""TF/Keras -> .tflite through TensorFlow's own TFLite converter.

The model (a Keras model, a tf.function, a SavedModel signature) is traced as one tf.function
taking the frontend's input specs flat, in order, and returning its outputs flat in the order the
TF frontend's runner names them; ``TFLiteConverter.from_concrete_functions([fn])`` then converts
it. No ``trackable_obj`` is passed on purpose: with one, TF 2.21's converter keeps the variables
as resource variables (VAR_HANDLE/READ_VARIABLE with no initializer) and LiteRT's interpreter
outputs NaN; without it the variables are frozen into constants. (``from_keras_model`` would
do the same work through a SavedModel written to disk first.)

The subgraph's inputs and outputs follow the function's, so the I/O record pairs them by
position (and checks the input names where TF kept them). A .tflite source is passed through
(its own flatbuffer, restamped). A frozen TF1 graph goes through TF's v1 converter on its session.
``--precision fp16``: ``Optimize.DEFAULT`` with float16 as the only supported type, TF's
float16 weight quantization (weights stored in 16 bits, dequantized to float32 at load).
"""

from __future__ import annotations

import re
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unframe import timing
from unframe.converters.backends.litert import common
from unframe.converters.base import Artifact, Target
from unframe.errors import Blocker, MissingExtraError, UnframeError, UnsupportedError
from unframe.validate.runner import TensorSpec

if TYPE_CHECKING:
    from unframe.converters.frontends._tf.native import TfModel

_DONE: weakref.WeakKeyDictionary[Any, tuple[str, Artifact | UnsupportedError]] = weakref.WeakKeyDictionary()


def convert_from_tf(native: TfModel, example: Sequence[TensorSpec], target: Target, workdir: Path,
                    *, output_names: Sequence[str] | None = None) -> Artifact:
    """``native``: the TF frontend's TfModel; ``example``: the input specs to convert at (the
    frontend's resolved specs: a ``None`` dim stays dynamic). ``output_names``: the names the
    source runner gives the outputs (default: ``native.outputs``, else ``output_<i>``)."""
    done = _outcome(native, example, target, output_names)
    if isinstance(done, UnsupportedError):
        raise done
    return done


def check_from_tf(native: TfModel, example: Sequence[TensorSpec], target: Target,
                  *, output_names: Sequence[str] | None = None) -> list[Blocker]:
    """Every blocker, found by converting (kept for the ``convert_from_tf`` that follows)."""
    done = _outcome(native, example, target, output_names)
    return list(done.blockers) if isinstance(done, UnsupportedError) else []


def _outcome(native: TfModel, example: Sequence[TensorSpec], target: Target,
             output_names: Sequence[str] | None) -> Artifact | UnsupportedError:
    key = repr((common.precision(target), [t.to_dict() for t in example], list(output_names or []),
                common.quantize_key(target)))
    holder = native.obj  # TfModel (a dataclass) can't be a weak key; the model object it holds can
    try:
        cached = _DONE.get(holder)
    except TypeError:  # a SavedModel's (loaded, fn) tuple: no cache
        holder, cached = None, None
    if cached is not None and cached[0] == key:
        return cached[1]
    try:
        done: Artifact | UnsupportedError = _convert(native, list(example), target, output_names)
    except UnsupportedError as exc:
        done = exc
    if holder is not None:
        _DONE[holder] = (key, done)
    return done


def _convert(native: TfModel, specs: list[TensorSpec], target: Target, output_names: Sequence[str] | None
             ) -> Artifact:
    precision = common.precision(target)
    if native.kind == "tflite":
        return _passthrough(native, target)
    tf = _import()
    started = time.perf_counter()
    with common.quiet():
        if native.kind == "graph_def":
            converter, out_dtypes = _graph_def_converter(tf, native, specs)
        else:
            fn, out_dtypes = _traced(tf, native, specs)
            converter = tf.lite.TFLiteConverter.from_concrete_functions([fn])
        request = target.get("quantize")
        quantized = ""
        if request is not None:
            from unframe.converters.backends.litert.quantize import tf_configure

            quantized = tf_configure(tf, converter, request, [t.name for t in specs])
        elif precision == "fp16":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            converter.target_spec.supported_types = [tf.float16]
        try:
            with timing.tool(f"tensorflow {tf.__version__} TFLiteConverter"):
                content = bytes(converter.convert())
        except UnframeError:  # calibration sets that don't fit the inputs: the user's to fix
            raise
        except Exception as exc:  # noqa: BLE001 - ConverterError and whatever MLIR raises
            raise refusal(exc) from exc
    seconds = time.perf_counter() - started
    names_out = _output_names(native, output_names, len(out_dtypes))
    tensors_in, tensors_out = common.tensor_names(content)
    if len(tensors_in) != len(specs) or len(tensors_out) != len(names_out):
        raise UnsupportedError("TFLite's converter changed the model's inputs or outputs "
                               f"({len(tensors_in)} in, {len(tensors_out)} out; expected {len(specs)}, {len(names_out)})",
                               blockers=[Blocker("*", "the .tflite's inputs or outputs don't match the model's")])
    tensors_in = _by_name(tensors_in, [_node_name(t.name, i) for i, t in enumerate(specs)])
    record = common.io_record(tensors_in, [t.name for t in specs], [t.dtype for t in specs],
                              [list(t.shape or ()) for t in specs], tensors_out, names_out, out_dtypes)
    notes = [f"converted by TensorFlow {_tf_version()}'s TFLite converter in {seconds:.1f} s"
             + (" with 16-bit weights (float16 weight quantization)" if precision == "fp16" and not quantized else "")]
    artifact = common.make_artifact(content, record, target, f"tensorflow {_tf_version()} TFLiteConverter",
                                    notes + ([quantized] if quantized else []))
    return common.quantized(artifact, content, target) if quantized else artifact


def _import() -> Any:
    from unframe.quiet import quiet_tensorflow_env

    quiet_tensorflow_env()
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise MissingExtraError("converting a TF/Keras model to LiteRT", "litert", "tensorflow") from exc
    return tf


def _tf_version() -> str:
    from unframe.distributions import dist_version

    return dist_version("tensorflow", "tensorflow-cpu") or "?"


_NODE_NAME = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\\/>-]*$")  # what TF accepts as a placeholder's name


def _node_name(name: str, index: int) -> str:
    """A placeholder name TF takes for the input (TF warns and renames one it doesn't)."""
    clean = re.sub(r"[^A-Za-z0-9_.]", "_", name.split(":")[0])
    return clean if clean and _NODE_NAME.match(clean) else f"input_{index}"


def _traced(tf: Any, native: TfModel, specs: list[TensorSpec]) -> tuple[Any, list[str]]:
    """A concrete function of the flat inputs returning the flat outputs; their dtypes."""
    signature = [tf.TensorSpec([None if d is None else int(d) for d in (t.shape or ())],
                               tf.string if t.dtype == "str" else tf.as_dtype(t.dtype), name=_node_name(t.name, i))
                 for i, t in enumerate(specs)]
    call = _caller(tf, native, specs)
    fn = tf.function(lambda *xs: call(list(xs)), input_signature=signature, autograph=False)
    concrete = fn.get_concrete_function()
    return concrete, [out.dtype.as_numpy_dtype.__name__ if out.dtype != tf.string else "str"
                      for out in concrete.outputs]


def _caller(tf: Any, native: TfModel, specs: list[TensorSpec]) -> Any:
    """How the TF frontend's runners call each kind, on tensors: flat outputs."""
    names = [t.name for t in specs]
    if native.kind == "keras":
        import keras

        model = native.obj
        struct = getattr(model, "_inputs_struct", None)

        def keras_call(xs: list[Any]) -> list[Any]:
            if isinstance(struct, dict):
                key_of = {value.name: key for key, value in struct.items()}
                args: Any = {key_of.get(n, n): x for n, x in zip(names, xs, strict=True)}
            elif len(xs) == 1 and not isinstance(struct, (list, tuple)):
                args = xs[0]
            else:
                args = list(xs)
            result = model(args, training=False)
            if isinstance(result, dict) and all(n in result for n in native.outputs):
                return [result[n] for n in native.outputs]
            return list(keras.tree.flatten(result))

        return keras_call
    if native.kind == "saved_model":
        _, signature_fn = native.obj

        def signature_call(xs: list[Any]) -> list[Any]:
            result = signature_fn(**dict(zip(names, xs, strict=True)))
            return [result[n] for n in native.outputs]

        return signature_call

    def function_call(xs: list[Any]) -> list[Any]:
        args: Any = xs if native.structure is None else tf.nest.pack_sequence_as(native.structure, xs)
        return list(tf.nest.flatten(native.obj(*args)))

    return function_call


def _graph_def_converter(tf: Any, native: TfModel, specs: list[TensorSpec]) -> tuple[Any, list[str]]:
    """A frozen TF1 graph: TF's v1 converter on the frontend's session, inputs resized to specs."""
    _, session = native.obj
    graph = session.graph
    inputs = [graph.get_tensor_by_name(t.name if ":" in t.name else f"{t.name}:0") for t in specs]
    outputs = [graph.get_tensor_by_name(n if ":" in n else f"{n}:0") for n in native.graph_outputs]
    for tensor, spec in zip(inputs, specs, strict=True):
        tensor.set_shape([None if d is None else int(d) for d in spec.shape or ()])
    converter = tf.compat.v1.lite.TFLiteConverter.from_session(session, inputs, outputs)
    return converter, [t.dtype.as_numpy_dtype.__name__ for t in outputs]


def _output_names(native: TfModel, given: Sequence[str] | None, count: int) -> list[str]:
    if given:
        if len(given) != count:
            raise UnsupportedError(f"{len(given)} output names for {count} outputs",
                                   blockers=[Blocker("*", "output names don't match the outputs")])
        return list(given)
    own = list(native.outputs or native.graph_outputs)
    return own if len(own) == count else [f"output_{i}" for i in range(count)]


def _by_name(tensors: list[str], wanted: list[str]) -> list[str]:
    """The subgraph's input tensors in the specs' order: by name where TF kept every name, else
    as they stand (the traced function's order)."""
    if sorted(tensors) == sorted(wanted):
        return list(wanted)
    return tensors


def _passthrough(native: TfModel, target: Target) -> Artifact:
    """A .tflite source is its own artifact (fp32 only: TFLite can't re-quantize a flatbuffer)."""
    from unframe.converters.backends.litert import flatbuf

    if common.precision(target) != "fp32":
        raise UnsupportedError("a .tflite source can't be converted to another precision",
                               "convert the TF/Keras or torch model it came from",
                               blockers=[Blocker("*", "--precision fp16 on a .tflite source",
                                                 hint="convert from the original model")])
    assert native.path is not None
    content = flatbuf.read_file(native.path)
    info = flatbuf.describe(content, str(native.path))
    tensors_in, tensors_out = [t["tensor"] for t in info["inputs"]], [t["tensor"] for t in info["outputs"]]
    names = native.tflite_names  # as the TF frontend named them (its signature keys)
    record = common.io_record(tensors_in, [names.get(t, t) for t in tensors_in],
                              [_np_dtype(t["dtype"]) for t in info["inputs"]],
                              [t["shape"] for t in info["inputs"]], tensors_out,
                              [names.get(t, t) for t in tensors_out], [_np_dtype(t["dtype"]) for t in info["outputs"]])
    for entry in record["inputs"]:
        entry["shape"] = [None if d == "?" else d for d in entry["shape"]]
    artifact = common.make_artifact(content, record, target, "passthrough (the source is a .tflite)",
                                    ["the source is a .tflite: its flatbuffer is the artifact, restamped"])
    artifact.metadata["built_here"] = False  # its bytes came from outside: the runner isolates it
    artifact.path = native.path
    return artifact


def _np_dtype(onnx_name: str) -> str:
    return {"float": "float32", "double": "float64", "string": "str"}.get(onnx_name, onnx_name)


# TF's converter names the ops it can't take in these forms
_ERROR_LINE = re.compile(r"error: ([^\n]*)")
_OP_NAME = re.compile(r"'((?:tf|tfl|tf_executor|mhlo|stablehlo)\.\w+)'")
_NO_LOWERING = "TFLite's converter can't lower it to a LiteRT builtin op"
_NO_BUILTIN_HINT = ("LiteRT's builtin ops don't include it (Select TF ops need a runtime with the "
                    "Flex delegate); --to onnx may take it")


def refusal(exc: BaseException) -> UnsupportedError:
    """One blocker per op the converter's MLIR errors name (its own reason where it gives one,
    e.g. "requires element_shape to be static"), else one with its first line."""
    text = str(exc)[:20000]
    reasons: dict[str, str] = {}
    for line in _ERROR_LINE.findall(text):
        match = _OP_NAME.search(line)
        if match is None:
            continue
        op, rest = match.group(1), line[match.end():].strip()
        own = rest[3:].strip() if rest.startswith("op ") else ""
        if op not in reasons or (own and not reasons[op]):
            reasons[op] = own
    line = common.first_line(exc)
    blockers = [Blocker(op, f"TFLite's converter: {why}" if why else _NO_LOWERING,
                        hint="" if why else _NO_BUILTIN_HINT)
                for op, why in list(reasons.items())[:10]] or [
        Blocker("*", f"TFLite's converter: {line}", hint=_NO_BUILTIN_HINT)]
    return UnsupportedError(f"TFLite's converter can't convert the model ({blockers[0].op}: "
                            f"{blockers[0].reason[:160]})", "run `unframe check --to litert` for the blockers",
                            blockers=blockers)
