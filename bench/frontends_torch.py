"""Torch frontend overhead: ``unframe.convert(model, to="onnx", validate=False)`` against the
bare ``torch.onnx.export(model, args, dynamo=True, ...)`` call on the same models (same sample
inputs, same dynamic batch axis, same opset 18). Prints time and peak-memory ratios;
``run(quick)`` returns the rows for bench/frontends.py.

Two bare baselines, because the frontend keeps onnxscript's torchlib table for the life of the
process while ``torch.onnx.export`` rebuilds it on every call (~5 s here):
- ``bare_s``: torch.onnx.export as a user calls it;
- ``bare_cached_s``: the same call with the table cached the same way, which isolates what
  unframe itself adds (input handling, the eager run that names outputs, feeds).

Time is the median wall time over the repetitions, in one process after a warm-up. Peak memory is
measured in a fresh process per (model, tool): peak RSS during the call (sampled every 2 ms)
minus RSS before it, after imports and a warm-up.

    .venv/bin/python bench/frontends_torch.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "converters" / "frontends"))

QUICK = ["cnn", "encoder"]
FULL = ["cnn", "encoder", "lstm", "dict_io", "tiny_bert"]


def _case(name: str) -> tuple[Any, Any]:
    """(model, sample inputs) with seeded weights."""
    import torch
    import torch_models as tm

    gen = torch.Generator().manual_seed(0)
    if name == "two_inputs":
        return tm.make_two_inputs(), (torch.randn(2, 4, generator=gen), torch.randn(2, 3, generator=gen))
    if name == "cnn":
        return tm.make_cnn(), tm.cnn_sample(4)
    if name == "encoder":
        return tm.seeded(tm.TinyEncoder), torch.randint(0, 50, (4, 16), generator=gen)
    if name == "lstm":
        return tm.seeded(tm.Recurrent, cell="lstm"), torch.randn(4, 10, 6, generator=gen)
    if name == "dict_io":
        return tm.seeded(tm.DictModel), {"image": torch.randn(4, 10, generator=gen),
                                         "meta": torch.randn(4, 3, generator=gen)}
    if name == "tiny_bert":
        return tm.tiny_bert(), {"input_ids": torch.randint(0, 64, (4, 12), generator=gen)}
    raise KeyError(name)


def _bare(name: str, cached: bool = False) -> Callable[[], Any]:
    def call() -> Any:
        import contextlib

        import torch

        from unframe.converters.frontends._torch.export import cached_torchlib

        model, sample = _case(name)
        if isinstance(sample, dict) and name == "dict_io":
            # By keyword: a trailing dict in args would be read as keyword arguments.
            args, kwargs, shapes = (), {"batch": sample}, {"batch": {k: {0: "batch"} for k in sample}}
        elif isinstance(sample, tuple):
            args, kwargs, shapes = sample, None, tuple({0: "batch"} for _ in sample)
        elif isinstance(sample, dict):
            args, kwargs, shapes = (), sample, {k: {0: "batch"} for k in sample}
        else:
            args, kwargs, shapes = (sample,), None, ({0: "batch"},)
        with cached_torchlib() if cached else contextlib.nullcontext():
            return torch.onnx.export(model, args, kwargs=kwargs, dynamo=True, opset_version=18,
                                     dynamic_shapes=shapes, verbose=False)

    return call


def _unframe(name: str) -> Callable[[], Any]:
    def call() -> Any:
        import unframe

        model, sample = _case(name)
        return unframe.convert(model, to="onnx", sample_inputs=sample, validate=False)

    return call


def _peak_child(name: str, tool: str, queue: Any) -> None:
    import logging
    import warnings

    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    call = {"bare": _bare(name), "unframe": _unframe(name)}[tool]
    # Warm-up on another model with both tools: imports (torch.export, dynamo, unframe's
    # pipeline, onnxruntime) and the torchlib table are not the call's own memory.
    _bare("two_inputs", cached=True)()
    _unframe("two_inputs")()
    queue.put(benchlib.peak_growth_mib(call))


def run(quick: bool) -> list[dict]:
    import logging
    import warnings

    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    names = QUICK if quick else FULL
    reps = 1 if quick else 3
    _bare("two_inputs")()  # warm-up
    _unframe("two_inputs")()
    rows = []
    for name in names:
        bare_t = benchlib.median_time(_bare(name), reps)
        cached_t = benchlib.median_time(_bare(name, cached=True), reps)
        uf_t = benchlib.median_time(_unframe(name), reps)
        bare_m = benchlib.in_fresh_process(_peak_child, name, "bare")
        uf_m = benchlib.in_fresh_process(_peak_child, name, "unframe")
        rows.append({"model": name, "bare_s": bare_t, "bare_cached_s": cached_t, "unframe_s": uf_t,
                     "time_ratio": uf_t / bare_t, "ratio_vs_cached": uf_t / cached_t,
                     "bare_MiB": bare_m, "unframe_MiB": uf_m,
                     "mem_ratio": uf_m / bare_m if bare_m else float("nan")})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    benchlib.print_rows(run(args.quick), width=15)


if __name__ == "__main__":
    main()
