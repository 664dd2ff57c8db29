"""Generated parity inputs for an ONNX graph, when the user gave none.

Values are seeded. Dynamic dims are filled with small sizes; when any input has a dynamic dim
a second feed with other sizes checks that the graph really is dynamic. Those other sizes are
unframe's guess (dims that must agree, a fixed-size reshape may refuse them): the feeds come as
``DrawnFeeds``, which say from which feed on parity may drop one the source itself can't run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx_ir as ir

from unframe import limits
from unframe.errors import InputError, UsageError

DYNAMIC_FILLS = (2, 3)


class DrawnFeeds(list):  # type: ignore[type-arg]
    """Parity feeds unframe generated; those from ``drawn_from`` on have sizes it guessed (the
    first has the graph's declared shapes, dynamic dims filled with the first fill)."""

    def __init__(self, feeds: Sequence[dict[str, np.ndarray]], drawn_from: int = 1) -> None:
        super().__init__(feeds)
        self.drawn_from = drawn_from


def drawn_from(feeds: Sequence[Mapping[str, np.ndarray]]) -> int | None:
    """The index of the first feed unframe guessed the sizes of, or None when every feed is the
    user's (or the graph's declared shapes)."""
    return feeds.drawn_from if isinstance(feeds, DrawnFeeds) and len(feeds) > feeds.drawn_from else None


def graph_inputs(model: ir.Model) -> list[ir.Value]:
    """Inputs a caller must feed (those without an initializer default)."""
    inits = model.graph.initializers
    return [v for v in model.graph.inputs if v.name not in inits]


def numpy_dtype(dt: ir.DataType | None) -> np.dtype:
    if dt is None:
        return np.dtype(np.float32)
    if dt == ir.DataType.STRING:
        return np.dtype(object)
    try:
        return np.dtype(dt.numpy())
    except (TypeError, ValueError):
        raise UsageError(f"can't generate parity inputs of type {dt}", "pass sample inputs "
                         "(--sample-inputs FILE.npz)") from None


def generate_feeds(model: ir.Model, *, seed: int = 0, fills: Sequence[int] = DYNAMIC_FILLS,
                   source: str = "the model") -> DrawnFeeds:
    inputs = graph_inputs(model)
    dynamic = any(_is_dynamic(v) for v in inputs)
    count = len(fills) if dynamic else 1
    shapes = [{v.name: _shape(v, fills[i], source) for v in inputs} for i in range(count)]
    check_feed_bytes(shapes, {v.name: numpy_dtype(v.dtype) for v in inputs}, source)
    vocab = _vocabularies(model)  # integer inputs that index a table: stay within its rows
    feeds = []
    for i in range(count):
        rng = np.random.default_rng(seed + i)
        feeds.append({v.name: random_tensor(rng, shapes[i][v.name], v.dtype, vocab.get(v.name))
                      for v in inputs})
    return DrawnFeeds(feeds)


def check_feed_bytes(shapes: Sequence[Mapping[str, tuple[int, ...]]], dtypes: Mapping[str, np.dtype],
                     source: str) -> None:
    """All generated parity inputs together against the memory budget, before any is made."""
    total, biggest, most = 0, "", -1
    for feed in shapes:
        for name, shape in feed.items():
            # drawn in float64/int64 and cast: 8 bytes of scratch per element at least
            nbytes = limits.shape_bytes(shape, max(dtypes[name].itemsize, 8) if dtypes[name].kind != "O" else 64)
            total += nbytes
            if nbytes > most:
                biggest, most = f"{name!r} {list(shape)}", nbytes
    limits.check_alloc(total, "the parity inputs",
                       "pass smaller inputs (--sample-inputs), raise --max-memory, or --no-validate",
                       detail=f"largest: input {biggest}; model {source}")


def _is_dynamic(v: ir.Value) -> bool:
    return v.shape is None or any(not isinstance(d, int) for d in v.shape)


def _shape(v: ir.Value, fill: int, source: str) -> tuple[int, ...]:
    if v.shape is None:
        raise UsageError(
            f"input {v.name!r} of {source} has no shape, so parity inputs can't be generated",
            "pass sample inputs (--sample-inputs FILE.npz) or --inputs name:shape:dtype")
    shape = tuple(_dim_size(d, fill) for d in v.shape)
    if any(d < 0 for d in shape):
        raise InputError(f"input {v.name!r} of {source} has a negative dimension {list(shape)}",
                         "the model is broken; re-export it")
    return shape


def _dim_size(dim: int | ir.SymbolicDim, fill: int) -> int:
    """Every named dim gets ``fill``; one named as a sum of names (optimum's
    ``past_sequence_length + sequence_length`` of a KV-cache decoder's mask) gets their sum, so
    that the inputs agree with each other."""
    if isinstance(dim, int):
        return dim
    terms = str(dim.value).split(" + ") if dim.value is not None else []
    return fill * len(terms) if len(terms) > 1 and all(t.isidentifier() for t in terms) else fill


def random_tensor(rng: np.random.Generator, shape: tuple[int, ...], dt: ir.DataType | None,
                  rows: int | None = None) -> np.ndarray:
    """Random values of ``dt``; integers in [0, 3), or [0, rows) when they index a table of
    ``rows`` rows (a 2-row segment embedding must not get a 2)."""
    npdt = numpy_dtype(dt)
    # values are drawn in float64/int64 and then cast: that scratch is what has to fit
    limits.check_array(shape, np.float64 if npdt.itemsize < 8 else npdt, "a parity input")
    if npdt.kind == "f" or str(npdt) == "bfloat16":
        return rng.standard_normal(shape).astype(npdt)
    if npdt.kind in "iu":
        return rng.integers(0, min(3, rows) if rows else 3, size=shape).astype(npdt)
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
    """The samples as a list of feeds; generated ones (``DrawnFeeds``, e.g. the zoo's) stay so."""
    if isinstance(samples, Mapping):
        return [{k: np.asarray(v) for k, v in samples.items()}]
    feeds = [{k: np.asarray(v) for k, v in s.items()} for s in samples]
    return DrawnFeeds(feeds, samples.drawn_from) if isinstance(samples, DrawnFeeds) else feeds


# ----------------------------------------------------------------- feeds that exercise a model --
def alternative_feeds(model: ir.Model | None, like: Sequence[Mapping[str, np.ndarray]], *, seed: int = 101
                      ) -> list[tuple[str, list[dict[str, np.ndarray]]]]:
    """Other parity inputs of the same names, shapes and dtypes, for when the reference stage's
    outputs on the first ones prove nothing (near zero, constant, non-finite). In order: images in
    [0, 1]; standardized values on a wider scale; integer inputs as token ids within the
    vocabulary the model states (the rows of the embedding table they index) and masks as 0/1."""
    vocab = _vocabularies(model) if model is not None else {}  # a direct route: no graph
    out = []
    for label, floats in (("floats uniform in [0, 1]", "unit"), ("floats normal with std 10", "wide")):
        feeds = []
        for i, feed in enumerate(like):
            rng = np.random.default_rng(seed + i)
            # np.asarray: a 0-d input's redraw is a numpy scalar, which onnxruntime refuses
            feeds.append({k: np.asarray(_redraw(rng, k, np.asarray(v), floats, vocab.get(k)))
                          for k, v in feed.items()})
        out.append((label + (", token ids within the vocabulary" if vocab else ""), feeds))
    return out


def _redraw(rng: np.random.Generator, name: str, like: np.ndarray, floats: str, vocab: int | None
            ) -> np.ndarray:
    kind = like.dtype.kind
    if kind == "f" or str(like.dtype) == "bfloat16":
        values = rng.random(like.shape) if floats == "unit" else rng.standard_normal(like.shape) * 10
        return values.astype(like.dtype)
    if kind in "iu":
        if "mask" in name.lower():
            return (rng.random(like.shape) < 0.8).astype(like.dtype)
        return rng.integers(0, vocab or 100, size=like.shape).astype(like.dtype)
    if kind == "b":
        return rng.random(like.shape) < 0.8
    return like


def _vocabularies(model: ir.Model) -> dict[str, int]:
    """Integer graph inputs that become the indices of a Gather from a constant table: the
    table's length along the gathered axis is the vocabulary (the smallest, when an input
    indexes several). The index is followed back through reshapes and casts and through
    tf2onnx's wrap of negative indices, ``Add(Cast(x), Mul(Cast(Less(x, 0)), n))``; a generated
    integer is drawn from [0, 3) anyway, so narrowing an input it also reaches is harmless."""
    inputs = {v.name for v in graph_inputs(model)}
    found: dict[str, int] = {}
    for node in model.graph:
        if node.op_type != "Gather" or len(node.inputs) < 2 or node.inputs[0] is None:
            continue
        table = node.inputs[0].const_value
        if table is None:
            continue
        rows = int(table.shape[node.attributes.get_int("axis", 0)])
        for source in _index_sources(node.inputs[1]):
            if source.name in inputs:
                found[source.name] = min(rows, found.get(source.name, rows))
    return found


_INDEX_PATH = ("Cast", "Unsqueeze", "Reshape", "Squeeze", "Identity", "Flatten", "Add", "Mul", "Less")


def _index_sources(value: ir.Value | None, depth: int = 8) -> list[ir.Value]:
    """The values an index is computed from, back through ``_INDEX_PATH`` ops."""
    out: list[ir.Value] = []
    todo = [(value, 0)]
    seen: set[int] = set()
    while todo:
        v, d = todo.pop()
        if v is None or id(v) in seen:
            continue
        seen.add(id(v))
        producer = v.producer()
        if producer is None or producer.op_type not in _INDEX_PATH or d >= depth:
            out.append(v)
            continue
        todo.extend((i, d + 1) for i in producer.inputs if i is not None and i.const_value is None)
    return out
