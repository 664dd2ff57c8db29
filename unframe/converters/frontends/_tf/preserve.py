"""A live Keras model, snapshotted before a conversion and restored after it (see
``unframe.preserve``).

What is restored: every variable of the model (weights, BatchNorm moving statistics, seed
generator states) and of its optimizer (slots, iteration count), bit for bit, written back only
where changed; every layer's ``trainable`` flag; the compiled state (``compiled``, optimizer,
loss, metrics, compile config, the cached train/test/predict functions, ``stop_training``); the
global mixed-precision policy; Python's, numpy's, TensorFlow's global generator's and Keras'
global seed generator's RNG states. Keras has no train/eval flag to flip: the export and the
parity runs call the model with ``training=False``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from unframe.preserve import PythonRng, check_copy_fits

# The attributes Keras' ``compile()`` and ``fit()`` set on a model.
COMPILE_STATE = ("compiled", "optimizer", "loss", "_compile_loss", "_compile_metrics",
                 "_compile_config", "train_function", "test_function", "predict_function",
                 "stop_training", "steps_per_execution", "_jit_compile", "_run_eagerly")


@dataclass
class KerasState:
    model: Any = None
    variables: list[tuple[Any, Any]] = field(default_factory=list)  # (variable, numpy copy)
    trainable: list[tuple[Any, bool]] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    policy: Any = None
    python_rng: PythonRng | None = None
    tf_rng: Any = None  # (generator, state copy) of TensorFlow's global generator, if created

    @classmethod
    def capture(cls, model: Any | None, what: str) -> KerasState:
        import keras

        state = cls(policy=keras.mixed_precision.global_policy(), python_rng=PythonRng.capture(),
                    tf_rng=_tf_generator_state())
        if model is None:
            return state
        variables = _all_variables(model)
        check_copy_fits(sum(_nbytes(v) for v in variables), what)
        state.model = model
        state.variables = [(v, _value(v)) for v in variables]
        state.trainable = [(layer, layer.trainable) for layer in
                           model._flatten_layers(include_self=True, recursive=True)]
        state.attrs = {k: vars(model)[k] for k in COMPILE_STATE if k in vars(model)}
        return state

    def restore(self) -> None:
        import keras

        for layer, flag in self.trainable:
            if layer.trainable != flag:
                layer.trainable = flag
        if self.model is not None:
            current = vars(self.model)
            for name, value in self.attrs.items():
                if current.get(name, _MISSING) is not value:
                    current[name] = value
        for variable, saved in self.variables:
            now = _value(variable)
            if not _same_bits(now, saved):
                variable.assign(saved)
        keras.mixed_precision.set_global_policy(self.policy)
        if self.python_rng is not None:
            self.python_rng.restore()
        if self.tf_rng is not None:
            generator, saved = self.tf_rng
            generator.reset(saved)


_MISSING = object()


def _all_variables(model: Any) -> list[Any]:
    """The model's variables and its optimizer's (if built), each once."""
    seen: dict[int, Any] = {}
    optimizer = getattr(model, "optimizer", None)
    found = list(model.variables) + (list(optimizer.variables) if optimizer is not None else [])
    seed = _keras_global_seed_generator()
    if seed is not None:
        found += list(seed.state if isinstance(seed.state, list) else [seed.state])
    for v in found:
        seen.setdefault(id(v), v)
    return list(seen.values())


def _value(variable: Any) -> Any:
    import numpy as np

    return np.array(variable.numpy(), copy=True)


def _same_bits(a: Any, b: Any) -> bool:
    import numpy as np

    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "OUS":
        return bool(np.array_equal(a, b))
    return bool(np.array_equal(np.ascontiguousarray(a).reshape(-1).view(np.uint8),
                               np.ascontiguousarray(b).reshape(-1).view(np.uint8)))


def _nbytes(variable: Any) -> int:
    import numpy as np

    shape = tuple(int(d) for d in variable.shape)
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(str(variable.dtype)).itemsize \
        if str(variable.dtype) not in ("string", "resource") else 0


def _keras_global_seed_generator() -> Any:
    """Keras' global seed generator, only if some call already created it."""
    try:
        from keras.src.backend.common import global_state
    except ImportError:
        return None
    return global_state.get_global_attribute("global_seed_generator")


def _tf_generator_state() -> Any:
    """TensorFlow's global tf.random.Generator and a copy of its state, only if it exists
    (asking for it would create one)."""
    try:
        from tensorflow.python.ops import stateful_random_ops
    except ImportError:
        return None
    generator = getattr(stateful_random_ops, "global_generator", None)
    if generator is None:
        return None
    return generator, generator.state.numpy().copy()


@contextlib.contextmanager
def preserved(obj: Any, what: str) -> Iterator[None]:
    """Snapshot a Keras model (anything else: the process state only) and restore on exit."""
    import keras

    model = obj if isinstance(obj, keras.Model) else None
    state = KerasState.capture(model, what)
    try:
        yield
    finally:
        state.restore()
