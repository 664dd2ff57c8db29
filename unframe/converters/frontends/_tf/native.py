"""Load TensorFlow/Keras sources into one ``TfModel`` description.

Sources: a ``keras.Model`` object, a ``tf.Module`` (its ``__call__`` tf.function), a
``tf.function``, a ``.keras`` / ``.h5`` file (Keras ``safe_mode``), a SavedModel directory (one
signature) and a ``.tflite`` file.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unframe import timing
from unframe.converters.frontends._tf.common import error_line, numpy_name, quiet_tensorflow
from unframe.errors import InputError, TrustRequiredError, UsageError
from unframe.validate.runner import TensorSpec

DEFAULT_SIGNATURE = "serving_default"
KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")


@dataclass
class TfModel:
    """A loaded TF/Keras model and what the frontend needs to know about it.

    ``kind`` is "keras", "function" (tf.function / tf.Module / ConcreteFunction), "saved_model",
    "tflite" or "graph_def" (a frozen TF1 graph). ``inputs`` may be empty for a tf.function without
    an input signature: the InputSpec must then say what the inputs are, unless ``inputs_known``
    (a function that takes no inputs). ``structure`` is a function's input structure when its
    signature nests tensors (a dict argument): the flat inputs are packed into it to call it. ``int_high`` is the exclusive upper bound of generated
    integer inputs (the smallest Embedding ``input_dim``, or a small default).
    """

    kind: str
    obj: Any
    source: str
    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    path: Path | None = None
    signature: str | None = None
    int_high: int = 3
    named_specs: bool = True  # False: a tf.function whose input_signature has unnamed specs
    tflite_names: dict[str, str] = field(default_factory=dict)  # tensor name -> signature key
    inputs_known: bool = False  # ``inputs`` is the whole list even when empty
    structure: Any = None  # nested input signature of a function (tf.nest structure of specs)
    graph_outputs: list[str] = field(default_factory=list)  # a GraphDef's output tensor names
    # A tf.function without input_signature, made anew: once traced with a dynamic axis, TF hands
    # that general trace to any narrower spec, so an export at fixed shapes needs a fresh one.
    fresh: Any = None
    memo: dict[Any, Any] | None = None  # TF's outputs per feed while the export checks itself


def is_saved_model_dir(path: Path) -> bool:
    return path.is_dir() and ((path / "saved_model.pb").is_file()
                              or (path / "saved_model.pbtxt").is_file())


def load(source: Any, trust: bool, signature: str | None, custom_objects: Any = None,
         outputs: Any = None) -> TfModel:
    """``custom_objects``: a .py path, module or dict of the model's custom Keras classes
    (see ``custom.resolve``); used by .keras/.h5 files only. ``outputs``: a frozen GraphDef's
    output tensor names."""
    quiet_tensorflow()
    if isinstance(source, (str, os.PathLike)):
        return load_path(Path(source), trust, signature, custom_objects, outputs)
    return from_object(source, signature)


# -- files ----------------------------------------------------------------------------------
def load_path(path: Path, trust: bool, signature: str | None, custom_objects: Any = None,
              outputs: Any = None) -> TfModel:
    if not path.exists():
        raise InputError(f"{path}: no such file or directory", "check the path")
    if path.is_dir():
        if not is_saved_model_dir(path):
            raise InputError(f"{path}: a directory but not a SavedModel (no saved_model.pb)",
                             "pass a SavedModel directory, or a .keras/.h5/.tflite file")
        return load_saved_model(path, signature)
    suffix = path.suffix.lower()
    if path.stat().st_size == 0:
        raise InputError(f"{path}: the file is empty", "re-export the model")
    if suffix in KERAS_SUFFIXES:
        return load_keras_file(path, trust, custom_objects)
    if suffix == ".tflite":
        return load_tflite(path)
    if suffix == ".pb":
        from unframe.converters.frontends._tf import graphdef

        if graphdef.is_saved_model_file(path):
            return load_saved_model(path.parent, signature)
        return load_graph_def(path, trust, outputs)
    raise InputError(f"{path}: not a TensorFlow/Keras model file (suffix {suffix or 'none'})",
                     "pass a .keras, .h5, .tflite or frozen graph .pb file or a SavedModel directory")


def load_graph_def(path: Path, trust: bool, outputs: Any) -> TfModel:
    from unframe.converters.frontends._tf import graphdef

    graph_def = graphdef.parse(path)
    graphdef.check_trust(path, graph_def, trust)
    graphdef.check_tables(path, graph_def)
    graph_def = graphdef.name_tables(graph_def)
    tensors = graphdef.outputs(path, graph_def, outputs)
    session = graphdef.GraphSession(graph_def, path)
    return TfModel("graph_def", (graph_def, session), str(path), graphdef.placeholders(graph_def),
                   [graphdef.onnx_name(t) for t in tensors], path=path, inputs_known=True,
                   graph_outputs=tensors)


def load_keras_file(path: Path, trust: bool, custom_objects: Any = None) -> TfModel:
    from unframe.converters.frontends._tf import probes

    probes.check_keras_file(path)  # the archive, and HDF5 on its weights in a child process first
    lambdas = lambda_layers(path)
    if lambdas and not trust:
        raise TrustRequiredError(
            f"{path}: Lambda layer(s) {', '.join(lambdas)} hold Python code that runs when the "
            "model is loaded; a file from someone else could run anything on this machine",
            "pass --trust (trust=True) only if you trust where the file came from")
    from unframe.converters.frontends._tf import custom

    resolved = custom.resolve(custom_objects, trust)
    import keras

    try:
        with timing.tool("keras.saving.load_model"):
            model = keras.saving.load_model(path, compile=False, safe_mode=not trust,
                                            custom_objects=resolved[0] if resolved else None)
    except TrustRequiredError:
        raise
    except Exception as exc:  # keras raises ValueError/OSError/KeyError/... on bad files
        if "safe_mode" in str(exc) and not trust:
            raise TrustRequiredError(
                f"{path}: loading needs Keras' unsafe mode ({error_line(exc)})",
                "pass --trust (trust=True) only if you trust where the file came from") from exc
        missing = missing_custom_object(exc)
        if missing is not None:
            raise _missing_error(path, *missing, resolved[1] if resolved else None) from exc
        raise InputError(f"{path}: not a readable Keras model ({error_line(exc)})",
                         "check that the file is complete; re-save it with model.save()") from exc
    return from_keras(model, str(path), path)


# Keras 3: "Could not locate class 'Scale'" (.keras); legacy .h5: "Unknown layer: 'Scale'"
_MISSING = (
    re.compile(r"Could not locate (class|function) '([^']+)'"),
    re.compile(r"Unknown (layer|loss|metric|activation|optimizer|initializer|regularizer|"
               r"constraint|object|class|function)[^:'\n]*: '?([A-Za-z_][\w.>]*)'?"),
)


def missing_custom_object(exc: BaseException) -> tuple[str, str] | None:
    """(kind, name) when Keras failed because the file names a class or function it doesn't
    know (a custom one), else None. Looks through the exception's causes too."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for pattern in _MISSING:
            match = pattern.search(str(current))
            if match:
                kind = "function" if match.group(1) in ("function", "activation") else "class"
                return kind, match.group(2).rsplit(">", 1)[-1]
        current = current.__cause__ or current.__context__
    return None


def _missing_error(path: Path, kind: str, name: str, given: str | None) -> InputError:
    what = ("a custom layer or subclassed model" if kind == "class"
            else "a custom activation, loss or metric")
    if given is None:
        return InputError(f"{path}: needs the custom {kind} {name!r} ({what})",
                          "pass --custom-objects module.py that defines it (with --trust)")
    return InputError(f"{path}: needs the custom {kind} {name!r} ({what}), which {given} does "
                      "not provide", f"define {name} in that module, or list it in its __all__")


def lambda_layers(path: Path) -> list[str]:
    """Names of Lambda layers in a .keras/.h5 file's config, read without deserializing it
    (so that the check itself runs no code from the file)."""
    config = _keras_config(path)
    if config is None:
        return []
    found: list[str] = []
    _find_lambdas(config, found)
    return found


def _keras_config(path: Path) -> Any:
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                return json.loads(zf.read("config.json"))
        import h5py

        with h5py.File(path, "r") as f:
            raw = f.attrs.get("model_config")
        if raw is None:
            return None
        return json.loads(raw.decode() if isinstance(raw, bytes) else raw)
    except Exception:  # unreadable: the real load reports it with Keras' own reason
        return None


def _find_lambdas(node: Any, found: list[str]) -> None:
    if isinstance(node, dict):
        if node.get("class_name") == "Lambda":
            cfg = node.get("config") or {}
            found.append(repr(cfg.get("name", "?")))
        for value in node.values():
            _find_lambdas(value, found)
    elif isinstance(node, list):
        for value in node:
            _find_lambdas(value, found)


def load_saved_model(path: Path, signature: str | None) -> TfModel:
    from unframe import archives

    archives.check_folder(path, "SavedModel")
    import tensorflow as tf

    try:
        with timing.tool("tf.saved_model.load"):
            loaded = tf.saved_model.load(str(path))
    except Exception as exc:
        raise InputError(f"{path}: not a readable SavedModel ({error_line(exc)})",
                         "check the directory is complete; re-export it") from exc
    wanted = signature or DEFAULT_SIGNATURE
    available = sorted(loaded.signatures.keys())
    if wanted not in loaded.signatures:
        have = ", ".join(available) if available else "none"
        err = UsageError if signature else InputError
        raise err(f"{path}: SavedModel has no signature {wanted!r} (it has: {have})",
                  "choose one with --signature NAME" if available
                  else "re-export the model with a serving signature")
    fn = loaded.signatures[wanted]
    specs = fn.structured_input_signature[1]
    inputs = [_tensor_spec(key, spec) for key, spec in sorted(specs.items())]
    outputs = sorted(fn.structured_outputs.keys())
    # Keep the loaded object alive: the signature function refers to its variables.
    return TfModel("saved_model", (loaded, fn), str(path), inputs, outputs, path=path,
                   signature=wanted)


def load_tflite(path: Path) -> TfModel:
    """The TFLite model's inputs and outputs, read by an interpreter in a child process: TFLite
    crashes on some malformed files, even in its getters, so this process never opens one."""
    from unframe.converters.frontends._tf import probes

    inputs, outputs, names = probes.describe_tflite(path)
    return TfModel("tflite", path, str(path), inputs, outputs, path=path, tflite_names=names)


# -- objects --------------------------------------------------------------------------------
def from_object(obj: Any, signature: str | None) -> TfModel:
    import keras
    import tensorflow as tf

    if isinstance(obj, keras.Model):
        return from_keras(obj, f"keras model {obj.name!r}", None)
    if is_legacy_keras(obj):
        return from_legacy_keras(obj, f"tf_keras model {obj.name!r}")
    if isinstance(obj, tf.types.experimental.PolymorphicFunction):
        return from_function(obj, f"tf.function {getattr(obj, '__name__', '?')!r}")
    if isinstance(obj, tf.types.experimental.ConcreteFunction):
        return from_concrete(obj)
    if isinstance(obj, tf.Module):
        call = obj.__call__ if callable(obj) else None
        if isinstance(call, tf.types.experimental.PolymorphicFunction):
            return from_function(call, f"tf.Module {type(obj).__name__}")
        raise UsageError(f"tf.Module {type(obj).__name__} has no tf.function __call__",
                         "decorate __call__ with @tf.function(input_signature=...) or pass the "
                         "tf.function itself")
    raise UsageError(f"the tf frontend can't take a {type(obj).__name__}",
                     "pass a keras.Model, tf.Module, tf.function, .keras/.h5/.tflite file or "
                     "SavedModel directory")


def from_keras(model: Any, source: str, path: Path | None) -> TfModel:
    if not _functional_inputs(model):
        return _subclassed(model, source, path)
    inputs = []
    for tensor in model.inputs:
        shape = tuple(None if d is None else int(d) for d in tensor.shape)
        inputs.append(TensorSpec(tensor.name, shape, numpy_name(tensor.dtype)))
    return TfModel("keras", model, source, inputs, keras_output_names(model), path=path,
                   int_high=embedding_bound(model))


def is_legacy_keras(obj: Any) -> bool:
    """A Keras 2 model: the ``tf_keras`` package, which TensorFlow Model Optimization's
    quantization-aware training (``tfmot.quantization.keras.quantize_model``) and code written
    before Keras 3 build on. It is a ``tf.Module`` whose call is no tf.function."""
    return any(c.__module__.startswith("tf_keras.") and c.__name__ == "Model" for c in type(obj).__mro__)


def from_legacy_keras(model: Any, source: str) -> TfModel:
    """A Keras 2 model, exported through its call as a tf.function whose signature is the model's
    symbolic inputs (functional and Sequential models; a subclassed one takes its inputs from the
    samples, as a Keras 3 one does). Its ops are traced as they run: a quantization-aware model's
    fake-quantization nodes (``FakeQuantWithMinMaxVars``) reach tf2onnx, which writes them as
    QuantizeLinear/DequantizeLinear pairs, and parity runs the model's own quantized forward."""
    import tensorflow as tf

    symbolic = _functional_inputs(model)
    if not symbolic:
        return _subclassed(model, f"{source} (subclassed)")
    specs = [tf.TensorSpec([None if d is None else int(d) for d in t.shape], t.dtype,
                           name=str(t.name).split(":")[0]) for t in symbolic]

    def call(*args: Any) -> Any:
        return model(args[0] if len(args) == 1 else list(args), training=False)

    fn = tf.function(call, input_signature=specs, autograph=False)
    return from_function(fn, f"{source} (exported through its call)")


def _functional_inputs(model: Any) -> list[Any]:
    try:
        return list(model.inputs or [])
    except (AttributeError, ValueError):  # subclassed models have no symbolic inputs
        return []


def _subclassed(model: Any, source: str, path: Path | None = None) -> TfModel:
    """A subclassed Keras model has no symbolic inputs: export its call as a tf.function
    (inputs from the caller's samples or --inputs, or for a file the shape it was built
    with), positional arguments as Keras takes them."""
    import tensorflow as tf

    def call(*args: Any) -> Any:
        return model(args[0] if len(args) == 1 else list(args), training=False)

    fn = tf.function(call, autograph=False)
    described = from_function(fn, f"{source} (subclassed, exported through its call)")
    described.int_high = embedding_bound(model)
    if path is not None:
        described.inputs = built_inputs(model)
    return described


def built_inputs(model: Any) -> list[TensorSpec]:
    """The one float input a subclassed model from a file was built with (Keras saves the
    build shape), batch dim dynamic; [] when that is unknown, not one plain shape, or the model
    has an Embedding (it would take integer ids, which the build shape does not say)."""
    import keras

    try:
        shape = (model.get_build_config() or {}).get("input_shape")
    except Exception:  # a model that overrides get_build_config badly: ask for --inputs
        return []
    plain = isinstance(shape, (list, tuple)) and len(shape) >= 1 and all(
        d is None or (isinstance(d, int) and not isinstance(d, bool)) for d in shape)
    if not plain or any(isinstance(layer, keras.layers.Embedding)
                        for layer in model._flatten_layers()):
        return []
    return [TensorSpec("input", (None, *shape[1:]), "float32")]


def keras_output_names(model: Any) -> list[str]:
    """Output names in the order tf2onnx's from_keras writes them: ``model.output_names``, or for
    a model without it (Keras 3's Sequential), each output tensor's name before any ``/``, as
    tf2onnx derives them."""
    names = getattr(model, "output_names", None)
    if names is None:
        names = [str(t.name).split("/")[0] for t in getattr(model, "outputs", None) or []]
    if not names:  # a model saved before it was built (a file's config can say so)
        raise InputError(f"the Keras model {getattr(model, 'name', '?')!r} has no outputs: it was saved "
                         "before it was built", "build it (call it on an input) and save it again")
    return unique_names([str(n) for n in names])


def unique_names(names: list[str]) -> list[str]:
    """Repeated names made unique as tf2onnx names them: ``lstm, lstm, lstm`` ->
    ``lstm, lstm_1, lstm_2`` (a Keras layer with several outputs, ``LSTM(return_state=True)``;
    onnxruntime refuses a graph whose outputs share a name)."""
    taken = set(names)
    seen: set[str] = set()
    out = []
    for name in names:
        new, i = name, 0
        while new in seen or (new != name and new in taken):
            i += 1
            new = f"{name}_{i}"
        seen.add(new)
        out.append(new)
    return out


def embedding_bound(model: Any, default: int = 3) -> int:
    """Exclusive upper bound for generated integer inputs: the smallest Embedding input_dim,
    so that every generated token id is valid for every embedding."""
    import keras

    dims = [int(layer.input_dim) for layer in model._flatten_layers()
            if isinstance(layer, keras.layers.Embedding)]
    return max(1, min(dims)) if dims else default


def from_function(fn: Any, source: str) -> TfModel:
    sig = fn.input_signature
    args = _arg_names(fn)
    if sig is None:  # known only when the Python function takes nothing
        return TfModel("function", fn, source, [], [], inputs_known=args == [], fresh=_fresh(fn))
    inputs, named, structure = _signature_inputs(sig, args)
    return TfModel("function", fn, source, inputs, [], named_specs=named, inputs_known=True,
                   structure=structure)


def _fresh(fn: Any) -> Any:
    python_function = getattr(fn, "python_function", None)
    if python_function is None:
        return None
    import tensorflow as tf

    return lambda: tf.function(python_function, autograph=getattr(fn, "_autograph", True),
                               jit_compile=getattr(fn, "_jit_compile", None))


def _signature_inputs(sig: Any, args: list[str]) -> tuple[list[TensorSpec], bool, Any]:
    """(flat inputs, whether every spec is named, the structure when it nests) of a signature.
    A nested spec is named after its path (``features/ids`` -> ``features_ids``) unless named."""
    import tensorflow as tf

    sig = list(sig)
    flat = tf.nest.flatten(sig)
    paths = list(zip(_paths(sig), flat, strict=True))
    nested = any(not isinstance(s, tf.TensorSpec) for s in sig)
    named = all(s.name for s in flat) and not nested
    inputs = []
    for path, spec in paths:
        top = int(path.split("/")[0])
        base = args[top] if top < len(args) else f"input_{top}"
        name = spec.name or (base + path[len(str(top)):].replace("/", "_") if nested else base)
        inputs.append(_tensor_spec(name, spec))
    return inputs, named, sig if nested else None


def _paths(node: Any, prefix: str = "") -> list[str]:
    """Leaf paths ("0", "1/ids") in ``tf.nest.flatten``'s order (dict keys sorted)."""
    if isinstance(node, dict):
        items: list[tuple[Any, Any]] = [(k, node[k]) for k in sorted(node)]
    elif isinstance(node, (list, tuple)):
        items = list(enumerate(node))
    else:
        return [prefix]
    return [p for key, value in items for p in _paths(value, f"{prefix}/{key}" if prefix else str(key))]


class ConcreteSource:
    """A ``ConcreteFunction`` as the frontend and tf2onnx's ``from_function`` take a tf.function:
    it is its own concrete function (its trace fixes what it takes)."""

    def __init__(self, concrete: Any) -> None:
        self.concrete = concrete
        self.input_signature = None

    def get_concrete_function(self, *args: Any, **kwargs: Any) -> Any:
        return self.concrete

    def __call__(self, *args: Any) -> Any:
        return self.concrete(*args)


def from_concrete(concrete: Any) -> TfModel:
    args_sig, kwargs_sig = concrete.structured_input_signature
    names = _arg_names_of(getattr(concrete, "graph", None))
    inputs, _, structure = _signature_inputs(list(args_sig), names)
    if kwargs_sig:
        inputs += [_tensor_spec(k, s) for k, s in sorted(kwargs_sig.items())]
    source = f"ConcreteFunction {getattr(concrete, 'name', '?')!r}"
    return TfModel("function", ConcreteSource(concrete), source, inputs, [], named_specs=True,
                   inputs_known=True, structure=structure)


def _arg_names_of(graph: Any) -> list[str]:
    fn = getattr(graph, "_python_function", None) if graph is not None else None
    if fn is None:
        return []
    import inspect

    try:
        return [p for p in inspect.signature(fn).parameters if p != "self"]
    except (TypeError, ValueError):
        return []


def _arg_names(fn: Any) -> list[str]:
    import inspect

    try:
        params = inspect.signature(fn.python_function).parameters
    except (AttributeError, TypeError, ValueError):
        return []
    return [p for p in params if p != "self"]


def _tensor_spec(name: str, spec: Any) -> TensorSpec:
    shape = None if spec.shape.rank is None else tuple(
        None if d is None else int(d) for d in spec.shape.as_list())
    return TensorSpec(name, shape, numpy_name(spec.dtype))


