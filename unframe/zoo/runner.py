"""The batch runner behind ``unframe zoo upgrade``: find the models, refuse bad set-ups before any
work, hand each model to an executor, journal every start and result, show progress, and write
the report.

Order of checks, so that a refused run leaves nothing behind: options and opset, the source
(manifest or folder), OUT_DIR not inside the source, existing outputs, the executor (a Dask
scheduler must answer), and only then OUT_DIR, its journal and the outputs.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unframe.errors import InputError, OutputExistsError, UsageError
from unframe.zoo import report as reports
from unframe.zoo.executors import make_executor
from unframe.zoo.journal import STATE_DIR, open_journal
from unframe.zoo.manifest import ONNX_SUFFIXES, ZooEntry, ZooSource, check_out_dir, load_source
from unframe.zoo.worker import FAILED, OK, REFUSED, Job


@dataclass
class UpgradeOptions:
    opset: int
    out_dir: Path
    workers: int = 1
    executor: str = "local"
    scheduler: str | None = None
    resume: bool = False
    report: Path | None = None
    timeout: float | None = 600.0
    source_format: str | None = None  # --from: a frontend name; None means ONNX files
    target: str | None = None  # --to: a backend name; None means ONNX
    force: bool = False
    seed: int = 0
    progress: bool = True
    debug: bool = False  # keep each failure's traceback (the worker's and its sandboxed children's)


@dataclass
class BatchResult:
    report: dict[str, Any]
    written: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.report["totals"][FAILED] == 0


def upgrade_zoo(src: Path, opts: UpgradeOptions, console: Any = None) -> BatchResult:
    """Upgrade every model of ``src`` (a folder or a manifest.toml) to ``opts.opset`` under
    ``opts.out_dir``. Returns the report; per-model failures are rows, not exceptions."""
    _check_opset(opts.opset)
    reports.check_report_path(opts.report)
    fmt, target, suffixes, out_suffix = _formats(opts)
    source = load_source(src, suffixes)
    # a heavy entry nobody built (`zoo build` skips them by default) is left out, not failed
    source.entries = [e for e in source.entries if not (e.heavy and not e.path.exists())]
    out_dir = check_out_dir(source, opts.out_dir)
    _check_report_location(source, opts.report)
    _check_sources_exist(source)
    jobs = {e.id: _job(e, out_dir, out_suffix, fmt, target, opts) for e in source.entries}
    if not opts.resume and not opts.force:
        _check_no_outputs(out_dir, jobs)
    executor = make_executor(opts.executor, opts.workers, opts.timeout, opts.scheduler)
    try:
        return _run(source, jobs, out_dir, opts, executor, console)
    finally:
        executor.close()


def _run(source: ZooSource, jobs: dict[str, Job], out_dir: Path, opts: UpgradeOptions, executor: Any,
         console: Any) -> BatchResult:
    started = time.monotonic()
    out_dir.mkdir(parents=True, exist_ok=True)
    config = {"source": source.describe(), "opset": opts.opset, "from": jobs_format(jobs),
              "to": next(iter(jobs.values())).target if jobs else "onnx"}
    journal, state = open_journal(out_dir, config, resume=opts.resume, force=opts.force)
    _remove_staging_leftovers(out_dir)
    entries = {e.id: e for e in source.entries}
    results: dict[str, dict[str, Any]] = {k: v for k, v in state.done.items() if k in jobs}
    todo = [j for k, j in jobs.items() if k not in results]
    try:
        with _Progress(len(jobs), results, opts.progress, console) as progress:
            todo = _record_missing(todo, entries, out_dir, journal, results, progress)

            def on_start(job: Job) -> None:
                journal.start(job.id)

            def on_done(job: Job, result: dict[str, Any]) -> None:
                row = _row(entries[job.id], job, out_dir, result, keep_traceback=opts.debug)
                journal.done(job.id, row)
                results[job.id] = row
                progress.advance(row["status"])

            executor.run(todo, on_start, on_done)
    finally:
        journal.close()
    rows = [results[k] for k in jobs if k in results]
    meta = {"source": source.describe(), "opset": opts.opset, "from": config["from"], "to": config["to"],
            "executor": executor.describe()}
    report = reports.build_report(rows, meta, time.monotonic() - started)
    written = reports.write_reports(report, out_dir, opts.report)
    return BatchResult(report, written)


def jobs_format(jobs: dict[str, Job]) -> str:
    return next(iter(jobs.values())).source_format if jobs else "onnx"


# ----------------------------------------------------------------------------- set-up checks --
def _check_opset(opset: int) -> None:
    from unframe import opset as facts

    newest = facts.newest_opset()
    if not facts.MIN_OPSET <= opset <= newest:
        raise UsageError(f"--opset {opset} is outside {facts.MIN_OPSET}..{newest}",
                         f"choose an opset between {facts.MIN_OPSET} and {newest}")


def _formats(opts: UpgradeOptions) -> tuple[str, str, tuple[str, ...], str | None]:
    """(source format, targets as a comma list, source suffixes, output suffix: None keeps the
    source's, "" means a folder per model holding one file per target)."""
    from unframe.converters.registry import FRONTENDS
    from unframe.route import get_backend, parse_targets

    fmt = opts.source_format or "onnx"
    targets = parse_targets(opts.target or "onnx")
    suffixes: tuple[str, ...] = ONNX_SUFFIXES
    if fmt != "onnx":
        if fmt not in FRONTENDS:
            raise UsageError(f"--from {fmt}: no such frontend", f"use one of {', '.join(map(str, FRONTENDS))}")
        fe = FRONTENDS.get(fmt)
        fe.ensure_available(f"--from {fmt}")
        suffixes = tuple(s.lower() for s in fe.suffixes)
    for target in targets:
        get_backend(target).ensure_available(f"--to {target}")
    out_suffix = None
    if len(targets) > 1:
        out_suffix = ""
    elif targets != ["onnx"] or fmt != "onnx":
        be = get_backend(targets[0])
        out_suffix = be.suffixes[0] if be.suffixes else ".onnx"
    return fmt, ",".join(targets), suffixes, out_suffix


def _check_report_location(source: ZooSource, page: Path | None) -> None:
    if page is None:
        return
    root = source.root.resolve()
    where = page.resolve()
    if root in where.parents:
        raise UsageError(f"--report {page} is inside the source folder {source.root}",
                         "write the report outside the models' folder (e.g. inside OUT_DIR)")


def _check_sources_exist(source: ZooSource) -> None:
    if not source.entries:
        raise InputError(f"{source.describe()}: no models found", "check the folder, or --from for non-ONNX models")
    if source.manifest is not None and not any(e.path.exists() for e in source.entries):
        raise InputError(f"{source.manifest}: none of its {len(source.entries)} models exist under {source.root}",
                         "build them first: unframe zoo build")


def _check_no_outputs(out_dir: Path, jobs: dict[str, Job]) -> None:
    if (out_dir / STATE_DIR).exists():
        raise OutputExistsError(f"{out_dir} holds an earlier zoo run",
                                "pass --resume to continue it or --force to start over")
    existing = [j.output for j in jobs.values() if Path(j.output).exists()]
    if existing:
        raise OutputExistsError(f"output {existing[0]} already exists ({len(existing)} of {len(jobs)} outputs exist)",
                                "pass --force to replace them or choose another OUT_DIR")


def _remove_staging_leftovers(out_dir: Path) -> None:
    """Staging folders of models that were being written when a run was killed."""
    for tmp in out_dir.rglob(".unframe-tmp-*"):
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)


# ------------------------------------------------------------------------------- jobs, rows ---
def _job(entry: ZooEntry, out_dir: Path, out_suffix: str | None, fmt: str, target: str,
         opts: UpgradeOptions) -> Job:
    # "" (several targets): a folder per model, e.g. cnn/resnet/ holding resnet.onnx, resnet.engine
    rel = entry.rel if out_suffix is None else entry.rel.with_suffix(out_suffix)
    return Job(id=entry.id, source=str(entry.path), output=str(out_dir / rel), opset=opts.opset,
               source_format=fmt, target=target, seed=opts.seed)


def _row(entry: ZooEntry, job: Job, out_dir: Path, result: dict[str, Any], *,
         keep_traceback: bool = False) -> dict[str, Any]:
    row = dict(result)
    row.update(id=entry.id, name=entry.name, framework=entry.framework,
               output=Path(job.output).relative_to(out_dir).as_posix() if result["status"] == OK else None)
    if not keep_traceback:
        row.pop("traceback", None)
    return row


def _record_missing(todo: list[Job], entries: dict[str, ZooEntry], out_dir: Path, journal: Any,
                    results: dict[str, dict[str, Any]], progress: Any) -> list[Job]:
    """Manifest entries whose file is missing fail at once, without a worker."""
    from unframe.zoo.executors import failure

    runnable = []
    for job in todo:
        if Path(job.source).exists():
            runnable.append(job)
            continue
        entry = entries[job.id]
        row = _row(entry, job, out_dir, failure(job, f"{entry.path}: no such file (listed in the manifest)", 0.0))
        journal.done(job.id, row)
        results[job.id] = row
        progress.advance(FAILED)
    return runnable


# --------------------------------------------------------------------------------- progress ---
class _Progress:
    """A rich progress bar with ok / refused / failed counts and an ETA (on stderr)."""

    def __init__(self, total: int, already: dict[str, dict[str, Any]], enabled: bool, console: Any) -> None:
        self.total = total
        self.counts = {OK: 0, REFUSED: 0, FAILED: 0}
        for row in already.values():
            self.counts[row["status"]] = self.counts.get(row["status"], 0) + 1
        self.enabled = enabled
        self.console = console
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            console = self.console or Console(stderr=True)
            self._progress = Progress(TextColumn("upgrading"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("{task.description}"), TimeElapsedColumn(),
                                      TextColumn("ETA"), TimeRemainingColumn(), console=console)
            self._progress.start()
            self._task = self._progress.add_task(self._describe(), total=self.total,
                                                 completed=sum(self.counts.values()))
        return self

    def _describe(self) -> str:
        c = self.counts
        return f"[green]{c[OK]} ok[/] [yellow]{c[REFUSED]} refused[/] [red]{c[FAILED]} failed[/]"

    def advance(self, status: str) -> None:
        self.counts[status] = self.counts.get(status, 0) + 1
        if self._progress is not None:
            self._progress.update(self._task, advance=1, description=self._describe())

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()
