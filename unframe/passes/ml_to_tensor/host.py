"""The host side of the mappings a lowering states (``LowerReport.mappings``).

A model whose strings became indices, or whose ZipMap became a matrix, computes the same thing
as before only up to those mappings. These wrappers let the runner of the model *before* the
lowering speak the lowered model's language, so parity compares like with like:

* ``encode_feeds``: string feeds -> vocabulary indices (-1 outside the vocabulary);
* ``MappedReference``: takes index feeds (decodes them to strings for the wrapped runner) and
  returns string outputs as label indices and ZipMap outputs as probability matrices.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from unframe.validate.runner import Runner


def encode_feed(feed: Mapping[str, np.ndarray], vocab: Mapping[str, list[str]]) -> dict[str, np.ndarray]:
    out = dict(feed)
    for name, words in vocab.items():
        if name not in out:
            continue
        index = {w: i for i, w in enumerate(words)}
        value = np.asarray(out[name])
        flat = [index.get(v.decode() if isinstance(v, bytes) else str(v), -1) for v in value.reshape(-1)]
        out[name] = np.asarray(flat, np.int64).reshape(value.shape)
    return out


def decode_feed(feed: Mapping[str, np.ndarray], vocab: Mapping[str, list[str]]) -> dict[str, np.ndarray]:
    """Indices back to strings; -1 (a value outside the vocabulary) becomes one such value."""
    out = dict(feed)
    for name, words in vocab.items():
        if name not in out:
            continue
        value = np.asarray(out[name])
        unknown = _outside(words)
        flat = [words[i] if 0 <= i < len(words) else unknown for i in value.reshape(-1).tolist()]
        out[name] = np.asarray(flat, dtype=object).reshape(value.shape)
    return out


def _outside(words: list[str]) -> str:
    candidate = "<unknown>"
    while candidate in words:
        candidate += "_"
    return candidate


def encode_labels(value: Any, labels: list[str]) -> np.ndarray:
    index = {w: i for i, w in enumerate(labels)}
    arr = np.asarray(value)
    flat = [index.get(v.decode() if isinstance(v, bytes) else str(v), -1) for v in arr.reshape(-1)]
    return np.asarray(flat, np.int64).reshape(arr.shape)


def zipmap_matrix(value: Any, columns: list[Any]) -> np.ndarray:
    """A ZipMap's output (one {label: p} dict per row) as the [N, C] matrix it came from."""
    rows = list(value)
    return np.asarray([[row[c] for c in columns] for row in rows], np.float32).reshape(len(rows), len(columns))


class MappedReference(Runner):
    """The runner of the model before lowering, seen through the lowering's host mappings."""

    timed = False  # the runner it wraps is

    def __init__(self, inner: Runner, mappings: Mapping[str, Any]) -> None:
        self.inner = inner
        self.vocab = {k: v["vocabulary"] for k, v in mappings.get("inputs", {}).items()}
        self.labels = {k: v["labels"] for k, v in mappings.get("outputs", {}).items()}
        self.columns = {k: v["columns"] for k, v in mappings.get("zipmap", {}).items()}
        self.name = inner.name

    def input_specs(self) -> Any:
        return self.inner.input_specs()

    def output_names(self) -> Any:
        return self.inner.output_names()

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        outs = self.inner.run(decode_feed(feeds, self.vocab))
        for name, labels in self.labels.items():
            if name in outs:
                outs[name] = encode_labels(outs[name], labels)
        for name, columns in self.columns.items():
            if name in outs:
                outs[name] = zipmap_matrix(outs[name], columns)
        return outs
