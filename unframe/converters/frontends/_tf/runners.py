"""TensorFlow-side runners for parity: a Keras model, a tf.function or SavedModel signature, and
the TFLite interpreter. Each takes feeds keyed by ONNX input names and returns outputs keyed by
ONNX output names, in ONNX output order.

Inputs the export transposed to NCHW (option ``nchw_inputs``) are transposed back to
channels-last before TensorFlow sees them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from unframe import timing
from unframe.converters.frontends._tf.native import TfModel
from unframe.distributions import dist_version
from unframe.quiet import quiet_native_logs
from unframe.validate.runner import Runner, TensorSpec


def _version(*dists: str) -> str:
    return dist_version(*dists) or "?"


def to_channels_last(x: np.ndarray) -> np.ndarray:
    """NC... -> N...C, the inverse of the export's input transpose."""
    return np.moveaxis(x, 1, -1)


class _TfRunner(Runner):
    def __init__(self, model: TfModel, inputs: Sequence[TensorSpec], onnx_outputs: Sequence[str],
                 nchw_inputs: Sequence[str] = (), memo: dict[Any, Any] | None = None) -> None:
        self.model = model
        self.inputs = list(inputs)
        self.onnx_outputs = list(onnx_outputs)
        self.nchw_inputs = set(nchw_inputs)
        self.memo = memo
        self._known: list[tuple[dict[str, Any], list[np.ndarray]]] = []

    def remember(self, feeds: Mapping[str, Any], values: list[np.ndarray]) -> None:
        """The source's outputs (``model.outputs`` order) on these very feeds, from a run the
        export already made (its probes): the first ``run`` on them returns them (once each)."""
        self._known.append((dict(feeds), values))

    def input_specs(self) -> list[TensorSpec]:
        return list(self.inputs)

    def output_names(self) -> list[str]:
        return list(self.onnx_outputs)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        values = self._remembered(feeds)
        if values is None:
            arrays = {}
            for t in self.inputs:
                value = np.asarray(feeds[t.name])
                arrays[t.name] = to_channels_last(value) if t.name in self.nchw_inputs else value
            values = self.run_native(arrays)  # in the order of self.model.outputs
        if set(self.model.outputs) == set(self.onnx_outputs):
            by_name = dict(zip(self.model.outputs, values, strict=True))
            return {name: np.asarray(by_name[name]) for name in self.onnx_outputs}
        return {name: np.asarray(values[i]) for i, name in enumerate(self.onnx_outputs)}

    def _remembered(self, feeds: Mapping[str, Any]) -> list[np.ndarray] | None:
        for i, (known, values) in enumerate(self._known):
            if known.keys() == feeds.keys() and all(known[k] is feeds[k] for k in feeds):
                del self._known[i]
                return values
        return None

    def run_native(self, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The source's outputs (in ``model.outputs`` order) on TF-layout arrays by input name.
        With a ``memo`` (the export's own checks: its probes, then each route's check) a feed of
        the very same arrays runs once; parity's runner has none (it may run a feed twice to see
        whether the source is deterministic)."""
        key = tuple(sorted((name, id(value)) for name, value in arrays.items()))
        if self.memo is not None and key in self.memo:
            return self.memo[key][1]
        with quiet_native_logs(), timing.tool(self.name):
            values = self._run(arrays)
        if self.memo is not None:
            self.memo[key] = (dict(arrays), values)  # the arrays held: their ids stay theirs
        return values

    def _run(self, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError


class KerasRunner(_TfRunner):
    """The Keras model in inference mode (``training=False``)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.name = f"keras {_version('keras')} (tensorflow {_version('tensorflow', 'tensorflow-cpu')})"

    def _run(self, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        model = self.model.obj
        states = stateful_states(model)
        try:
            result = model(keras_structure(model, arrays), training=False)
        finally:
            for variable, value in states:
                variable.assign(value)
        if isinstance(result, Mapping):
            by_name = {str(k): v for k, v in result.items()}
            if all(name in by_name for name in self.model.outputs):
                return [_np(by_name[name]) for name in self.model.outputs]
        import keras

        return [_np(v) for v in keras.tree.flatten(result)]


def stateful_states(model: Any) -> list[tuple[Any, np.ndarray]]:
    """(variable, value) of every stateful RNN state (``stateful=True``): each call advances them,
    so each run unframe makes (its probes, its checks, the export's trace and parity) puts them
    back, and every one of them sees the model in the state the user left it. Without that the
    export froze whatever state unframe's own earlier runs had left (a wrong graph that parity,
    running in that same state, passed)."""
    out = []
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if getattr(layer, "stateful", False):  # Keras 3 keeps them in ``layer.states``, untracked
            out.extend((v, np.array(v.numpy(), copy=True)) for v in getattr(layer, "states", None) or ()
                       if hasattr(v, "assign"))
    return out


def keras_structure(model: Any, arrays: dict[str, np.ndarray]) -> Any:
    """Inputs in the structure the model was built with (tensor, list or dict)."""
    names = [t.name for t in model.inputs]
    struct = getattr(model, "_inputs_struct", None)
    if isinstance(struct, Mapping):
        return {key: arrays[value.name] for key, value in struct.items()}
    if len(names) == 1 and not isinstance(struct, (list, tuple)):
        return arrays[names[0]]
    return [arrays[n] for n in names]


class FunctionRunner(_TfRunner):
    """A tf.function (positional inputs) or a SavedModel signature (keyword inputs)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.name = f"tensorflow {_version('tensorflow', 'tensorflow-cpu')}"
        if self.model.kind == "saved_model":
            self.name += f" (SavedModel signature {self.model.signature!r})"

    def _run(self, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        import tensorflow as tf

        tensors = {t.name: tf.constant(arrays[t.name]) for t in self.inputs}
        if self.model.kind == "saved_model":
            _, fn = self.model.obj
            result = fn(**tensors)
            return [_np(result[name]) for name in self.model.outputs]
        flat = [tensors[t.name] for t in self.inputs]
        if self.model.structure is not None:  # a signature that nests tensors (a dict argument)
            flat = tf.nest.pack_sequence_as(self.model.structure, flat)
        result = self.model.obj(*flat)
        return [_np(v) for v in tf.nest.flatten(result)]


class GraphDefRunner(_TfRunner):
    """A frozen TF1 graph, run by a v1 Session on its own graph."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.name = f"tensorflow {_version('tensorflow', 'tensorflow-cpu')} (frozen graph)"

    def _run(self, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        _, session = self.model.obj
        return [np.asarray(v) for v in session.run(arrays, self.model.graph_outputs)]


class TfliteRunner(_TfRunner):
    """The TFLite interpreter, resized to each feed's shapes; it runs in the child process that
    read the model (``probes.run_tflite``), never in this one."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.name = f"tflite interpreter (tensorflow {_version('tensorflow', 'tensorflow-cpu')})"

    def _run(self, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        from unframe.converters.frontends._tf import probes

        return probes.run_tflite(self.model.path, arrays, self.model.tflite_names)


def _np(value: Any) -> np.ndarray:
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


def make_runner(model: TfModel, inputs: Sequence[TensorSpec], onnx_outputs: Sequence[str],
                nchw_inputs: Sequence[str] = (), memo: dict[Any, Any] | None = None) -> _TfRunner:
    cls = {"keras": KerasRunner, "function": FunctionRunner, "saved_model": FunctionRunner,
           "tflite": TfliteRunner, "graph_def": GraphDefRunner}[model.kind]
    return cls(model, inputs, onnx_outputs, nchw_inputs, memo=memo)
