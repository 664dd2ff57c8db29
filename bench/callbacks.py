"""Training-time overhead of the conversion callbacks, against the same loop without them.

A Lightning fit and a Keras fit (an MLP with BatchNorm and Dropout on random data, a few
milliseconds a step), each run without the callback, with it converting to ONNX at every epoch's
end in its background process, alternately, ``--reps`` times each. What is timed is the
training: every step's wall time (a timing callback), split into steps that overlapped a
conversion and steps that did not, and the fit up to its last epoch's end; the wait for the last
conversion after training (``on_fit_end`` / ``on_train_end``) is reported apart. Prints the
medians and the ratios (1.00: no overhead; target <= 1.05 of step time).

    .venv/bin/python bench/callbacks.py [--reps 3] [--epochs 6] [--frameworks lightning,keras]
                                        [--train-threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from benchlib import print_rows, torchvision_shim  # noqa: E402

torchvision_shim()  # Lightning imports torchvision (the CPU torch pin needs the shim)

STEPS = 40
BATCH = 256


# ------------------------------------------------------------------------ lightning ----------
def lightning_run(epochs: int, mode: str, folder: Path) -> dict[str, Any]:
    import lightning.pytorch as L
    import torch
    from bench_models import Regressor

    from unframe.callbacks.lightning import LightningConvert

    class Timer(L.Callback):
        def __init__(self) -> None:
            self.steps: list[float] = []
            self.busy: list[bool] = []  # a conversion was running or waiting at the step's end
            self.fit_end = 0.0

        def on_train_batch_start(self, *args: Any) -> None:
            self._t = time.perf_counter()

        def on_train_batch_end(self, *args: Any) -> None:
            self.steps.append(time.perf_counter() - self._t)
            self.busy.append(converting(convert))

        def on_train_end(self, *args: Any) -> None:
            self.fit_end = time.perf_counter()
            self.cpu_end = time.process_time()

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(STEPS * BATCH, 64), torch.randn(STEPS * BATCH, 8))
    convert = LightningConvert("onnx", **MODES[mode]) if mode != "plain" else None
    timer = Timer()
    # the callback's own on_train_batch_end is timed too: it comes before the timer's end
    callbacks = ([convert] if convert else []) + [timer]
    trainer = L.Trainer(max_epochs=epochs, default_root_dir=folder, callbacks=callbacks,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    start, cpu = time.perf_counter(), time.process_time()
    trainer.fit(Regressor(), torch.utils.data.DataLoader(data, batch_size=BATCH))
    done = time.perf_counter()
    return summary(timer.steps, timer.busy, timer.fit_end - start, timer.cpu_end - cpu, done - timer.fit_end,
                   convert.outcomes if convert else [], convert)


# ------------------------------------------------------------------------ keras --------------
def keras_run(epochs: int, mode: str, folder: Path) -> dict[str, Any]:
    import keras
    import numpy as np

    from unframe.callbacks.keras import KerasConvert

    class Timer(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.steps: list[float] = []
            self.busy: list[bool] = []  # a conversion was running or waiting at the step's end
            self.fit_end = 0.0

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            self._t = time.perf_counter()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.steps.append(time.perf_counter() - self._t)
            self.busy.append(converting(convert))

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.fit_end = time.perf_counter()
            self.cpu_end = time.process_time()

    keras.utils.set_random_seed(0)
    inp = keras.Input((64,), name="x")
    h = inp
    for _ in range(2):
        h = keras.layers.Dense(256)(h)
        h = keras.layers.BatchNormalization()(h)
        h = keras.layers.Dropout(0.1)(keras.layers.Activation("relu")(h))
    model = keras.Model(inp, keras.layers.Dense(8)(h))
    model.compile(optimizer="adam", loss="mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS * BATCH, 64)).astype("float32")
    y = rng.normal(size=(STEPS * BATCH, 8)).astype("float32")
    convert = KerasConvert(folder, to="onnx", **MODES[mode]) if mode != "plain" else None
    timer = Timer()
    start, cpu = time.perf_counter(), time.process_time()
    model.fit(x, y, epochs=epochs, batch_size=BATCH, verbose=0,
              callbacks=([convert] if convert else []) + [timer])
    done = time.perf_counter()
    return summary(timer.steps, timer.busy, timer.fit_end - start, timer.cpu_end - cpu, done - timer.fit_end,
                   convert.outcomes if convert else [], convert)


def converting(convert: Any) -> bool:
    """Whether the callback's background process has a conversion running or waiting."""
    if convert is None:
        return False
    converter = convert.schedule.converter
    return converter is not None and (converter._busy or converter._pending is not None)


def summary(steps: list[float], busy: list[bool], train: float, cpu: float, tail: float,
            outcomes: list[Any], convert: Any) -> dict[str, Any]:
    skip = len(steps) // 10  # the first epoch's warm-up (graph tracing) aside
    steady = steps[skip:]
    during = [t for t, b in zip(steady, busy[skip:], strict=True) if b]
    between = [t for t, b in zip(steady, busy[skip:], strict=True) if not b]
    superseded = len(convert.schedule.converter.superseded) if convert is not None else 0
    return {"median_step": statistics.median(steady), "mean_step": statistics.fmean(steady),
            "step_converting": statistics.median(during) if during else float("nan"),
            "step_not_converting": statistics.median(between) if between else float("nan"),
            "share_converting": len(during) / len(steady),
            "train": train, "cpu": cpu, "tail": tail, "converted": len(outcomes), "superseded": superseded,
            "ok": all(o.ok for o in outcomes)}


RUNNERS = {"lightning": lightning_run, "keras": keras_run}
MODES: dict[str, dict[str, Any]] = {"plain": {}, "callback": {}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--frameworks", default="lightning,keras")
    parser.add_argument("--train-threads", type=int, default=0,
                        help="threads the training may use (torch intra-op, TensorFlow intra- and "
                             "inter-op); 0: the frameworks' defaults, every core")
    args = parser.parse_args()
    if args.train_threads:
        import torch

        torch.set_num_threads(args.train_threads)
        os.environ["TF_NUM_INTRAOP_THREADS"] = os.environ["TF_NUM_INTEROP_THREADS"] = str(args.train_threads)
    rows = []
    for name in args.frameworks.split(","):
        runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
        with tempfile.TemporaryDirectory(prefix="unframe-bench-") as tmp:
            RUNNERS[name](1, "plain", Path(tmp))  # untimed: a process's first fit is several times slower
        for rep in range(args.reps):
            order = list(MODES)[rep % len(MODES):] + list(MODES)[:rep % len(MODES)]
            for mode in order:  # rotate: the machine's load drifts
                with tempfile.TemporaryDirectory(prefix="unframe-bench-") as tmp:
                    runs[mode].append(RUNNERS[name](args.epochs, mode, Path(tmp)))
        base = runs["plain"]

        def med(rs: list[dict[str, Any]], key: str) -> float:
            return statistics.median(r[key] for r in rs)

        for mode in ("callback",):
            cb = runs[mode]
            rows.append({"framework": name, "mode": mode,
                         "step ms plain": f"{med(base, 'median_step') * 1e3:.2f}",
                         "step ms cb": f"{med(cb, 'median_step') * 1e3:.2f}",
                         "step ratio": f"{med(cb, 'median_step') / med(base, 'median_step'):.3f}",
                         "mean step ratio": f"{med(cb, 'mean_step') / med(base, 'mean_step'):.3f}",
                         "ratio not converting":
                             f"{med(cb, 'step_not_converting') / med(base, 'median_step'):.3f}",
                         "ratio converting": f"{med(cb, 'step_converting') / med(base, 'median_step'):.3f}",
                         "steps converting": f"{med(cb, 'share_converting'):.0%}",
                         "train ratio": f"{med(cb, 'train') / med(base, 'train'):.3f}",
                         "cpu ratio": f"{med(cb, 'cpu') / med(base, 'cpu'):.3f}",
                         "wait after s": f"{med(cb, 'tail'):.1f}",
                         "converted": f"{med(cb, 'converted'):.0f}/{args.epochs + 1}",
                         "superseded": f"{med(cb, 'superseded'):.0f}",
                         "parity ok": str(all(r["ok"] for r in cb))})
    print(f"training threads: {args.train_threads or 'default'} of {os.cpu_count()} cores; "
          f"{args.reps} runs each, {args.epochs} epochs of {STEPS} steps (batch {BATCH}); "
          f"load average {os.getloadavg()[0]:.1f} at the end")
    print_rows(rows, width=16)


if __name__ == "__main__":
    main()
