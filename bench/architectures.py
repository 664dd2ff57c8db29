"""Every architecture of the public-architecture set (model_zoo/build/arch_models.py) on every
route, one model at a time in a child process (built, converted, freed before the next).

    .venv/bin/python bench/architectures.py [--only NAME ...] [--family F ...] [--heavy] [--jobs N]
        [--journal bench/out/architectures.jsonl] [--out docs/benchmarks/architectures.md]

Routes per model, each with parity on (the stage before as the reference):
- torch models: one export, then ``onnx``, ``coreml`` (parity by the MIL evaluator) and
  ``tensorrt`` (pre-flight, the parser and a CPU build; running the engine needs a GPU);
- Keras models: ``onnx`` and ``coreml``;
- the exported ONNX file to opsets 13, 11 and 25 (``unframe.convert_opset``, parity by onnxruntime).

The divergence locator is off (a parity failure is recorded, not located: locating one can take
minutes). A route either succeeds or fails with unframe's exit code (any exception that is not an unframe
error counts as exit 1). The time ratio is unframe's CoreML conversion time (every stage but the
parity checks) over the anchor: the bare exporter (``torch.onnx.export`` with the exporter
unframe ended up using, or tf2onnx) plus coremltools' own time in the same run (its converter on
the translated program and the package writer). Each side is timed ``--reps`` times (default 2),
alternating, and each side's fastest run counts. The table goes to ``--out``; each model's record
is appended to ``--journal`` as it finishes, so a rerun skips the models already there.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from benchlib import torchvision_shim  # noqa: E402

BUILD = ROOT / "model_zoo" / "build"
OPSETS = (13, 11, 25)
TORCH_TARGETS = ["onnx", "coreml", "tensorrt"]
KERAS_TARGETS = ["onnx", "coreml"]


def _archs() -> Any:
    torchvision_shim()  # transformers and timm import torchvision
    sys.path.insert(0, str(BUILD))
    import arch_models

    return arch_models


# -- the worker: one model, every route ----------------------------------------------------------

def run_model(name: str, folder: Path, reps: int = 1) -> dict[str, Any]:
    archs = _archs()
    arch = archs.ARCHS[name]
    record: dict[str, Any] = {"name": name, "family": arch.family, "framework": arch.framework, "routes": {}}
    t0 = time.perf_counter()
    model, samples = archs.build_checked(name)
    record["build_s"] = time.perf_counter() - t0
    targets = TORCH_TARGETS if arch.framework == "torch" else KERAS_TARGETS
    if not _has_tensorrt():
        targets = [t for t in targets if t != "tensorrt"]
    _bare_export(model, samples, arch, folder, record)  # warm-up: both sides timed warm
    _warm_unframe(arch.framework, folder)
    ct_seconds = _time_coremltools()
    onnx_path = _convert_targets(model, samples, arch, targets, folder, record)
    record["ct_s"] = sum(ct_seconds)
    record["bare_export_s"] = _bare_export(model, samples, arch, folder, record)
    record["anchor"] = "dynamic batch"
    record["reps"] = reps
    _time_again(model, samples, arch, folder, record, ct_seconds, reps - 1)
    for opset in OPSETS:
        key = f"opset{opset}"
        if onnx_path is None:
            record["routes"][key] = {"ok": False, "exit": None, "message": "no ONNX file (the export failed)"}
            continue
        record["routes"][key] = _route(lambda o=opset: __import__("unframe").convert_opset(
            onnx_path, o, output=folder / f"op{o}.onnx"))
    coreml = record["routes"].get("coreml", {})
    if coreml.get("ok") and record["bare_export_s"]:
        # each side's best run: unframe's fastest CoreML conversion over the fastest bare export
        # plus coremltools' fastest time inside unframe's runs
        best = min(record.get("convert_s_reps") or [coreml["convert_s"]])
        bare = min(record.get("bare_export_s_reps") or [record["bare_export_s"]])
        ct = min(record.get("ct_s_reps") or [record["ct_s"]])
        record["ratio"] = best / (bare + ct)
    return record


REPS = 2  # timed runs of each side, alternating; --reps


def _time_again(model: Any, samples: Any, arch: Any, folder: Path, record: dict[str, Any],
                ct_seconds: list[float], times: int) -> None:
    """More timed runs of both sides, alternating (a CoreML-only conversion with the same
    options, then the bare exporter), so one slow run (the machine's other work, a collection)
    doesn't decide the ratio. Only when the first CoreML conversion and bare export worked."""
    import unframe

    coreml = record["routes"].get("coreml", {})
    if times < 1 or not coreml.get("ok") or not record.get("bare_export_s"):
        return
    record["convert_s_reps"] = [coreml["convert_s"]]
    record["ct_s_reps"] = [record["ct_s"]]
    record["bare_export_s_reps"] = [record["bare_export_s"]]
    for i in range(times):
        ct_seconds.clear()
        try:
            result = unframe.convert(model, to="coreml", sample_inputs=samples, output=folder / f"again{i}.mlpackage",
                                     locate=False, **arch.options)
        except Exception as exc:  # noqa: BLE001 - the route's outcome is the first run's; this is timing only
            record["again_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            return
        record["convert_s_reps"].append(_success(result)["convert_s"])
        record["ct_s_reps"].append(sum(ct_seconds))
        bare = _bare_export(model, samples, arch, folder, record)
        if bare is not None:
            record["bare_export_s_reps"].append(bare)


def _warm_unframe(framework: str, folder: Path) -> None:
    """unframe's own once-per-process costs (its imports, the exporter's op table it caches, the
    CoreML backend's first conversion) paid on a tiny model of the same framework before the
    timed conversion, as the bare exporter's warm-up pays torch's and tf2onnx's: without it the
    ratio set a cold unframe against a warm exporter (timm ResNet-18: unframe's export 4.9 s
    cold, 2.7 s warm, the bare exporter 3.2-3.5 s warm)."""
    import numpy as np

    import unframe

    if framework == "torch":
        import torch

        tiny = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                   torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 3)).eval()
        samples: Any = (torch.randn(2, 3, 16, 16),)
    else:
        import keras

        tiny = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Conv2D(4, 3, activation="relu"),
                                 keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3)])
        samples = np.random.default_rng(0).standard_normal((2, 16, 16, 3)).astype(np.float32)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            unframe.convert(tiny, to=["onnx", "coreml"], sample_inputs=samples, output=folder / "warm", locate=False)
        except Exception:  # noqa: BLE001 - a warm-up: the costs are paid either way; its unseeded random
            pass  # logits can tie within fp16 (top-1 floor), which must not end the model's run


def _convert_targets(model: Any, samples: Any, arch: Any, targets: list[str], folder: Path,
                     record: dict[str, Any]) -> Path | None:
    import unframe
    from unframe.api import PartialFailure
    from unframe.errors import UnframeError

    out = folder / "targets"
    try:
        multi = unframe.convert(model, to=targets, sample_inputs=samples, output=out, locate=False,
                                **arch.options)
    except PartialFailure as exc:
        multi = exc.result
    except UnframeError as exc:  # before the fork (load, export): every target fails alike
        for t in targets:
            record["routes"][t] = _failure(exc.exit_code, exc)
        return None
    except Exception as exc:  # noqa: BLE001 - a bug: counted as exit 1
        for t in targets:
            record["routes"][t] = _failure(1, exc)
        return None
    for t in targets:
        if t in multi.results:
            record["routes"][t] = _success(multi.results[t])
        else:
            err = multi.errors[t]
            record["routes"][t] = _failure(err.exit_code, err)
    onnx_result = multi.results.get("onnx")
    record["export_route"] = _export_route(multi)
    return next((p for p in onnx_result.written if p.suffix == ".onnx"), None) if onnx_result else None


def _export_route(multi: Any) -> str:
    notes = [n for r in multi.results.values() for n in r.notes]
    return "torchscript" if any("TorchScript" in n for n in notes) else ""


def _success(result: Any) -> dict[str, Any]:
    stages = result.report.stages
    last = stages[-1] if stages else None
    seconds = sum(v for k, v in result.timings.items() if not k.startswith("parity") and k != "total")
    entry = {"ok": True, "exit": 0, "convert_s": seconds, "parity": last.status if last else "",
             "max_abs": last.max_abs if last else None, "rel": last.rel_to_scale if last else None,
             "candidate": last.candidate if last else "",
             "stages_s": {k: round(v, 3) for k, v in result.timings.items()}}
    return entry


def _failure(code: int, exc: BaseException) -> dict[str, Any]:
    blockers = getattr(exc, "blockers", None) or (getattr(exc, "details", {}) or {}).get("blockers") or []
    ops = sorted({b["op"] if isinstance(b, dict) else b.op for b in blockers})
    message = " ".join(str(exc).split())[:300]
    reasons = sorted({f"{b.op}: {b.reason}"[:200] for b in blockers if not isinstance(b, dict)})[:4]
    return {"ok": False, "exit": code, "message": f"{type(exc).__name__}: {message}", "blocker_ops": ops,
            "blockers": reasons}


def _route(call: Any) -> dict[str, Any]:
    from unframe.errors import UnframeError

    try:
        return _success(call())
    except UnframeError as exc:
        return _failure(exc.exit_code, exc)
    except Exception as exc:  # noqa: BLE001
        return _failure(1, exc)


def _time_coremltools() -> list[float]:
    """coremltools' own time inside the run: its converter on the translated program, and the
    package writer."""
    import coremltools as ct

    from unframe.converters.backends.coreml import backend

    seconds: list[float] = []
    build, save = backend._build, ct.models.MLModel.save

    def timed_build(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return build(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - t)

    def timed_save(self: Any, *args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return save(self, *args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - t)

    backend._build = timed_build
    ct.models.MLModel.save = timed_save
    return seconds


def _bare_export(model: Any, samples: Any, arch: Any, folder: Path, record: dict[str, Any]) -> float | None:
    """The exporter alone, as a user would call it for the same result (torch: a dynamic batch
    axis with dynamo; Keras: tf2onnx with a free batch dimension)."""
    t = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            if arch.framework == "torch":
                _bare_torch(model, samples, arch, folder, record)
            else:
                _bare_keras(model, samples)
    except Exception as exc:  # noqa: BLE001 - the anchor failing is a figure, not an error
        record["bare_export_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        return None
    return time.perf_counter() - t


def _bare_torch(model: Any, samples: Any, arch: Any, folder: Path, record: dict[str, Any]) -> None:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    args, kwargs = ((), samples) if isinstance(samples, dict) else (tuple(samples), {})
    dynamo = arch.options.get("exporter") != "torchscript" and record.get("export_route") != "torchscript"
    extra: dict[str, Any] = {}
    if dynamo:  # a batch axis free to vary, as unframe exports it
        batch = {0: torch.export.Dim.AUTO}
        extra["dynamic_shapes"] = ({k: batch if isinstance(v, torch.Tensor) else None for k, v in kwargs.items()}
                                   if kwargs else tuple(batch if isinstance(a, torch.Tensor) else None for a in args))
    # attention traced with the math kernel, as unframe traces it: without it dynamo can't export
    # BEiT, Swin or T5 at all (``export.math_attention``), and the anchor would be a failure
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]):
        torch.onnx.export(model, args, str(folder / "bare.onnx"), kwargs=kwargs or None, dynamo=dynamo,
                          opset_version=18 if dynamo else 17, **extra)


def _bare_keras(model: Any, samples: Any) -> None:
    import numpy as np
    import tensorflow as tf
    import tf2onnx

    arrays = list(samples.values()) if isinstance(samples, dict) else [samples]
    spec = [tf.TensorSpec((None, *np.asarray(a).shape[1:]), tf.as_dtype(np.asarray(a).dtype)) for a in arrays]
    tf2onnx.convert.from_keras(model, input_signature=spec, opset=18)


def _has_tensorrt() -> bool:
    from unframe.converters.backends.tensorrt import trtmodule

    return trtmodule.load_or_none() is not None


# -- the driver: a child process per model, the journal and the table ----------------------------

def run_child(name: str, timeout: float, script: Path | None = None, extra: Sequence[str] = ()) -> dict[str, Any]:
    """``script --worker name *extra`` in a child process (default: this script); its record."""
    cmd = [sys.executable, str((script or Path(__file__)).resolve()), "--worker", name, *extra]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return {"name": name, "error": f"timed out after {timeout:.0f} s", "wall_s": timeout}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
        return {"name": name, "error": f"worker exit {proc.returncode}: {tail}",
                "wall_s": time.perf_counter() - started}
    record = json.loads(lines[-1])
    record["wall_s"] = time.perf_counter() - started
    return record


def interleave(names: list[str], families: dict[str, str]) -> list[str]:
    """One model of each family in turn, so a run cut short still covers every family."""
    queues: dict[str, list[str]] = defaultdict(list)
    for name in names:
        queues[families[name]].append(name)
    ordered: list[str] = []
    while any(queues.values()):
        for queue in queues.values():
            if queue:
                ordered.append(queue.pop(0))
    return ordered


def read_journal(path: Path) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        return {}
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {r["name"]: r for r in records}


ROUTES = ["onnx", "coreml", "tensorrt", "opset13", "opset11", "opset25"]


def table(records: list[dict[str, Any]], families: dict[str, str]) -> str:
    """Route x family: successes / models, failures by exit code, largest CoreML error, ratio."""
    by_family: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_family[families.get(r["name"], "?")].append(r)
    lines = ["| family | models | " + " | ".join(ROUTES) + " | largest CoreML err / scale | time ratio (median / max) |",
             "|---|---:|" + "---|" * len(ROUTES) + "---:|---:|"]
    totals: dict[str, list[int]] = {route: [0, 0] for route in ROUTES}
    for family in sorted(by_family):
        rows = by_family[family]
        cells = []
        for route in ROUTES:
            entries = [r.get("routes", {}).get(route) for r in rows if "error" not in r]
            entries = [e for e in entries if e is not None]
            ran = len(entries) + sum(1 for r in rows if "error" in r)
            applies = route not in TORCH_TARGETS or route in KERAS_TARGETS or \
                any(r.get("framework") == "torch" for r in rows)
            if not entries:  # the route doesn't apply to the family (Keras: TensorRT), or all crashed
                cells.append(f"0/{ran} (crashed: {ran})" if ran and applies else "-")
                totals[route][1] += ran if applies else 0
                continue
            ok = sum(1 for e in entries if e["ok"])
            fails: dict[Any, int] = defaultdict(int)
            for e in entries:
                if not e["ok"]:
                    fails[e["exit"] if e["exit"] is not None else "no ONNX"] += 1
            crashed = ran - len(entries)
            if crashed:
                fails["crash"] += crashed
            totals[route][0] += ok
            totals[route][1] += ran
            extra = " (" + ", ".join(f"exit {k}: {v}" if isinstance(k, int) else
                                     f"{'crashed' if k == 'crash' else k}: {v}"
                                     for k, v in sorted(fails.items(), key=str)) + ")" if fails else ""
            cells.append(f"{ok}/{ran}{extra}")
        errs = [r["routes"]["coreml"]["rel"] for r in rows
                if r.get("routes", {}).get("coreml", {}).get("ok") and r["routes"]["coreml"]["rel"] is not None]
        ratios = [r["ratio"] for r in rows if r.get("ratio")]
        err_cell = f"{max(errs):.2g}" if errs else "-"
        ratio_cell = f"{sorted(ratios)[len(ratios) // 2]:.2f} / {max(ratios):.2f}" if ratios else "-"
        lines.append(f"| {family} | {len(rows)} | " + " | ".join(cells) + f" | {err_cell} | {ratio_cell} |")
    total_cells = [f"**{ok}/{n} ({100 * ok / n:.0f}%)**" if n else "-" for ok, n in totals.values()]
    lines.append(f"| **all** | {len(records)} | " + " | ".join(total_cells) + " | | |")
    return "\n".join(lines)


def failures(records: list[dict[str, Any]]) -> str:
    lines = []
    for r in records:
        if "error" in r:
            lines.append(f"- `{r['name']}`: {r['error']}")
            continue
        for route, e in r.get("routes", {}).items():
            if not e["ok"]:
                ops = f" [blockers: {', '.join(e['blocker_ops'])}]" if e.get("blocker_ops") else ""
                lines.append(f"- `{r['name']}` {route}: exit {e['exit']}: {e['message'][:220]}{ops}")
    return "\n".join(lines) or "(none)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--family", nargs="*", default=[])
    parser.add_argument("--heavy", action="store_true", help="also the larger keras.applications siblings")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per model")
    parser.add_argument("--jobs", type=int, default=1, help="models at once (a child process each)")
    parser.add_argument("--journal", type=Path, default=ROOT / "bench" / "out" / "architectures.jsonl")
    parser.add_argument("--rerun", action="store_true", help="run models already in the journal again")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--report-only", action="store_true", help="write the table from the journal, run nothing")
    parser.add_argument("--reps", type=int, default=REPS, help="timed runs of each side (the best of each counts)")
    args = parser.parse_args()
    if args.worker:
        with tempfile.TemporaryDirectory() as tmp:
            with contextlib.redirect_stdout(sys.stderr):
                record = run_model(args.worker, Path(tmp), args.reps)
        print(json.dumps(record, default=str), flush=True)
        return
    archs = _archs()
    names = [n for n, a in archs.ARCHS.items()
             if (not args.only or n in args.only) and (not args.family or a.family in args.family)
             and (args.heavy or not a.heavy or n in args.only)]
    if importlib.util.find_spec("keras_hub") is None:  # pip install --no-deps keras-hub==0.32.0
        print("keras_hub is not installed: the keras-hub family is left out", flush=True)
        names = [n for n in names if archs.ARCHS[n].family != "keras-hub"]
    names = interleave(names, {n: a.family for n, a in archs.ARCHS.items()})
    args.journal.parent.mkdir(parents=True, exist_ok=True)
    done = read_journal(args.journal)
    todo = [] if args.report_only else [n for n in names if args.rerun or n not in done]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:  # each job is a child process
        for future in as_completed([pool.submit(run_child, name, args.timeout, extra=("--reps", str(args.reps)))
                                   for name in todo]):
            record = future.result()
            done[record["name"]] = record
            with args.journal.open("a") as f:
                f.write(json.dumps(record, default=str) + "\n")
            summary = {k: ("ok" if v["ok"] else f"exit {v['exit']}") for k, v in record.get("routes", {}).items()}
            print(f"{record['name']}: {record.get('error') or summary} ({record.get('wall_s', 0):.0f} s)", flush=True)
    families = {n: a.family for n, a in archs.ARCHS.items()}
    records = [done[n] for n in archs.ARCHS if n in done]
    text = table(records, families)
    print(text)
    print(failures(records))
    if args.out is not None:
        args.out.write_text(page(text, records, sys.argv[1:]))


def page(text: str, records: list[dict[str, Any]], argv: list[str]) -> str:
    """The measured part of docs/benchmarks/architectures.md: command, when, load, table, failures."""
    import datetime
    import platform

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    walls = [r.get("wall_s", 0.0) for r in records]
    command = " ".join(["python bench/architectures.py", *[a for a in argv if a != "--rerun"]])
    return (f"Command: `{command}`  \n"
            f"Written {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.node()} "
            f"({os.cpu_count()} CPUs), load average at the end {load}; {len(records)} models, "
            f"{sum(walls) / 60:.0f} min of worker time.\n\n{text}\n\nFailures:\n\n{failures(records)}\n")


if __name__ == "__main__":
    main()
