"""TensorFlow / Keras in: Keras 3 models, tf.Module / tf.function / ConcreteFunction objects,
``.keras`` and legacy ``.h5`` files, SavedModel directories, ``.tflite`` files and frozen TF1 graphs
(``.pb`` GraphDef), exported to ONNX through tf2onnx.

Loading
  ``.keras``/``.h5`` files load with Keras' ``safe_mode``. A Lambda layer holds Python code that
  runs on load, so a file with one needs ``--trust`` (``trust=True``); the check reads the file's
  config without deserializing it. A SavedModel uses one signature: ``--signature NAME``
  (option ``signature``, default ``serving_default``); a missing one is an error listing those
  the directory has. A model with custom classes (custom layers, a subclassed model, custom
  losses or activations) needs their code: option ``custom_objects`` (CLI
  ``--custom-objects module.py``) is a Python file to import for them, which needs ``--trust``,
  or from Python a module or a ``{name: class}`` dict. Without it such a file is refused with
  the name of the class it needs. A subclassed model from a file takes the input shape it was
  built with, unless ``--inputs`` says otherwise. A frozen graph (a ``.pb`` that is no SavedModel's
  ``saved_model.pb``) takes its ``Placeholder`` nodes as inputs and option ``outputs`` (tensor names,
  ``["y:0"]`` or ``"y:0,z:0"``) as outputs, else every tensor no node consumes; one whose ops read or
  write files or call Python needs ``--trust``. A tf.function whose signature nests tensors (a
  dict argument) is called with them packed back; a function that takes no inputs needs none.

Export routes (``ExportResult.route`` says which one produced the graph)
  1. tf2onnx: ``from_keras``, ``from_function`` (tf.function, tf.Module.__call__), its SavedModel
     loader + ``from_graph_def``, or ``from_tflite``, at the wanted opset (tf2onnx goes up to 18;
     the opset version converter does the rest);
  2. for Keras models, Keras' own ONNX export (``model.export(..., format="onnx")``);
  3. tf2onnx at another opset (18, or 15 when 18 failed).
  A route is accepted when onnxruntime loads its graph and it matches TensorFlow on the first
  parity feed (option ``self_check=False``, or ``validate=False`` given to ``convert``, keeps
  only the onnxruntime load check); every rejected route is listed in ``ExportResult.notes``. tf2onnx's gap for
  ``Erfc`` (exact GELU) is filled through its own ``@tf_op`` hook.

Inputs
  From the model's signature (a fixed ``input_signature`` is kept as it is), or from the samples.
  An axis is dynamic only where TensorFlow ran the model with it changed and the export takes
  it (``_tf/axes.py``): the axes the signature leaves open, and for inputs known only from the
  samples their leading axis, are probed; the others, and those whose probe fails, keep the first
  feed's size, per input (a broadcast partner ``y (5,)`` stays ``(5,)``). When no route exports the
  dynamic graph (Python on a shape, ops tf2onnx maps only at fixed shapes) the export is made again
  at the samples' shapes. The notes say which axes are dynamic and why the others are not; a probe
  unframe drew never ends in an error. ``--static`` freezes every axis; ``--dynamic`` and named
  ``--inputs`` dims are dynamic as asked. Dynamic axis 0 of a Keras/SavedModel/TFLite input is
  named ``batch``. ``--inputs name:shape:dtype`` overrides an input (by name, or by position when
  no name matches). Input and output names are the model's own (Keras input/output names, made
  unique as tf2onnx does; SavedModel and TFLite signature keys; a frozen graph's node names;
  ``output_<i>`` for tf.function results that are not dicts). String samples may be ``str``,
  ``bytes`` or numpy arrays of UTF-8 text. Inputs of dtypes ONNX can't take (complex, resource,
  variant...) are refused with their names. A constant the traced function captured, which
  tf2onnx lists as a graph input, becomes an initializer. An error TensorFlow raises while tracing
  leads with its own telling line (the reason and the last frame in user code).

Layout
  Channels-last models stay channels-last: the ONNX inputs have the Keras shapes (NHWC) and
  tf2onnx's internal transposes keep the numbers right. Option ``nchw_inputs`` (CLI
  ``--nchw-inputs``) makes every rank-3 to rank-5 input channels-first at the graph edge, for
  runtimes that want NCHW: the ONNX input becomes ``[N, C, H, W]`` and a Transpose back to
  ``[N, H, W, C]`` is the first node. Parity feeds are then NCHW; the TensorFlow runner
  transposes them back. ``nchw_inputs`` may also be a list of input names.

Parity
  TensorFlow (Keras in inference mode, the tf.function/signature, or the TFLite interpreter) vs
  onnxruntime, on the user's samples or on generated feeds: floats from N(0, 1), integers in
  ``[0, k)`` with ``k`` the smallest Embedding ``input_dim`` (3 when there is none), open axes at 2
  (axis 0) or 8. When an axis is dynamic the probe that proved it is the second feed (drawn at 3
  and 6, or the user's samples cut by one, or doubled from 1).

Logs
  TensorFlow's, absl's and tf2onnx's log lines are captured while the frontend works (see
  ``unframe.quiet``) and shown only with ``--debug``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unframe.converters.base import ConvertOptions, ExportResult, Frontend, InputSpec, Prepared
from unframe.converters.registry import register_frontend
from unframe.quiet import quiet_native_logs, quiet_tensorflow_env
from unframe.validate.runner import Runner, TensorSpec

# TensorFlow reads its C++ log level once, on import: set it before anything imports it.
quiet_tensorflow_env()


@register_frontend
class TensorflowFrontend(Frontend):
    name = "tf"
    extra = "tf"
    requires = ("tensorflow", "keras", "tf2onnx")
    packages = "tensorflow-cpu, keras, tf2onnx"
    description = ("TensorFlow/Keras: keras.Model (Keras 3, and tf_keras: Keras 2, tfmot's quantization-aware "
                   "models), tf.Module, tf.function, ConcreteFunction, .keras, .h5, SavedModel directories "
                   "(TF2 and TF1, lookup tables included), .tflite, frozen graph .pb (via tf2onnx)")
    suffixes = (".keras", ".h5", ".hdf5", ".tflite", ".pb")
    object_types = (
        "keras.src.models.model.Model",
        "tensorflow.python.module.module.Module",
        "tensorflow.python.eager.polymorphic_function.polymorphic_function.Function",
        "tensorflow.python.eager.polymorphic_function.concrete_function.ConcreteFunction",
    )
    option_names = ("signature", "nchw_inputs", "self_check", "custom_objects", "outputs")

    def distributions(self) -> tuple[str, ...]:
        return ("tensorflow-cpu", "tensorflow", "keras", "tf2onnx", "onnx")

    def accepts_path(self, path: Path) -> bool:
        from unframe.converters.frontends._tf.native import is_saved_model_dir

        return is_saved_model_dir(path) or super().accepts_path(path)

    def default_opset(self) -> int:
        from unframe.converters.frontends._tf.export import MAX_OPSET

        return MAX_OPSET

    def closest_opset(self, wanted: int) -> int:
        from unframe.converters.frontends._tf.export import clamp_opset

        return clamp_opset(wanted)

    def load(self, source: Any, opts: ConvertOptions) -> Any:
        from unframe.converters.frontends._tf import native

        with quiet_native_logs():
            return native.load(source, opts.trust, opts.get("signature"),
                               opts.get("custom_objects"), opts.get("outputs"))

    def preserve(self, source: Any) -> Any:
        """A live Keras model is snapshotted and restored after the run (``_tf/preserve.py``)."""
        import contextlib
        import os

        if isinstance(source, (str, os.PathLike)):
            return contextlib.nullcontext()
        from unframe.converters.frontends._tf.preserve import preserved

        return preserved(source, f"the live {type(source).__name__}")

    def to_onnx(self, native: Any, spec: InputSpec, opts: ConvertOptions) -> ExportResult:
        from unframe.converters.frontends._tf.pipeline import export

        opset = self.closest_opset(opts.opset) if opts.opset else self.default_opset()
        # A pipeline that validates nothing (validate=False) skips the per-route numbers check.
        flag = opts.options.get("self_check")
        self_check = opts.validate if flag is None else bool(flag)
        with quiet_native_logs():
            return export(native, spec, opset, opts.get("nchw_inputs"), self.versions(),
                          self_check)

    def prepare(self, native: Any, spec: InputSpec, opts: ConvertOptions) -> Prepared:
        from unframe.converters.frontends._tf.pipeline import prepare

        with quiet_native_logs():
            prepared = prepare(native, spec)
        if opts.get("nchw_inputs"):  # the other targets of the call may still want it
            prepared.notes.append("--nchw-inputs shapes the ONNX export: a direct route keeps the "
                                  "model's own (channels-last) layout")
        return prepared

    def runner(self, native: Any, export: ExportResult) -> Runner:
        from unframe.converters.frontends._tf.runners import make_runner

        inputs: list[TensorSpec] = export.extra["tf_inputs"]
        with quiet_native_logs():  # its runs are quieted by the runner itself
            runner = make_runner(native, inputs, [v.name for v in export.model.graph.outputs],
                                 export.extra.get("nchw_inputs", ()))
        for feed, values in export.extra.pop("tf_runs", []):  # the export's own runs: not again
            runner.remember(feed, values)
        return runner

    def describe(self, native: Any) -> str:
        kind = {"keras": "Keras model", "function": "tf.function", "saved_model": "SavedModel",
                "tflite": "TFLite model", "graph_def": "frozen graph"}[native.kind]
        sig = f", signature {native.signature!r}" if native.signature else ""
        where = f"{kind} {native.path}" if native.path is not None else native.source
        return f"{where}{sig}"

