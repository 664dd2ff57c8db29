"""Input specs for export, and parity feeds.

The model's own signature gives names, dtypes and shapes (``None`` where it leaves an axis open);
``InputSpec.tensors`` (``--inputs name:shape:dtype``) overrides an input. Which open axes end up
dynamic is decided by probing the source (``axes.py``); ``InputSpec.static`` freezes every axis.
The first parity feed is the user's samples, else drawn: floats ~ N(0, 1), integers in
``[0, int_high)`` (below the smallest Embedding input_dim), open axes at 2 (axis 0) or 8.
String samples may be ``str``, ``bytes`` or numpy object/unicode/bytes arrays of UTF-8 text: they
are fed as object arrays of ``str`` (what onnxruntime takes).
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


def declared_inputs(model: TfModel, spec: InputSpec) -> list[TensorSpec]:
    """The inputs as the model (its signature) and the caller (``--inputs``) declare them; an
    input known only from the samples has the samples' shape."""
    inputs = list(model.inputs) + _fed_defaults(model, spec)
    if spec.tensors:
        inputs = _apply_overrides(model, inputs, spec.tensors)
    samples = samples_by_name(spec.samples, inputs) if spec.samples is not None else None
    if not inputs and samples:
        inputs = [TensorSpec(k, tuple(int(d) for d in v.shape), dtype_name(v))
                  for k, v in samples.items()]
    if not inputs and not (model.inputs_known or _empty(spec.samples)):
        raise UsageError(f"{model.source}: its inputs are unknown (no input signature)",
                         "pass sample inputs or --inputs name:shape:dtype, or give the "
                         "tf.function an input_signature")
    check_dtypes(model, inputs)
    return inputs


def _fed_defaults(model: TfModel, spec: InputSpec) -> list[TensorSpec]:
    """A frozen graph's ``PlaceholderWithDefault`` inputs the caller feeds (by samples or
    ``--inputs``): inputs of the export; the others keep their defaults."""
    if model.kind != "graph_def":
        return []
    from unframe.converters.frontends._tf.graphdef import placeholders

    named = {t.name.split(":")[0] for t in spec.tensors or ()}
    if isinstance(spec.samples, Mapping):
        named |= {str(k).split(":")[0] for k in spec.samples}
    return [t for t in placeholders(model.obj[0], "PlaceholderWithDefault") if t.name in named]


def _empty(samples: Any) -> bool:
    """The caller said the model takes no inputs: ``sample_inputs={}`` or ``()``."""
    return isinstance(samples, (Mapping, tuple, list)) and len(samples) == 0


def resolve_inputs(model: TfModel, spec: InputSpec) -> list[TensorSpec]:
    """The input specs of a static export (``InputSpec.static``): every axis at the samples'
    size, or the signature's with a batch of 1."""
    inputs = declared_inputs(model, spec)
    samples = samples_by_name(spec.samples, inputs) if spec.samples is not None else None
    return [_freeze(t, samples) for t in inputs]


def candidate_axes(model: TfModel, declared: Sequence[TensorSpec],
                   first: Mapping[str, np.ndarray]) -> list[tuple[str, int]]:
    """Axes a probe may find dynamic: those the signature leaves open; for an input known only
    from the samples (no signature, or one of unknown rank), its leading axis."""
    signed = {t.name for t in model.inputs if t.shape is not None}
    out = []
    for t in declared:
        if t.name in signed and t.shape is not None:
            out.extend((t.name, a) for a, d in enumerate(t.shape) if d is None)
        elif t.name in first and first[t.name].ndim > 0:
            out.append((t.name, 0))
    # an empty axis has no data to cut or repeat into another size: it stays as it is
    return [(n, a) for n, a in out if n in first and a < first[n].ndim and first[n].shape[a] > 0]


def forced_axes(spec: InputSpec, declared: Sequence[TensorSpec]) -> list[tuple[str, int]]:
    """Axes the caller made dynamic: ``--dynamic``, or an ``--inputs`` dim given as a name/?."""
    ranks = {t.name: len(t.shape) for t in declared if t.shape is not None}
    out = []
    for t in spec.tensors or ():
        name = t.name if t.name in ranks else None
        if name is None and len(spec.tensors or ()) == len(declared):
            name = declared[list(spec.tensors or ()).index(t)].name  # positional override
        if name is not None and t.shape is not None:
            out.extend((name, a) for a, d in enumerate(t.shape) if not isinstance(d, int))
    for name, axis, _ in spec.dynamic:
        if name in ranks and -ranks[name] <= axis < ranks[name]:
            out.append((name, axis % ranks[name]))
    return list(dict.fromkeys(out))


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
        names = {t.name for t in inputs}
        # a frozen graph's tensor names: "x:0" is input "x"
        return {(str(k).split(":")[0] if str(k) not in names and str(k).split(":")[0] in names
                 else str(k)): _numpy(v) for k, v in samples.items()}
    values = list(samples) if isinstance(samples, (tuple, list)) else [samples]
    names = [t.name for t in inputs] or [f"input_{i}" for i in range(len(values))]
    if len(values) != len(names):
        raise UsageError(f"{len(values)} sample input(s) given for {len(names)} model input(s) "
                         f"({', '.join(names)})", "give one sample per input, or a dict by name")
    return {n: _numpy(v) for n, v in zip(names, values, strict=False)}


def _numpy(value: Any) -> np.ndarray:
    array = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
    return as_text(array) if _is_text(array) else array


def _is_text(array: np.ndarray) -> bool:
    if array.dtype.kind in "US":
        return True
    return array.dtype.kind == "O" and array.size > 0 and all(
        isinstance(v, (str, bytes)) for v in array.flat)


def as_text(array: np.ndarray) -> np.ndarray:
    """Strings as an object array of ``str`` (UTF-8 bytes decoded): what onnxruntime takes, and
    TensorFlow encodes back to the same bytes."""
    out = np.empty(array.shape, dtype=object)
    for index, value in np.ndenumerate(array):
        if isinstance(value, (bytes, np.bytes_)):
            try:
                value = bytes(value).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise UsageError(f"a string sample is not UTF-8 text ({exc.reason} at byte {exc.start})",
                                 "pass strings as UTF-8 text: ONNX string tensors hold UTF-8") from None
        out[index] = str(value)
    return out


def dtype_name(array: np.ndarray) -> str:
    return "str" if array.dtype.kind in "USO" and (array.dtype.kind != "O" or _is_text(array)) \
        else array.dtype.name


def make_feeds(model: TfModel, inputs: Sequence[TensorSpec], spec: InputSpec,
               seed: int = 0) -> list[dict[str, np.ndarray]]:
    """The one parity feed of a static export (the samples, or drawn at ``inputs``' shapes)."""
    if spec.samples is not None:
        return [samples_by_name(spec.samples, inputs)]
    return [draw(model, {t.name: _fill(t, 0) for t in inputs}, inputs, seed)]


def first_feed(model: TfModel, inputs: Sequence[TensorSpec], spec: InputSpec
               ) -> tuple[dict[str, np.ndarray], bool]:
    """(the first parity feed, whether unframe drew it): the user's samples, else drawn with open
    axes at 2 (axis 0) or 8."""
    if spec.samples is not None:
        feed = samples_by_name(spec.samples, inputs)
        missing = [t.name for t in inputs if t.name not in feed]
        if missing:
            raise UsageError(f"no sample given for input(s) {', '.join(map(repr, missing))}",
                             f"give one sample per input ({', '.join(t.name for t in inputs)})")
        return {t.name: _as_declared(feed[t.name], t.dtype) for t in inputs}, False
    return draw(model, {t.name: _fill(t, 0) for t in inputs}, inputs), True


def _as_declared(value: np.ndarray, dtype: str) -> np.ndarray:
    """A numeric sample in the dtype the model declares for it, when the cast is safe within its
    kind or from int to float (int32 samples for a float32 Placeholder: TensorFlow casts them as
    it feeds; onnxruntime refuses them)."""
    if dtype in ("str", "bfloat16") or value.dtype.kind not in "biuf" or value.dtype.name == dtype:
        return value
    target = np.dtype(dtype)
    return value.astype(target) if np.can_cast(value.dtype, target, "same_kind") else value


def draw(model: TfModel, shapes: Mapping[str, tuple[int, ...]], inputs: Sequence[TensorSpec],
         seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {t.name: _random(rng, tuple(shapes[t.name]), t.dtype, model.int_high) for t in inputs}


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
        return rng.choice(np.array(["a", "b", "c"], dtype=object), size=shape)
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


def call_specs(model: TfModel, inputs: Sequence[TensorSpec]) -> list[Any]:
    """The arguments to trace ``model``'s function with: flat specs, or packed into the structure
    its signature nests them in (a dict argument), each keeping the name its signature gave."""
    specs = to_tf_specs(inputs, model.named_specs)
    if model.structure is None:
        return specs
    import tensorflow as tf

    originals = tf.nest.flatten(model.structure)
    flat = [tf.TensorSpec(s.shape, s.dtype, name=o.name)
            for s, o in zip(specs, originals, strict=True)]
    return list(tf.nest.pack_sequence_as(model.structure, flat))
