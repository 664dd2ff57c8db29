"""Executors run jobs, each model in its own process, and report results as they come.

- ``LocalExecutor``: a pool of K concurrent worker processes forked from a forkserver that has
  already imported onnx, onnx-ir and onnxruntime (so a fresh process per model costs a fork, not
  an interpreter start). A model that crashes its process (segfault, abort, OOM kill) or runs past
  the timeout is killed and recorded as failed; the others go on.
- ``DaskExecutor``: the same jobs as tasks on a dask.distributed cluster (``--scheduler``) or a
  LocalCluster. Each task runs its model in a child interpreter (Dask worker processes are
  daemonic and may not fork pools), with the same timeout and crash isolation.

Both call ``on_start(job)`` when a job is handed out and ``on_done(job, result)`` once per job.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from unframe.errors import InputError, MissingExtraError, UsageError
from unframe.zoo.worker import FAILED, RESULT_MARKER, Job, run_job

OnStart = Callable[[Job], None]
OnDone = Callable[[Job, dict[str, Any]], None]
PRELOAD = ["unframe.zoo._preload"]


def failure(job: Job, reason: str, seconds: float) -> dict[str, Any]:
    """The result of a job whose worker died or hung: nothing is known about the model."""
    return {"id": job.id, "target_opset": job.opset, "source_opset": None, "status": FAILED,
            "reason": reason, "parity": None, "framework_parity": None, "inputs": None,
            "seconds": round(seconds, 4)}


def _signal_name(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


# ------------------------------------------------------------------------------- local pool ---
def _child(job: Job, conn: Connection) -> None:
    try:
        conn.send(run_job(job))
    finally:
        conn.close()


class LocalExecutor:
    """K worker processes at a time, one model per process, with a per-model timeout."""

    name = "local"

    def __init__(self, workers: int = 1, timeout: float | None = None) -> None:
        if workers < 1:
            raise UsageError(f"-j {workers}: need at least one worker", "pass -j 1 or more")
        self.workers = workers
        self.timeout = timeout
        self._ctx = mp.get_context("forkserver")
        self._ctx.set_forkserver_preload(PRELOAD)

    def close(self) -> None:
        """Nothing held between runs: each model's process is gone when its result is in."""

    def describe(self) -> str:
        return f"local process pool ({self.workers} worker{'s' * (self.workers > 1)})"

    def run(self, jobs: Sequence[Job], on_start: OnStart, on_done: OnDone) -> None:
        pending = deque(jobs)
        running: dict[Connection, tuple[Any, Job, float]] = {}
        try:
            while pending or running:
                while pending and len(running) < self.workers:
                    job = pending.popleft()
                    on_start(job)
                    conn, proc = self._launch(job)
                    running[conn] = (proc, job, time.monotonic())
                self._collect(running, on_done)
        finally:
            for conn, (proc, _, _) in running.items():
                proc.kill()
                conn.close()

    def _launch(self, job: Job) -> tuple[Connection, Any]:
        receive, send = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(target=_child, args=(job, send), name=f"unframe-zoo {job.id}")
        proc.start()
        send.close()  # so the parent sees EOF if the child dies without answering
        return receive, proc

    def _collect(self, running: dict[Connection, tuple[Any, Job, float]], on_done: OnDone) -> None:
        ready = wait(list(running), timeout=self._wait_time(running))
        now = time.monotonic()
        for conn in ready:
            proc, job, started = running.pop(conn)
            on_done(job, self._receive(conn, proc, job, now - started))
        for conn in [c for c, (_, _, t0) in running.items() if self._expired(t0, now)]:
            proc, job, started = running.pop(conn)
            proc.kill()
            proc.join()
            conn.close()
            on_done(job, failure(job, f"timed out after {self.timeout:g} s (worker killed)", now - started))

    def _receive(self, conn: Connection, proc: Any, job: Job, seconds: float) -> dict[str, Any]:
        try:
            result = conn.recv()
        except (EOFError, OSError):
            proc.join()
            result = failure(job, f"worker process died ({_signal_name(proc.exitcode)}) while converting "
                                  f"{job.id}", seconds)
        finally:
            conn.close()
        proc.join()
        return result

    def _expired(self, started: float, now: float) -> bool:
        return self.timeout is not None and now - started >= self.timeout

    def _wait_time(self, running: dict[Connection, tuple[Any, Job, float]]) -> float | None:
        if self.timeout is None:
            return None
        now = time.monotonic()
        return max(0.0, min(t0 + self.timeout - now for _, _, t0 in running.values()))


# ------------------------------------------------------------------------------------ dask ---
_POOLS: dict[float | None, LocalExecutor] = {}


def run_isolated(job_data: dict[str, Any], timeout: float | None) -> dict[str, Any]:
    """A Dask task's body: run one job in a child process, so that a crash or hang kills the
    child, not the Dask worker. Forked from a per-worker forkserver when the worker may have
    children (our LocalCluster), else in a fresh interpreter (daemonic workers of other clusters)."""
    job = Job.from_dict(job_data)
    if not mp.current_process().daemon:
        pool = _POOLS.setdefault(timeout, LocalExecutor(1, timeout))
        box: list[dict[str, Any]] = []
        pool.run([job], lambda _: None, lambda _, result: box.append(result))
        return box[0]
    return _run_in_interpreter(job, job_data, timeout)


def _run_in_interpreter(job: Job, job_data: dict[str, Any], timeout: float | None) -> dict[str, Any]:
    started = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "unframe.zoo.worker"], input=json.dumps(job_data),
                              capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    except subprocess.TimeoutExpired:
        return failure(job, f"timed out after {timeout:g} s (worker killed)", time.monotonic() - started)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            return json.loads(line[len(RESULT_MARKER):])
    return failure(job, f"worker process died ({_signal_name(proc.returncode)}) while converting {job.id}",
                   time.monotonic() - started)


class DaskExecutor:
    """Jobs as tasks on a dask.distributed cluster; a LocalCluster of K workers when no
    scheduler address is given. Connects in ``__init__`` so that an unreachable scheduler fails
    before anything is written."""

    name = "dask"

    def __init__(self, workers: int = 1, timeout: float | None = None, scheduler: str | None = None,
                 connect_timeout: float = 10.0) -> None:
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError as exc:
            raise MissingExtraError("--executor dask", "dask", "dask[distributed]") from exc
        self.timeout = timeout
        self.scheduler = scheduler
        self.workers = workers
        self._cluster = None
        if scheduler:
            try:
                self.client = Client(scheduler, timeout=f"{connect_timeout}s")
            except (OSError, TimeoutError, ValueError) as exc:
                raise InputError(f"can't reach the Dask scheduler at {scheduler} ({_one_line(exc)})",
                                 "check the address (tcp://host:8786) and that the scheduler is running") from exc
        else:
            import dask

            # Non-daemonic workers may fork, so each model runs in a process forked from a
            # preloaded forkserver instead of a cold interpreter.
            with dask.config.set({"distributed.worker.daemon": False}):
                self._cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                             dashboard_address=None)
            self.client = Client(self._cluster)

    def describe(self) -> str:
        if self.scheduler:
            return f"dask scheduler {self.scheduler}"
        return f"dask LocalCluster ({self.workers} worker{'s' * (self.workers > 1)})"

    def run(self, jobs: Sequence[Job], on_start: OnStart, on_done: OnDone) -> None:
        from dask.distributed import as_completed

        by_key: dict[str, Job] = {}
        futures = []
        for job in jobs:
            on_start(job)
            fut = self.client.submit(run_isolated, job.to_dict(), self.timeout, pure=False,
                                     key=f"unframe-zoo-{len(futures)}-{job.id}")
            by_key[fut.key] = job
            futures.append(fut)
        for fut in as_completed(futures):
            job = by_key[fut.key]
            try:
                result = fut.result()
            except Exception as exc:  # the task itself failed (e.g. its worker was lost)
                result = failure(job, f"dask task failed: {type(exc).__name__}: {_one_line(exc)}", 0.0)
            on_done(job, result)

    def close(self) -> None:
        self.client.close()
        if self._cluster is not None:
            self._cluster.close()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def make_executor(kind: str, workers: int, timeout: float | None, scheduler: str | None) -> Any:
    if kind == "local":
        if scheduler:
            raise UsageError("--scheduler needs --executor dask", "add --executor dask")
        return LocalExecutor(workers, timeout)
    if kind == "dask":
        return DaskExecutor(workers, timeout, scheduler)
    raise UsageError(f"unknown executor {kind!r}", "use --executor local or --executor dask")
