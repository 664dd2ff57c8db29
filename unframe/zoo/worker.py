"""The work on one model, run inside an isolated worker process.

``run_job(job)`` never raises: every outcome becomes a result dict with ``status`` ok, refused
(the target can't take the model: an impossible downgrade, an unsupported op) or failed (corrupt
input, parity failure, a tool error), and a one-line ``reason``.

Every job runs the same pipeline as ``unframe convert`` (``unframe.api.convert``): parity inputs
are ``inputs.npz`` beside the model, else seeded generated ones; each stage is checked against the
one before, provenance is the same record, and the output is written atomically. A model whose
numbers differ is not written.

``python -m unframe.zoo.worker`` runs one job from JSON on stdin and prints the result as the
last stdout line (used where a pool can't fork, e.g. inside Dask workers).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import traceback
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from unframe.validate.runner import Runner

OK, REFUSED, FAILED = "ok", "refused", "failed"
RESULT_MARKER = "UNFRAME-ZOO-RESULT "


@dataclass(frozen=True)
class Job:
    """One model to process. Paths are absolute; ``id`` is the path under the source root."""

    id: str
    source: str
    output: str
    opset: int
    source_format: str = "onnx"
    target: str = "onnx"
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Job:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def run_job(job: Job) -> dict[str, Any]:
    """Process one model; every error becomes a ``failed`` or ``refused`` result."""
    from unframe.errors import UnframeError, UnsupportedError

    started = time.perf_counter()
    result: dict[str, Any] = {"id": job.id, "target_opset": job.opset, "source_opset": None,
                              "status": FAILED, "reason": "", "parity": None, "framework_parity": None,
                              "inputs": None}
    try:
        _convert(job, result)
    except UnsupportedError as exc:
        result.update(status=REFUSED, reason=str(exc), blockers=[b.to_dict() for b in exc.blockers])
    except UnframeError as exc:
        result.update(status=FAILED, reason=str(exc), traceback=_traceback(exc))
    except Exception as exc:  # a tool's own error: record it, the batch goes on
        result.update(status=FAILED, reason=f"{type(exc).__name__}: {_first_line(exc)}",
                      traceback=_traceback(exc))
    result["seconds"] = round(time.perf_counter() - started, 4)
    return result


def _traceback(exc: BaseException) -> str:
    """The worker's traceback and those of the sandboxed children behind it (``--debug``)."""
    from unframe.sandbox import child_tracebacks

    own = "".join(traceback.format_exception(exc, limit=12))
    return "\n".join([own, *(f"in the sandboxed child:\n{t}" for t in child_tracebacks(exc))])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _convert(job: Job, result: dict[str, Any]) -> None:
    """One model through the same pipeline as ``unframe convert``: load, export, opset, backend,
    each stage checked against the one before, one provenance format. Workers run side by side,
    so onnxruntime gets one thread each."""
    from unframe.validate import onnxruntime as ort_runners
    from unframe.validate.onnxruntime import untrusted_graphs

    ort_runners.set_default_threads(1)
    path = Path(job.source)
    from unframe.route import get_frontend

    onnx_in = not get_frontend(job.source_format).exports  # ONNX files: inputs come from the graph
    if onnx_in:
        from unframe import io
        from unframe.opset import main_opset

        model = io.load_model(path)  # lazy: external data is not read
        result["source_opset"] = main_opset(model)
        samples, origin = parity_feeds(path, model, job.seed)
    else:
        samples, origin = _saved_inputs(path)
    result["inputs"] = origin
    out = Path(job.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    targets = [t for t in job.target.split(",") if t]
    # --opset is for ONNX output; a backend target brings the model to its own opset.
    opset = job.opset if "onnx" in targets else None
    # A graph from a file runs in onnxruntime's child; the block holds its sessions open past
    # the conversion, for the comparison with the framework's saved outputs below.
    with untrusted_graphs() if onnx_in else contextlib.nullcontext():
        _convert_and_compare(job, result, path, out, opset, samples, origin, onnx_in)


def _convert_and_compare(job: Job, result: dict[str, Any], path: Path, out: Path, opset: int | None,
                         samples: Any, origin: str, onnx_in: bool) -> None:
    import unframe.api as api
    from unframe.errors import ParityError

    try:
        res = api.convert(path, from_=job.source_format, to=job.target, output=out, opset=opset,
                          sample_inputs=samples, force=True)
    except ParityError as exc:
        if exc.report is not None:
            result["parity"] = _report_figures(exc.report)
        raise
    results = list(res.results.values()) if hasattr(res, "results") else [res]
    first = results[0]
    opset_path = first.flow.opset_path if first.flow is not None else []
    if result["source_opset"] is None and opset_path:
        result["source_opset"] = opset_path[0]
    conversion = first.opset_conversion
    result["nodes_changed"] = getattr(conversion, "nodes_changed", 0)
    result["parity"] = _report_figures(first.report)
    if origin == "saved" and onnx_in and first.flow is not None and first.flow.reference is not None:
        result["framework_parity"] = _framework_parity(path, first.flow.reference, samples[0])
    result["status"] = OK


def _saved_inputs(path: Path) -> tuple[Any, str]:
    saved = sample_file(path, "inputs")
    return (str(saved), "saved") if saved else (None, "generated")


def parity_feeds(path: Path, model: Any, seed: int) -> tuple[list[dict[str, np.ndarray]], str]:
    """Saved inputs beside the model when they name every graph input, else generated ones."""
    from unframe import io
    from unframe.validate.inputs import generate_feeds, graph_inputs, load_npz

    model = model if model is not None else io.load_model(path)
    saved = sample_file(path, "inputs")
    if saved is not None:
        feeds = load_npz(str(saved))
        needed = {v.name for v in graph_inputs(model)}
        if needed <= set(feeds[0]):
            return feeds, "saved"
    return generate_feeds(model, seed=seed, source=str(path)), "generated"


def sample_file(path: Path, kind: str) -> Path | None:
    """``<stem>.<kind>.npz`` beside the model, else ``<kind>.npz`` in its folder."""
    for candidate in (path.with_name(f"{path.stem}.{kind}.npz"), path.parent / f"{kind}.npz"):
        if candidate.is_file():
            return candidate
    return None


def parity_figures(parity: Any) -> dict[str, Any]:
    return {"stage": parity.stage, "status": parity.status, "cases": parity.cases,
            "max_abs": _finite(parity.max_abs), "max_rel": _finite(parity.max_rel),
            "scale": _finite(parity.scale), "outputs": len(parity.outputs), "reason": parity.reason}


def _finite(x: float) -> float | str:
    return float(x) if np.isfinite(x) else str(x)


def _framework_parity(path: Path, candidate: Any, feed: dict[str, np.ndarray]) -> dict[str, Any] | None:
    """How the converted graph compares with the source framework's saved outputs. Informational:
    the exporter's own error is in it, so it never fails the model."""
    from unframe.validate.compare import compare

    saved = sample_file(path, "outputs")
    if saved is None:
        return None
    with np.load(saved, allow_pickle=False) as data:
        outputs = {k: data[k] for k in data.files}
    return parity_figures(compare(SavedOutputs(outputs), candidate, feed, stage="source framework vs upgraded"))


class SavedOutputs(Runner):
    """A runner that returns outputs saved by the source framework (one feed only)."""

    name = "saved source-framework outputs"
    timed = False  # reads a file: no tool runs

    def __init__(self, outputs: dict[str, np.ndarray]) -> None:
        self.outputs = outputs

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(self.outputs)


def _report_figures(report: Any) -> dict[str, Any]:
    stages = [s for s in report.stages if s.status != "skipped"]
    worst = max(stages, key=lambda s: s.max_abs, default=None)
    figures = parity_figures(worst) if worst else {"stage": "", "status": "skipped", "cases": 0,
                                                   "max_abs": 0.0, "max_rel": 0.0, "scale": 0.0,
                                                   "outputs": 0, "reason": ""}
    figures["stages"] = [s.summary() for s in report.stages]
    if report.first_failure is not None:
        figures.update(status="failed", reason=report.first_failure.reason)
    return figures


# --------------------------------------------------------------------- subprocess entry point --
def main() -> int:
    """Run one job given as JSON on stdin; print the result (one JSON line) after a marker."""
    job = Job.from_dict(json.loads(sys.stdin.read()))
    result = run_job(job)
    sys.stdout.write("\n" + RESULT_MARKER + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
