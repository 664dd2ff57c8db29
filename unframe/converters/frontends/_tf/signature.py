"""Input specs for export, and parity feeds.

The model's own signature gives names, dtypes and shapes; the batch dim is dynamic unless
``InputSpec.static``. ``InputSpec.tensors`` (``--inputs name:shape:dtype``) overrides an input,
``InputSpec.dynamic`` makes more axes dynamic. Feeds are generated from the final specs when the
user gave no samples: floats ~ N(0, 1), integers in ``[0, int_high)`` (below the smallest
Embedding input_dim), two batch sizes when the batch is dynamic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from unframe import limits
from unframe.converters.base import InputSpec
from unframe.converters.frontends._tf.native import TfModel
from unframe.errors import Blocker, UnsupportedError, UsageError
from unframe.validate.runner import TensorSpec

BATCH_FILLS = (2, 3)
OTHER_FILLS = (8, 6)  # dynamic non-batch dims (sequence lengths...)
SUPPORTED_DTYPES = frozenset({
    "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "bool", "str",
})


def resolve_inputs(model: TfModel, spec: InputSpec) -> list[TensorSpec]:
    """The input specs to export with: the model's, overridden by the caller's."""
    inputs = list(model.inputs)
    if spec.tensors:
        inputs = _apply_overrides(model, inputs, spec.tensors)
    samples = samples_by_name(spec.samples, inputs) if spec.samples is not None else None
    if not inputs and samples:
        inputs = [TensorSpec(k, tuple(None if i == 0 else d for i, d in enumerate(v.shape)),
                             v.dtype.name if v.dtype.kind != "U" else "str")
                  for k, v in samples.items()]
    if not inputs:
        raise UsageError(f"{model.source}: its inputs are unknown (no input signature)",
                         "pass sample inputs or --inputs name:shape:dtype, or give the "
                         "tf.function an input_signature")
    check_dtypes(model, inputs)
    if spec.static:
        return [_freeze(t, samples) for t in inputs]
    inputs = [_dynamic_batch(t) for t in inputs]
    return _extra_dynamic(inputs, spec.dynamic)


def check_dtypes(model: TfModel, inputs: Sequence[TensorSpec]) -> None:
    bad = [t for t in inputs if t.dtype not in SUPPORTED_DTYPES]
    if bad:
        blockers = [Blocker("input", f"dtype {t.dtype} has no ONNX equivalent", node=t.name,
                            hint="cast it to a real/integer type in the model") for t in bad]
        names = ", ".join(f"{t.name!r} ({t.dtype})" for t in bad)
        raise UnsupportedError(f"{model.source}: input(s) {names} have a dtype ONNX can't take",
                               "cast them inside the model to float/int types",
                               blockers=blockers)


def _apply_overrides(model: TfModel, inputs: list[TensorSpec], given: Sequence[TensorSpec]
                     ) -> list[TensorSpec]:
    if not inputs:
        return list(given)
    by_name = {t.name: t for t in inputs}
    unknown = [t.name for t in given if t.name not in by_name]
    if unknown and len(given) == len(inputs) and len(unknown) == len(given):
        return [_merge(old, new) for old, new in zip(inputs, given, strict=False)]  # positional
    if unknown:
        raise UsageError(f"{model.source}: no input named {', '.join(map(repr, unknown))} "
                         f"(inputs: {', '.join(by_name)})", "fix the --inputs names")
    overrides = {t.name: t for t in given}
    return [_merge(t, overrides[t.name]) if t.name in overrides else t for t in inputs]


def _merge(old: TensorSpec, new: TensorSpec) -> TensorSpec:
    shape = new.shape if new.shape is not None else old.shape
    shape = None if shape is None else tuple(d if isinstance(d, int) else None for d in shape)
    if not _fits(old.shape, shape):
        raise UsageError(f"input {old.name!r}: shape {_show(shape)} from --inputs doesn't fit the "
                         f"model's {_show(old.shape)}", "keep the model's fixed dims")
    return TensorSpec(old.name, shape, new.dtype or old.dtype)


def _fits(model_shape: tuple[int | None, ...] | None, shape: tuple[int | None, ...] | None) -> bool:
    if model_shape is None or shape is None:
        return True
    if len(model_shape) != len(shape):
        return False
    return all(a is None or b is None or a == b for a, b in zip(model_shape, shape, strict=True))


def _show(shape: tuple[Any, ...] | None) -> str:
    return "?" if shape is None else "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


def _dynamic_batch(t: TensorSpec) -> TensorSpec:
    if not t.shape:
        return t
    return TensorSpec(t.name, (None,) + tuple(t.shape[1:]), t.dtype)


def _extra_dynamic(inputs: list[TensorSpec], dynamic: Sequence[tuple[str, int, str | None]]
                   ) -> list[TensorSpec]:
    out = []
    for t in inputs:
        shape = list(t.shape or ())
        for name, axis, _ in dynamic:
            if name == t.name and -len(shape) <= axis < len(shape):
                shape[axis] = None
        out.append(TensorSpec(t.name, tuple(shape) if t.shape is not None else None, t.dtype))
    return out


def _freeze(t: TensorSpec, samples: Mapping[str, np.ndarray] | None) -> TensorSpec:
    if samples and t.name in samples:
        return TensorSpec(t.name, tuple(int(d) for d in samples[t.name].shape), t.dtype)
    if t.shape is None or any(d is None for d in t.shape[1:]):
        raise UsageError(f"input {t.name!r} has unknown dims {t.shape}, so it can't be frozen",
                         "give sample inputs or --inputs name:shape:dtype with every dim")
    return TensorSpec(t.name, (1 if t.shape[0] is None else t.shape[0],) + tuple(t.shape[1:]),
                      t.dtype)


# -- samples and feeds ----------------------------------------------------------------------
def samples_by_name(samples: Any, inputs: Sequence[TensorSpec]) -> dict[str, np.ndarray]:
    """User samples (array, tensor, tuple/list, dict, or a list of dicts) as {input name: array}."""
    if isinstance(samples, Sequence) and samples and all(isinstance(s, Mapping) for s in samples):
        samples = samples[0]
    if isinstance(samples, Mapping):
        return {str(k): _numpy(v) for k, v in samples.items()}
    values = list(samples) if isinstance(samples, (tuple, list)) else [samples]
    names = [t.name for t in inputs] or [f"input_{i}" for i in range(len(values))]
    if len(values) != len(names):
        raise UsageError(f"{len(values)} sample input(s) given for {len(names)} model input(s) "
                         f"({', '.join(names)})", "give one sample per input, or a dict by name")
    return {n: _numpy(v) for n, v in zip(names, values, strict=False)}


def _numpy(value: Any) -> np.ndarray:
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


def make_feeds(model: TfModel, inputs: Sequence[TensorSpec], spec: InputSpec,
               seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Parity feeds in TF layout, keyed by input name; two batch sizes when the batch is dynamic."""
    dynamic_batch = any(t.shape and t.shape[0] is None for t in inputs)
    if spec.samples is not None:
        first = samples_by_name(spec.samples, inputs)
        return [first, _other_batch(first)] if dynamic_batch and not spec.static else [first]
    count = 2 if any(t.shape is None or None in t.shape for t in inputs) else 1
    feeds = []
    for i in range(count):
        rng = np.random.default_rng(seed + i)
        feeds.append({t.name: _random(rng, _fill(t, i), t.dtype, model.int_high) for t in inputs})
    return feeds


def _other_batch(feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A second feed with another batch size made from the user's own sample."""
    out = {}
    for name, value in feed.items():
        if value.ndim == 0:
            out[name] = value
        elif value.shape[0] > 1:
            out[name] = value[:-1]
        else:
            out[name] = np.concatenate([value, value], axis=0)
    return out


def _fill(t: TensorSpec, which: int) -> tuple[int, ...]:
    if t.shape is None:
        raise UsageError(f"input {t.name!r} has unknown rank, so parity inputs can't be generated",
                         "pass sample inputs or --inputs name:shape:dtype")
    return tuple(d if d is not None else (BATCH_FILLS if axis == 0 else OTHER_FILLS)[which]
                 for axis, d in enumerate(t.shape))


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, int_high: int
            ) -> np.ndarray:
    limits.check_array(shape, np.float64, "a parity input")  # drawn in float64, then cast
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype == "str":
        return rng.choice(np.array([b"a", b"b", b"c"], dtype=object), size=shape)
    if dtype == "bfloat16":
        return rng.standard_normal(shape).astype(np.float32)
    npdt = np.dtype(dtype)
    if npdt.kind == "f":
        return rng.standard_normal(shape).astype(npdt)
    return rng.integers(0, max(1, int_high), size=shape).astype(npdt)


def to_tf_specs(inputs: Sequence[TensorSpec], named: bool = True) -> list[Any]:
    """tf.TensorSpecs to trace with. ``named=False`` for a tf.function whose own signature has
    unnamed specs (TF refuses a named spec there); the export renames the inputs afterwards."""
    import tensorflow as tf

    return [tf.TensorSpec(t.shape, tf.string if t.dtype == "str" else tf.as_dtype(t.dtype),
                          name=t.name if named else None) for t in inputs]
