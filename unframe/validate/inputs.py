"""Generated parity inputs for an ONNX graph, when the user gave none.

Values are seeded. Dynamic dims are filled with small sizes; when any input has a dynamic dim
a second feed with other sizes checks that the graph really is dynamic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx_ir as ir

from unframe.errors import UsageError

DYNAMIC_FILLS = (2, 3)


def graph_inputs(model: ir.Model) -> list[ir.Value]:
    """Inputs a caller must feed (those without an initializer default)."""
    inits = model.graph.initializers
    return [v for v in model.graph.inputs if v.name not in inits]


def numpy_dtype(dt: ir.DataType | None) -> np.dtype:
    if dt is None:
        return np.dtype(np.float32)
    if dt == ir.DataType.STRING:
        return np.dtype(object)
    return np.dtype(dt.numpy())


def generate_feeds(model: ir.Model, *, seed: int = 0, fills: Sequence[int] = DYNAMIC_FILLS,
                   source: str = "the model") -> list[dict[str, np.ndarray]]:
    inputs = graph_inputs(model)
    dynamic = any(_is_dynamic(v) for v in inputs)
    count = len(fills) if dynamic else 1
    feeds = []
    for i in range(count):
        rng = np.random.default_rng(seed + i)
        feeds.append({v.name: random_tensor(rng, _shape(v, fills[i], source), v.dtype) for v in inputs})
    return feeds


def _is_dynamic(v: ir.Value) -> bool:
    return v.shape is None or any(not isinstance(d, int) for d in v.shape)


def _shape(v: ir.Value, fill: int, source: str) -> tuple[int, ...]:
    if v.shape is None:
        raise UsageError(
            f"input {v.name!r} of {source} has no shape, so parity inputs can't be generated",
            "pass sample inputs (--sample-inputs FILE.npz) or --inputs name:shape:dtype")
    return tuple(d if isinstance(d, int) else fill for d in v.shape)


def random_tensor(rng: np.random.Generator, shape: tuple[int, ...], dt: ir.DataType | None) -> np.ndarray:
    npdt = numpy_dtype(dt)
    if npdt.kind == "f" or str(npdt) == "bfloat16":
        return rng.standard_normal(shape).astype(npdt)
    if npdt.kind in "iu":
        return rng.integers(0, 3, size=shape).astype(npdt)
    if npdt.kind == "b":
        return rng.random(shape) < 0.5
    if npdt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(npdt)
    if npdt.kind == "O":
        return rng.choice(np.array(["a", "b", "c"], dtype=object), size=shape)
    raise UsageError(f"can't generate parity inputs of type {dt}", "pass sample inputs")


def load_npz(path: str) -> list[dict[str, np.ndarray]]:
    """Sample inputs from an .npz file: arrays by input name (one feed)."""
    with np.load(path, allow_pickle=False) as data:
        return [{k: data[k] for k in data.files}]


def as_feed_list(samples: Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]]
                 ) -> list[dict[str, np.ndarray]]:
    if isinstance(samples, Mapping):
        return [{k: np.asarray(v) for k, v in samples.items()}]
    return [{k: np.asarray(v) for k, v in s.items()} for s in samples]
