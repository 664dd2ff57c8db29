"""The work on one model, run inside an isolated worker process.

``run_job(job)`` never raises: every outcome becomes a result dict with ``status`` ok, refused
(the target can't take the model: an impossible downgrade, an unsupported op) or failed (corrupt
input, parity failure, a tool error), and a one-line ``reason``.

For ONNX in and ONNX out the steps are: load (external data stays lazy), pick parity inputs
(``inputs.npz`` beside the model, else seeded generated ones), convert the opset with the version
converter, compare the upgraded graph against the original with onnxruntime, stamp provenance and
write the output atomically. A model whose numbers differ is not written.

``python -m unframe.zoo.worker`` runs one job from JSON on stdin and prints the result as the
last stdout line (used where a pool can't fork, e.g. inside Dask workers).
"""

from __future__ import annotations

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
PARITY_STAGE = "original vs upgraded (onnxruntime)"


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
        if job.source_format == "onnx" and job.target == "onnx":
            _upgrade_onnx(job, result)
        else:
            _convert_other(job, result)
    except UnsupportedError as exc:
        result.update(status=REFUSED, reason=str(exc), blockers=[b.to_dict() for b in exc.blockers])
    except UnframeError as exc:
        result.update(status=FAILED, reason=str(exc))
    except Exception as exc:  # a tool's own error: record it, the batch goes on
        result.update(status=FAILED, reason=f"{type(exc).__name__}: {_first_line(exc)}")
        result["traceback"] = traceback.format_exc(limit=8)
    result["seconds"] = round(time.perf_counter() - started, 4)
    return result


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


# ---------------------------------------------------------------------------- ONNX -> ONNX ----
def _upgrade_onnx(job: Job, result: dict[str, Any]) -> None:
    from unframe import io
    from unframe import opset as facts
    from unframe.errors import ParityError
    from unframe.validate.compare import compare
    from unframe.version_converter import convert_opset

    path = Path(job.source)
    model = io.load_model(path)
    result["source_opset"] = facts.model_opset(model)
    feeds, origin = parity_feeds(path, model, job.seed)
    result["inputs"] = origin
    reference = single_thread_runner(path)
    conversion = convert_opset(model, job.opset)
    result["nodes_changed"] = conversion.nodes_changed
    candidate = single_thread_runner(model)
    parity = compare(reference, candidate, feeds, stage=PARITY_STAGE)
    result["parity"] = parity_figures(parity)
    if not parity:
        raise ParityError(f"{path.name}: upgraded model differs from the original: {parity.reason}",
                          "the output was not written; report the model with --debug")
    if origin == "saved":
        result["framework_parity"] = _framework_parity(path, candidate, feeds[0])
    _stamp(model, path, result, parity.summary())
    out = Path(job.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    io.save_model(model, out, force=True)
    result["status"] = OK


def _stamp(model: Any, source: Path, result: dict[str, Any], parity: str) -> None:
    from unframe import io

    io.stamp_onnx(model, {
        "source_sha256": io.sha256_of(source),
        "route": f"onnx opset {result['source_opset']} -> {result['target_opset']} (unframe zoo upgrade)",
        "parity": parity,
    })


def parity_feeds(path: Path, model: Any, seed: int) -> tuple[list[dict[str, np.ndarray]], str]:
    """Saved inputs beside the model when they name every graph input, else generated ones."""
    from unframe.validate.inputs import generate_feeds, graph_inputs, load_npz

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
            "outputs": len(parity.outputs), "reason": parity.reason}


def _finite(x: float) -> float | str:
    return float(x) if np.isfinite(x) else str(x)


def _framework_parity(path: Path, candidate: Any, feed: dict[str, np.ndarray]) -> dict[str, Any] | None:
    """How the upgraded graph compares with the source framework's saved outputs. Informational:
    the exporter's own error is in it, so it never fails the model."""
    from unframe.validate.compare import compare

    saved = sample_file(path, "outputs")
    if saved is None:
        return None
    with np.load(saved, allow_pickle=False) as data:
        outputs = {k: data[k] for k in data.files}
    return parity_figures(compare(SavedOutputs(outputs), candidate, feed, stage="source framework vs upgraded"))


def single_thread_runner(model: Any) -> Any:
    """onnxruntime with one intra-op thread (workers run side by side on the cores), falling back
    to onnx's reference evaluator when onnxruntime can't load the model."""
    from unframe.validate.onnxruntime import ReferenceRunner

    try:
        return _single_thread_ort_class()(model)
    except Exception as exc:  # onnxruntime refuses: an opset or op it doesn't know
        runner = ReferenceRunner(model, why=_first_line(exc))
        runner.name += " (onnxruntime could not load the model)"
        return runner


def _make_single_thread_ort() -> type:
    import onnxruntime as ort

    from unframe.validate.onnxruntime import OnnxRuntimeRunner, _ModelFile, _version

    class SingleThreadOrt(OnnxRuntimeRunner):
        def __init__(self, model: Any) -> None:  # noqa: D107 - same as the parent, one thread
            self.name = f"onnxruntime {_version('onnxruntime')}"
            src = _ModelFile(model)
            opts = ort.SessionOptions()
            opts.log_severity_level = 3
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            opts.intra_op_num_threads = 1
            opts.inter_op_num_threads = 1
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            try:
                self.session = ort.InferenceSession(src.path or src.data, opts, providers=["CPUExecutionProvider"])
            finally:
                src.cleanup()
            self._inputs = self.session.get_inputs()
            self._outputs = [o.name for o in self.session.get_outputs()]

    return SingleThreadOrt


_ORT_CLASS: list[type] = []


def _single_thread_ort_class() -> type:
    """Built on first use: onnxruntime is imported only in the workers that need it."""
    if not _ORT_CLASS:
        _ORT_CLASS.append(_make_single_thread_ort())
    return _ORT_CLASS[0]


class SavedOutputs(Runner):
    """A runner that returns outputs saved by the source framework (one feed only)."""

    name = "saved source-framework outputs"

    def __init__(self, outputs: dict[str, np.ndarray]) -> None:
        self.outputs = outputs

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(self.outputs)


# ----------------------------------------------------------------- other formats (--from/--to) --
def _convert_other(job: Job, result: dict[str, Any]) -> None:
    """Any source format to any target through the pipeline (frontend, version converter,
    backend), each stage checked against the one before."""
    import unframe.api as api
    from unframe.errors import ParityError

    path = Path(job.source)
    saved = sample_file(path, "inputs")
    out = Path(job.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        # A backend target brings the model to its own canonical opset; --opset is for ONNX output.
        opset = job.opset if job.target == "onnx" else None
        res = api.convert(path, from_=job.source_format, to=job.target, output=out, opset=opset,
                          sample_inputs=str(saved) if saved else None, force=True)
    except ParityError as exc:
        if exc.report is not None:
            result["parity"] = _report_figures(exc.report)
        raise
    result["inputs"] = "saved" if saved else "generated"
    route = res.route.to_dict() if hasattr(res.route, "to_dict") else {}
    conv = res.opset_conversion
    result["source_opset"] = getattr(conv, "source_opset", None) or route.get("export_opset")
    result["parity"] = _report_figures(res.report)
    result["status"] = OK


def _report_figures(report: Any) -> dict[str, Any]:
    stages = [s for s in report.stages if s.status != "skipped"]
    worst = max(stages, key=lambda s: s.max_abs, default=None)
    figures = parity_figures(worst) if worst else {"stage": "", "status": "skipped", "cases": 0,
                                                   "max_abs": 0.0, "max_rel": 0.0, "outputs": 0, "reason": ""}
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
