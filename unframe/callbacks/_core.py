"""What the training callbacks share: a snapshot of the weights, handed to a background process
that converts it, with at most one job waiting.

The training thread only copies the weights to the CPU (``snapshot``) and hands them over
(``submit``). A feeder thread sends each job to a worker process (``spawn``: no forked torch
or TensorFlow state) that rebuilt the model once from a recipe (the pickled torch module, or a
``.keras`` file saved once) and, per job, loads the weights and runs ``unframe.convert``: every
stage checked, files placed atomically. While a job runs, a newer one replaces the one waiting
(``superseded``), so training never waits on conversion. Outcomes are logged as they arrive
(logger ``unframe.callbacks``) and collected for the callback to put in the trainer's logs.

Failures: logged, not raised, unless ``raise_errors``, when the callback raises them at its next
hook. A target that can't take the model (exit 4, with its blockers) is warned about once per
run and dropped for the rest of it; the other targets go on.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import pickle
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unframe.errors import UnframeError, UnsupportedError, UsageError

LOG = logging.getLogger("unframe.callbacks")


# ------------------------------------------------------------------------ jobs ---------------
@dataclass
class Job:
    tag: str  # "epoch=2-step=24": names the artifacts and the log lines
    weights: Any  # a CPU snapshot: {name: tensor} for torch, [ndarray] for Keras
    folder: Path
    targets: list[str]
    step: int = 0
    as_folder: bool = False  # several targets asked: a folder per job, whatever is left of them


@dataclass
class TargetOutcome:
    target: str
    path: str = ""
    passed: bool = False
    max_abs: float | None = None  # worst over the parity stages that ran
    scale: float | None = None
    stages: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""
    exit_code: int = 0


@dataclass
class Outcome:
    tag: str
    step: int
    targets: dict[str, TargetOutcome] = field(default_factory=dict)
    error: str = ""  # the job as a whole failed (the worker died, the model didn't load)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.error and all(t.passed for t in self.targets.values())

    def metrics(self, prefix: str = "unframe") -> dict[str, float]:
        """Numbers for a trainer's logger: per target, parity passed (1/0) and its max error."""
        out: dict[str, float] = {}
        for name, t in self.targets.items():
            out[f"{prefix}/{name}/parity_passed"] = 1.0 if t.passed else 0.0
            if t.max_abs is not None:
                out[f"{prefix}/{name}/parity_max_abs"] = float(t.max_abs)
        return out

    def describe(self) -> str:
        if self.error:
            return f"unframe {self.tag}: conversion failed: {self.error}"
        parts = []
        for name, t in self.targets.items():
            if t.error:
                parts.append(f"{name} failed (exit {t.exit_code}): {t.error}")
            else:
                err = f", max abs err {t.max_abs:.3g}" if t.max_abs is not None else ""
                parts.append(f"{name} -> {t.path}, parity {'passed' if t.passed else 'FAILED'}{err}")
        return f"unframe {self.tag} ({self.seconds:.1f}s): " + "; ".join(parts)


# ------------------------------------------------------------------------ recipes ------------
class Recipe:
    """How the worker rebuilds the model once and loads a job's weights into it."""

    def build(self) -> Any:
        raise NotImplementedError

    def load(self, model: Any, weights: Any) -> None:
        raise NotImplementedError

    def convert_options(self) -> dict[str, Any]:
        return {}


@dataclass
class TorchRecipe(Recipe):
    module: bytes  # torch.save of the (unwrapped) module: its class must be importable
    samples: Any = None

    def build(self) -> Any:
        import io

        import torch

        # Our own bytes of the user's live model; the worker keeps it on the CPU, wherever the
        # live one trains.
        return torch.load(io.BytesIO(self.module), map_location="cpu", weights_only=False)

    def load(self, model: Any, weights: Any) -> None:
        model.load_state_dict(weights, strict=True)

    def convert_options(self) -> dict[str, Any]:
        return {"sample_inputs": self.samples} if self.samples is not None else {}


def torch_snapshot(module: Any, what: str) -> dict[str, Any]:
    """The module's state dict copied to the CPU (the only work done in the training thread)."""
    import torch

    from unframe.preserve import check_copy_fits

    state = module.state_dict()
    check_copy_fits(sum(t.numel() * t.element_size() for t in state.values()
                        if isinstance(t, torch.Tensor)), what,
                    purpose="hand them to the background conversion",
                    hint="convert saved checkpoints instead (unframe convert), or free memory")
    with torch.no_grad():
        return {k: (v.detach().to("cpu", copy=True) if isinstance(v, torch.Tensor) else v)
                for k, v in state.items()}


def torch_recipe(model: Any, samples: Any) -> TorchRecipe:
    """Unwrap (compiled, DDP...) in the frontend's one place, then pickle the module."""
    import io

    import torch

    from unframe.converters.frontends._torch.unwrap import unwrap

    module, _ = unwrap(model, type(model).__name__)
    buffer = io.BytesIO()
    try:
        torch.save(module, buffer)
        blob = buffer.getvalue()
    except Exception as exc:  # a lambda hook, a lock, a class defined inside a function...
        raise UsageError(f"{type(module).__name__} can't be sent to the background conversion "
                         f"process: pickling it failed ({exc})",
                         "define the model class at module level, or pass background=False"
                         ) from exc
    return TorchRecipe(blob, _cpu(samples))


def _cpu(samples: Any) -> Any:
    """Sample tensors on the CPU (the worker has no device)."""
    try:
        import torch
        import torch.utils._pytree as pytree
    except ImportError:
        return samples
    return pytree.tree_map(lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x,
                           samples)


# ------------------------------------------------------------------------ the worker ---------
def convert_job(model: Any, job: Job, options: dict[str, Any]) -> Outcome:
    """Convert one snapshot to every target of the job; never raises."""
    import unframe
    from unframe.converters.registry import BACKENDS

    started = time.perf_counter()
    outcome = Outcome(job.tag, job.step)
    job.folder.mkdir(parents=True, exist_ok=True)
    multi = job.as_folder or len(job.targets) > 1
    if multi:
        output = job.folder / job.tag
        output.mkdir(exist_ok=True)
        if len(job.targets) == 1:  # the others were dropped: same layout, one file in it
            output = output / f"model{BACKENDS.get(job.targets[0]).suffixes[0]}"
    else:
        output = job.folder / f"{job.tag}{BACKENDS.get(job.targets[0]).suffixes[0]}"
    try:
        result = unframe.convert(model, to=job.targets if multi else job.targets[0],
                                 output=output, force=True, **options)
        results, errors = (result.results, {}) if multi else ({job.targets[0]: result}, {})
    except UnframeError as exc:
        partial = getattr(exc, "result", None)
        if multi and partial is not None:
            results, errors = partial.results, partial.errors
        else:
            results, errors = {}, {job.targets[0]: exc} if not multi else {t: exc for t in job.targets}
    except Exception as exc:  # noqa: BLE001 - a bug must not end the worker; report it
        results, errors = {}, {}
        outcome.error = f"{type(exc).__name__}: {exc}"
    for name, res in results.items():
        outcome.targets[name] = _target_outcome(name, res)
    for name, exc in errors.items():
        outcome.targets[name] = TargetOutcome(name, error=_why(exc), exit_code=exc.exit_code)
    outcome.seconds = time.perf_counter() - started
    return outcome


def _why(exc: UnframeError) -> str:
    """The error's line, with every blocker named when there are some."""
    blockers = getattr(exc, "blockers", None) or []
    if not blockers:
        return str(exc)
    return f"{exc.message}: " + "; ".join(str(b) for b in blockers)


def _target_outcome(name: str, result: Any) -> TargetOutcome:
    stages = [{"stage": s.stage, "status": s.status, "max_abs": s.max_abs, "scale": s.scale}
              for s in result.report.stages]
    ran = [s for s in result.report.stages if s.status == "passed"]
    return TargetOutcome(name, str(result.written[0]) if result.written else "",
                         passed=bool(result.report),
                         max_abs=max((s.max_abs for s in ran), default=None),
                         scale=max((s.scale for s in ran), default=None), stages=stages)


def worker_main(conn: Any, recipe_blob: bytes, options: dict[str, Any]) -> None:
    """The background process: build the model once, then convert each job it is sent."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    _yield_to_training()
    broken = ""
    try:
        recipe: Recipe = pickle.loads(recipe_blob)  # noqa: S301 - sent by our own parent process
        model = recipe.build()
        options = {**recipe.convert_options(), **options}
    except Exception as exc:  # noqa: BLE001 - said with every job instead of dying silently
        broken = f"the model could not be rebuilt in the conversion process: {type(exc).__name__}: {exc}"
    _yield_to_training()
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        if broken:
            conn.send(Outcome(job.tag, job.step, error=broken))
            continue
        try:
            recipe.load(model, job.weights)
            outcome = convert_job(model, job, options)
        except Exception as exc:  # noqa: BLE001 - weights that don't load: report, go on
            outcome = Outcome(job.tag, job.step, error=f"{type(exc).__name__}: {exc}")
        conn.send(outcome)


def idle_priority(pid: int = 0) -> None:
    """Training comes first: on Linux the worker is scheduled only on a core nothing else wants
    (SCHED_IDLE); elsewhere it gets the lowest nice level. ``pid`` 0 is the calling process."""
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
        return
    with contextlib.suppress(OSError, AttributeError):
        if os.getpriority(os.PRIO_PROCESS, pid) < 19:
            os.setpriority(os.PRIO_PROCESS, pid, 19)


def _yield_to_training() -> None:
    """The worker runs at idle priority with one thread per library (torch, TensorFlow,
    onnxruntime without spin-waiting): on a machine with few cores its conversions would
    otherwise slow the training steps."""
    import sys

    from unframe.validate.onnxruntime import set_default_threads

    idle_priority()
    for name in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):  # read when TF starts
        os.environ[name] = "1"
    set_default_threads(1)
    torch = sys.modules.get("torch")  # imported by the training script's module or the recipe
    if torch is not None:
        torch.set_num_threads(1)


# ------------------------------------------------------------------------ the converter ------
class BackgroundConverter:
    """Converts snapshots off the training thread: one running, at most one waiting."""

    def __init__(self, recipe: Recipe | None, options: dict[str, Any], *, background: bool = True,
                 raise_errors: bool = False, inline_model: Any = None) -> None:
        self.recipe = recipe
        # The locator is off by default here: it would add seconds to minutes to every failing
        # epoch and write a debug folder beside each checkpoint. Pass locate=True to have it.
        self.options = {"locate": False, **options}
        self.background = background
        self.raise_errors = raise_errors
        self.inline_model = inline_model  # background=False: the live model (convert() guards it)
        self.outcomes: list[Outcome] = []  # every finished job, in order
        self.superseded: list[str] = []  # tags of jobs replaced before they started
        self.dropped: dict[str, str] = {}  # target -> why it was dropped for this run
        self._new: list[Outcome] = []
        self._errors: list[UnframeError] = []
        self._pending: Job | None = None
        self._busy = False
        self._closing = False
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._process: Any = None
        self._conn: Any = None

    # -- called from the training thread ----------------------------------------------------
    def submit(self, job: Job) -> None:
        job.targets = [t for t in job.targets if t not in self.dropped]
        if not job.targets:
            return
        if not self.background:
            self._finished(convert_job(self.inline_model, job, self.options))
            return
        with self._cv:
            if self._pending is not None:
                self.superseded.append(self._pending.tag)
                LOG.info("unframe %s: superseded by %s before it started", self._pending.tag, job.tag)
            self._pending = job
            self._cv.notify_all()
        self.start()

    def start(self) -> None:
        """Start the feeder thread, which starts the worker process at once: its imports and
        model rebuild overlap the training that goes on before the first job."""
        if not self.background:
            return
        with self._cv:
            if self._thread is None:
                self._thread = threading.Thread(target=self._feed, name="unframe-feeder",
                                                daemon=True)
                self._thread.start()

    def poll(self) -> list[Outcome]:
        """Outcomes finished since the last poll; raises a failure when ``raise_errors``."""
        with self._cv:
            new, self._new = self._new, []
            errors, self._errors = self._errors, []
        if errors:
            raise errors[0]
        return new

    def finish(self, timeout: float | None = None) -> list[Outcome]:
        """Wait for the running and the waiting job, then stop the worker."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while self._pending is not None or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    LOG.warning("unframe: conversions still running after %.0fs; stopped", timeout)
                    break
                self._cv.wait(left)
            self._closing = True
            self._cv.notify_all()
        self._stop_worker()
        return self.poll()

    @property
    def idle(self) -> bool:
        with self._cv:
            return self._pending is None and not self._busy

    # -- the feeder thread ------------------------------------------------------------------
    def _feed(self) -> None:
        try:
            self._start_worker()
        except Exception as exc:  # noqa: BLE001 - reported with the first job instead
            LOG.warning("unframe: the conversion process did not start: %s", exc)
        while True:
            with self._cv:
                while self._pending is None and not self._closing:
                    self._cv.wait()
                if self._pending is None:
                    return
                job, self._pending = self._pending, None
                job.targets = [t for t in job.targets if t not in self.dropped]
                self._busy = True
                self._cv.notify_all()
            outcome = self._remote(job) if job.targets else None
            with self._cv:
                self._busy = False
                self._cv.notify_all()
            if outcome is not None:
                self._finished(outcome)

    def _remote(self, job: Job) -> Outcome:
        try:
            if self._process is None or not self._process.is_alive():
                self._start_worker()
            self._conn.send(job)
            return self._conn.recv()
        except (EOFError, OSError, BrokenPipeError) as exc:
            code = self._process.exitcode if self._process is not None else None
            self._process = None
            return Outcome(job.tag, job.step, error=f"the conversion process died (exit code "
                                                    f"{code}: {type(exc).__name__})")

    def _start_worker(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self._process = ctx.Process(target=worker_main, name="unframe-convert", daemon=True,
                                    args=(child, pickle.dumps(self.recipe), self.options))
        self._process.start()
        idle_priority(self._process.pid)  # at once: its start-up (imports) is seconds of CPU
        child.close()
        self._conn = parent

    def _stop_worker(self) -> None:
        if self._process is None:
            return
        with contextlib.suppress(OSError, BrokenPipeError):
            self._conn.send(None)
        self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout=5)
        self._process = None

    # -- outcomes ---------------------------------------------------------------------------
    def _finished(self, outcome: Outcome) -> None:
        (LOG.info if outcome.ok else LOG.warning)("%s", outcome.describe())
        for name, t in outcome.targets.items():
            if t.exit_code == UnsupportedError.exit_code and name not in self.dropped:
                self.dropped[name] = t.error
                warnings.warn(f"unframe: the {name} target can't take this model: {t.error}; "
                              f"no more {name} conversions in this run (training goes on)",
                              UserWarning, stacklevel=2)
        with self._cv:
            self.outcomes.append(outcome)
            self._new.append(outcome)
            if self.raise_errors and not outcome.ok:
                self._errors.append(_as_error(outcome))


def _as_error(outcome: Outcome) -> UnframeError:
    failed = [t for t in outcome.targets.values() if not t.passed]
    if outcome.error or not failed:
        return UnframeError(f"{outcome.tag}: {outcome.error or 'conversion failed'}")
    first = failed[0]
    err = UnframeError(f"{outcome.tag}: {first.target}: {first.error or 'parity failed'}")
    err.exit_code = first.exit_code or 5
    return err


@contextlib.contextmanager
def logged_failure(what: str, raise_errors: bool) -> Iterator[None]:
    """A failure in the training thread's part (the snapshot): warned once, or raised."""
    try:
        yield
    except UnframeError as exc:
        if raise_errors:
            raise
        warnings.warn(f"unframe: {what}: {exc}", UserWarning, stacklevel=3)


# ------------------------------------------------------------------------ the shared callback --
class ConvertOnSchedule:
    """The framework-independent part of every callback: when to convert, where to write, the
    snapshot, the converter, and the outcomes to hand to the trainer's logs.

    ``to``: a target or several ("onnx", "onnx,coreml", a list). ``every_n_epochs`` /
    ``every_n_steps`` (0: never) and ``at_end``. ``dirpath``: where artifacts go (the callback
    picks the trainer's checkpoint folder when None). Other keyword arguments go to
    ``unframe.convert`` (``opset``, ``precision``, ``sample_inputs``...)."""

    def __init__(self, to: str | list[str] = "onnx", *, dirpath: str | os.PathLike[str] | None = None,
                 every_n_epochs: int = 1, every_n_steps: int = 0, at_end: bool = True,
                 background: bool = True, raise_errors: bool = False,
                 **convert_options: Any) -> None:
        from unframe.route import parse_targets

        self.targets = parse_targets(to)
        self.dirpath = Path(dirpath) if dirpath is not None else None
        self.every_n_epochs = every_n_epochs
        self.every_n_steps = every_n_steps
        self.at_end = at_end
        self.background = background
        self.raise_errors = raise_errors
        self.convert_options = convert_options
        self.converter: BackgroundConverter | None = None
        self.active = True  # False on ranks other than 0, or after a failed snapshot
        self._last_step: int | None = None

    # -- lifecycle --------------------------------------------------------------------------
    def begin(self, rank: int, make_recipe: Any, live_model: Any, folder: Path) -> None:
        """``make_recipe()`` builds the worker's recipe (only when converting in background)."""
        self.active = rank == 0
        if not self.active:
            return
        self.dirpath = self.dirpath or folder
        options = dict(self.convert_options)
        recipe = None
        with logged_failure("conversions are off for this run", self.raise_errors):
            recipe = make_recipe() if self.background else None
            self.converter = BackgroundConverter(recipe, options, background=self.background,
                                                 raise_errors=self.raise_errors,
                                                 inline_model=live_model)
            self.converter.start()
        if self.converter is None:
            self.active = False

    def due(self, epoch: int | None = None, step: int | None = None) -> bool:
        """Whether the end of this epoch (1-based count of finished epochs) or this step calls
        for a conversion."""
        if epoch is not None:
            return self.every_n_epochs > 0 and epoch % self.every_n_epochs == 0
        return step is not None and self.every_n_steps > 0 and step % self.every_n_steps == 0

    def convert(self, tag: str, step: int, snapshot: Any) -> None:
        """Hand a snapshot over; ``snapshot()`` copies the weights (called only when needed)."""
        if not self.active or self.converter is None or step == self._last_step:
            return  # e.g. the end of training right after the last epoch's conversion
        weights = None
        with logged_failure("this conversion was skipped", self.raise_errors):
            weights = snapshot() if self.background else None
            self._last_step = step
            self.converter.submit(Job(tag, weights, self.dirpath, list(self.targets), step,
                                      as_folder=len(self.targets) > 1))

    def poll(self) -> list[Outcome]:
        return self.converter.poll() if self.converter is not None else []

    def end(self, timeout: float | None = None) -> list[Outcome]:
        if self.converter is None:
            return []
        return self.converter.finish(timeout)

    @property
    def outcomes(self) -> list[Outcome]:
        return self.converter.outcomes if self.converter is not None else []
