"""The CoreML runner: the MIL evaluator on a saved package, fed and read with ONNX names.

``CoreMLRunner`` maps the ONNX graph's inputs and outputs onto the package's (names and dtypes,
recorded by the backend in the package's ``unframe.io`` metadata), so parity compares like with
like. It also reads the values inside the program (``validate.intermediates.ReadsIntermediates``),
for the divergence locator: the MIL evaluator records every op's output, and the translation
recorded which MIL var each ONNX value became (``unframe.values`` in the package's metadata);
coremltools' passes that rename a var (``conv_0`` -> ``conv_0_cast_fp16`` under fp16 compute)
are undone by suffix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from unframe.validate.runner import Runner, TensorSpec

_MIL_INPUT = {"float64": np.float32, "float32": np.float32, "float16": np.float16}
# names coremltools' passes give a renamed var, after the var's own name
RENAME_SUFFIXES = ("_cast_fp16", "_cast_fp32", "_to_fp16", "_to_fp32")
NO_VALUE_MAP = ("the package records no MIL name per ONNX value (made by an older unframe or another "
                "tool): only its outputs are tapped")


class CoreMLRunner(Runner):
    """The MIL evaluator on the saved package, fed and read with ONNX names and dtypes
    (int64 inputs go in as int32, bool as int32, float64 as float32; outputs are cast back).
    Reads the program's intermediate values too (``intermediates``), except for a stateful
    package."""

    def __init__(self, inner: Runner, io: dict[str, Any], values: Mapping[str, str] | None = None) -> None:
        """``values``: ONNX value name -> the MIL var it became (``unframe.values``), for
        ``intermediates``."""
        from unframe.converters.backends.coreml.states import StatefulIO

        self.inner = inner
        self.io = io
        self.values = dict(values or {})
        states = io.get("states") or []
        # a stateful package is fed and read as the graph it came from (coreml.states)
        self.stateful = StatefulIO(states) if states else None

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.inner.name

    def _states(self) -> dict[str, np.ndarray]:
        """The MIL evaluator's states, kept from call to call (loading the program if deferred)."""
        inner = self.inner.pin() if hasattr(self.inner, "pin") else self.inner
        return inner.states  # type: ignore[attr-defined, no-any-return]

    def input_specs(self) -> list[TensorSpec]:
        specs = [TensorSpec(i["onnx"], tuple(i["shape"]), i["dtype"]) for i in self.io["inputs"]]
        for s in self.io.get("states") or []:
            specs.append(TensorSpec(s["past"], (1, s["shape"][1], None, s["shape"][3]), s["dtype"]))
        return specs

    def output_names(self) -> list[str]:
        return [o["onnx"] for o in self.io["outputs"]] + [s["present"] for s in self.io.get("states") or []]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        batch = int(np.asarray(feeds["input_ids"]).shape[0]) if self.stateful is not None else 1
        if batch > 1:  # states hold one sequence: a batch runs row by row, as an app would
            rows = [self.run({k: np.asarray(v)[b:b + 1] for k, v in feeds.items()}) for b in range(batch)]
            return {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
        cached = None
        if self.stateful is not None:
            cached = self.stateful.before(feeds, self._states())
        mil_feeds = {}
        for spec in self.io["inputs"]:
            value = np.asarray(feeds[spec["onnx"]])
            if not spec["shape"]:
                value = value.reshape(1)  # scalars travel as [1]
            mil_feeds[spec["mil"]] = value.astype(_MIL_INPUT.get(value.dtype.name, np.int32))
        outs = self.inner.run(mil_feeds)
        result = {}
        for o in self.io["outputs"]:
            raw = outs[o["mil"]]
            if isinstance(raw, dict):  # a classifier's probabilities, {label: p} in class order
                raw = np.array(list(raw.values()), dtype=np.float32)
                if o.get("rank"):
                    raw = raw.reshape((1,) * (o["rank"] - 1) + (-1,))
            value = _restore(np.asarray(raw), o["dtype"])
            result[o["onnx"]] = value.reshape(()) if o.get("rank") == 0 and value.size == 1 else value
        if self.stateful is not None and cached is not None:
            total = cached + int(np.asarray(feeds["input_ids"]).shape[1])
            result.update(self.stateful.after(self._states(), total,
                                              {s["present"]: s["dtype"] for s in self.io["states"]}))
        return result


    # -- intermediate values (validate.intermediates.ReadsIntermediates) --------------------------
    def intermediate_limitations(self) -> list[str] | None:
        if self.io.get("states"):
            return None  # a stateful package's outputs come through its states, not one call
        return [] if self.values else [NO_VALUE_MAP]

    def intermediates(self, feeds: Mapping[str, np.ndarray],
                      names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        mil = self.inner.pin() if hasattr(self.inner, "pin") else self.inner
        captured: dict[str, Any] = {}
        outputs = CoreMLRunner(_Recording(mil, captured), self.io).run(feeds)
        return by_onnx_name(captured, outputs, self.values, names)


def by_onnx_name(captured: Mapping[str, Any], outputs: Mapping[str, np.ndarray],
                 values: Mapping[str, str], names: Sequence[str] | None) -> dict[str, np.ndarray]:
    """The MIL vars the evaluator ``captured`` under the ONNX names ``values`` maps them from
    (a var coremltools renamed found by its base name), and the ``outputs``; ``names``: only
    these."""
    by_mil: dict[str, np.ndarray] = {}
    for mil_name, value in captured.items():
        if isinstance(value, np.ndarray):
            by_mil.setdefault(_base(mil_name), value)
            by_mil[mil_name] = value
    wanted = set(names) if names is not None else None
    out: dict[str, np.ndarray] = {}
    for onnx_name, mil_name in values.items():
        if (wanted is None or onnx_name in wanted) and mil_name in by_mil:
            out[onnx_name] = by_mil[mil_name]
    for onnx_name, value in outputs.items():
        if wanted is None or onnx_name in wanted:
            out[onnx_name] = value
    return out


def _base(mil_name: str) -> str:
    for suffix in RENAME_SUFFIXES:
        if mil_name.endswith(suffix):
            return mil_name[: -len(suffix)]
    return mil_name


class _Recording(Runner):
    """Runs the MIL program through the evaluator, keeping every top-level op's outputs."""

    def __init__(self, inner: Any, captured: dict[str, Any]) -> None:
        self.inner = inner
        self.captured = captured
        self.name = inner.name

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
        from unframe.converters.backends.coreml.mil_eval.evaluator import evaluate

        return evaluate(self.inner.program, dict(feeds), self.inner.function, capture=self.captured)


class PackageValues:
    """The intermediates of a package with no ``unframe.io`` record (another tool's): the MIL
    evaluator's outputs, under the package's own names (a tap, ``validate.intermediates.Tap``)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.limitations = [NO_VALUE_MAP]

    def values(self, feeds: Mapping[str, np.ndarray],
               names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        captured: dict[str, Any] = {}
        outputs = _Recording(self.inner, captured).run(feeds)
        return by_onnx_name(captured, outputs, {}, names)


def open_package(path: str | Path) -> Runner:
    """A runner of a saved package: a ``CoreMLRunner`` when unframe recorded its ONNX inputs and
    outputs (``unframe.io``), else the bare MIL evaluator (another tool's package). The package is
    opened as a foreign file (probed in a child first)."""
    from unframe.converters.backends.coreml.mil_eval import MILRunner

    inner = MILRunner(path)
    meta = user_metadata(path)
    io = json.loads(meta.get("unframe.io", "{}") or "{}")
    if not io:
        return inner
    return CoreMLRunner(inner, io, json.loads(meta.get("unframe.values", "{}") or "{}"))


def user_metadata(path: str | Path) -> dict[str, str]:
    """The package's user metadata (where the backend records ``unframe.*``)."""
    from unframe.converters.backends.coreml.mil_eval._ct import import_coremltools

    ct = import_coremltools()
    return dict(ct.models.MLModel(str(path), skip_model_load=True).user_defined_metadata)


def _restore(value: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bool":
        return value != 0
    if value.dtype.kind == "f" and np.dtype(dtype).kind in "iu":
        return np.rint(value).astype(dtype)
    return value.astype(dtype)
