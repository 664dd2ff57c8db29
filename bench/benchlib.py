"""Measuring helpers shared by the bench scripts: median wall time, peak resident-memory growth of
one call in a fresh process, and a plain-text table."""

from __future__ import annotations

import gc
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def torchvision_shim() -> None:
    """Lightning, transformers and timm import torchvision, whose PyPI wheel is built for a CUDA
    torch: install model_zoo/build/torchvision_shim.py's import hook here, and in every process
    this one spawns (the callbacks' conversion workers) through tests/_site on PYTHONPATH."""
    import sys

    site = str(ROOT / "tests" / "_site")
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if site not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([site, *paths])
    sys.path.insert(0, str(ROOT / "model_zoo" / "build"))
    import torchvision_shim

    torchvision_shim.install_import_hook()


def median_time(fn: Callable[[], Any], reps: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """Median time of ``reps`` calls of ``fn`` by ``clock`` (default: wall time). As ``timeit`` does,
    the cyclic garbage collector is paused during each call: otherwise its passes over whatever the
    bench process built before (torch and Keras models) land on the calls that happen to trigger
    them, mostly Python-heavy ones."""
    times = []
    for _ in range(reps):
        gc.collect()
        gc.disable()
        try:
            t0 = clock()
            fn()
            times.append(clock() - t0)
        finally:
            gc.enable()
    return statistics.median(times)


def median_cpu_time(fn: Callable[[], Any], reps: int) -> float:
    """Median CPU time of this process over ``reps`` calls of ``fn``: steadier than wall time on a
    shared machine (both converters run in this process, single-threaded)."""
    return median_time(fn, reps, time.process_time)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_growth_mib(call: Callable[[], Any]) -> float:
    """Peak resident set size during ``call()`` minus the size before it (sampled every 2 ms), so
    C++ allocations count too. Run it in a fresh process after a warm-up: ru_maxrss only grows."""
    start = rss_bytes()
    peak = [start]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_bytes())
            time.sleep(0.002)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        call()
    finally:
        done.set()
        thread.join()
    return (max(peak[0], rss_bytes()) - start) / 2**20


def in_fresh_process(child: Callable[..., None], *args: Any, timeout: float = 900) -> float:
    """Run ``child(*args, queue)`` in a spawned process and return the number it puts on the queue."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=child, args=(*args, queue))
    proc.start()
    value = queue.get(timeout=timeout)
    proc.join()
    return float(value)


def print_rows(rows: list[dict], width: int = 15) -> None:
    """Rows of one dict each, as right-aligned columns."""
    keys = list(rows[0])
    print("  ".join(f"{k:>{width}}" for k in keys))
    for r in rows:
        print("  ".join(f"{v:>{width}.3f}" if isinstance(v, float) else f"{v:>{width}}" for v in r.values()))


def median_times(ours: Callable[[], Any], anchor: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """Medians of the two, run alternately after one warm-up each (a shared 2-core machine
    drifts: pairs see the same load)."""
    ours(), anchor()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for fn, out in ((ours, times[0]), (anchor, times[1])):
            started = time.perf_counter()
            fn()
            out.append(time.perf_counter() - started)
    return statistics.median(times[0]), statistics.median(times[1])


def latency_ms(run: Callable[[], Any], runs: int = 30, warmup: int = 5) -> float:
    """Median milliseconds of ``runs`` calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3
