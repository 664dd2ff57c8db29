"""unframe's overhead over the bare exporter, per model and per device, told apart by stage into
the wrapped tools' own time and unframe's (issue 39).

    .venv/bin/python bench/overhead.py [--device cpu,cuda] [--only NAME ...] [--family F ...]
        [--framework torch,keras] [--reps 3] [--journal bench/out/overhead.jsonl] [--out docs/benchmarks/overhead.md]

For each model of the public-architecture set (model_zoo/build/arch_models.py; torch models by
default, Keras with ``--framework torch,keras``), in a child process of its own per device:

- the model is built (seeded, outputs of order 1) and moved to the device with its samples: a
  CUDA-resident model is the training script's usual case; ``cuda`` is skipped, with a note,
  where torch sees no CUDA device, so the same command runs unchanged on a CPU machine;
- warm-up: one bare export and one tiny unframe conversion (both sides' once-per-process costs:
  imports, the exporter's op table);
- then ``--reps`` rounds (default 3), each timing three sides in a rotating order: the **bare
  exporter** as a user calls it for the same file (``torch.onnx.export(dynamo=True)`` with a
  dynamic batch axis, or the TorchScript exporter where unframe took it; ``tf2onnx
  .convert.from_keras`` for Keras), **unframe with validation off**
  (``unframe.convert(model, to="onnx", validate=False, output=...)``) and **unframe with its
  default validation**. Each side's best run counts; the garbage collector is collected before
  each run.

Per model the report gives the three best times, the ratios to the bare exporter, and unframe's
``timing_split`` of its best run of each mode: per stage, the wrapped tools' own seconds (the
exporter, onnxruntime, torch eager...) and unframe's (the rest). The summary gives the median and
p90 of the ratios per device against the issue's targets (validation off: median <= 1.1x, p90 <=
1.3x; on: median <= 1.35x), and where unframe's own seconds went, summed per stage.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
import architectures as arch_bench  # noqa: E402

SIDES = ("bare", "novalidate", "validate")
EXPORTERS = ("torch.onnx.export", "tf2onnx", "keras.Model.export")  # the wrapped exporter's tool names
TARGETS = {"novalidate": (1.1, 1.3), "validate": (1.35, None)}  # (median, p90) ratio targets


# -- the worker ----------------------------------------------------------------------------------

def to_device(tree: Any, device: str) -> Any:
    import torch
    import torch.utils._pytree as pytree

    return pytree.tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, tree)


def _quiet() -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
    return stack


def run_model(name: str, device: str, reps: int) -> dict[str, Any]:
    import unframe

    archs = arch_bench._archs()
    arch = archs.ARCHS[name]
    record: dict[str, Any] = {"name": name, "family": arch.family, "framework": arch.framework,
                              "device": device}
    model, samples = archs.build_checked(name)
    if device != "cpu":
        model, samples = model.to(device), to_device(samples, device)
        record["device_name"] = __import__("torch").cuda.get_device_name(0)
    folder = Path(tempfile.mkdtemp(prefix="overhead-"))
    route: dict[str, Any] = {}

    def bare() -> None:
        with _quiet():
            if arch.framework == "torch":
                arch_bench._bare_torch(model, samples, arch, folder, route)
            else:
                arch_bench._bare_keras(model, samples)

    def ours(validate: bool) -> Any:
        with _quiet():
            return unframe.convert(model, to="onnx", sample_inputs=samples, validate=validate, locate=False,
                                   output=folder / f"u{int(validate)}.onnx", force=True, **arch.options)

    try:
        first = ours(True)  # its route decides the anchor's exporter (TorchScript where unframe took it)
    except Exception as exc:  # noqa: BLE001 - a model unframe refuses has no overhead to measure
        record["error"] = f"unframe: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        return record
    route["export_route"] = "torchscript" if "torchscript" in (first.export.route or "") else ""
    record["export_route"] = first.export.route
    del first
    with _quiet():
        arch_bench._warm_unframe(arch.framework, folder)
    try:
        bare()  # warm-up
    except Exception as exc:  # noqa: BLE001 - the anchor failing is a figure
        record["error"] = f"bare exporter: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        return record
    times: dict[str, list[float]] = {s: [] for s in SIDES}
    splits: dict[str, Any] = {}
    for rep in range(reps):
        order = SIDES[rep % 3:] + SIDES[:rep % 3]  # rotated: no side always runs first
        for side in order:
            gc.collect()
            started = time.perf_counter()
            result = bare() if side == "bare" else ours(side == "validate")
            seconds = time.perf_counter() - started
            if side != "bare" and (not times[side] or seconds < min(times[side])):
                splits[side] = result.timing_split
            times[side].append(seconds)
            del result
    record["times"] = times
    record["best"] = {s: min(v) for s, v in times.items()}
    record["ratio"] = {s: record["best"][s] / record["best"]["bare"] for s in ("novalidate", "validate")}
    record["split"] = splits
    return record


# -- the driver ----------------------------------------------------------------------------------

def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def stage_sums(records: list[dict[str, Any]], mode: str) -> dict[str, dict[str, float]]:
    """Per stage: the tools' own and unframe's seconds of the best runs, summed over models."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: {"tools": 0.0, "unframe": 0.0})
    for r in records:
        for stage, part in (r.get("split", {}).get(mode) or {}).items():
            if stage == "total":
                continue
            out[stage]["tools"] += sum(part["tools"].values())
            out[stage]["unframe"] += part["unframe"]
    return dict(out)


def tool_sums(records: list[dict[str, Any]], mode: str, stage: str) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for r in records:
        part = (r.get("split", {}).get(mode) or {}).get(stage)
        for name, seconds in (part or {}).get("tools", {}).items():
            out[name] += seconds
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def report(records: list[dict[str, Any]], header: str) -> str:
    lines = [header, ""]
    for device in sorted({r["device"] for r in records}):
        rows = [r for r in records if r["device"] == device]
        ok = [r for r in rows if "best" in r]
        card = next((r["device_name"] for r in rows if r.get("device_name")), "")
        lines += [f"## {device}" + (f" ({card})" if card else ""), ""]
        lines += ["| target | median | p90 | models | met |", "|---|---:|---:|---:|---|"]
        for mode, (med_target, p90_target) in TARGETS.items():
            ratios = [r["ratio"][mode] for r in ok]
            med, p90 = statistics.median(ratios) if ratios else float("nan"), quantile(ratios, 0.9)
            met = med <= med_target and (p90_target is None or p90 <= p90_target)
            want = f"median <= {med_target}" + (f", p90 <= {p90_target}" if p90_target else "")
            lines.append(f"| {'validation off' if mode == 'novalidate' else 'validation on'} ({want}) | "
                         f"{med:.2f}x | {p90:.2f}x | {len(ratios)} | {'yes' if met else 'no'} |")
        lines += ["", "Where the seconds of unframe's best runs went, summed over the models (s):", "",
                  "| mode | stage | wrapped tools | unframe's own |", "|---|---|---:|---:|"]
        for mode in ("novalidate", "validate"):
            for stage, part in sorted(stage_sums(ok, mode).items(), key=lambda kv: -kv[1]["unframe"]):
                if part["tools"] + part["unframe"] < 0.005:
                    continue
                lines.append(f"| {mode} | {stage} | {part['tools']:.2f} | {part['unframe']:.2f} |")
        lines += ["", "Per model: the best runs; the export stage of the best run without validation told apart "
                  "into the exporter's own seconds, the other tools' (torch eager: the samples and the batch "
                  "probe) and unframe's; parity (with validation) into the runtimes' seconds and unframe's.", "",
                  "| model | family | exporter | bare s | unframe, validation off s | ratio | "
                  "unframe, validation on s | ratio | export: exporter / other tools / unframe s | "
                  "parity: runtimes / unframe s |",
                  "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in sorted(rows, key=lambda r: (r["family"], r["name"])):
            if "best" not in r:
                lines.append(f"| {r['name']} | {r['family']} | | | | | | | {r.get('error', '')[:120]} | |")
                continue
            b = r["best"]
            export = r["split"].get("novalidate", {}).get("export", {"tools": {}, "unframe": 0.0})
            exporter = sum(v for k, v in export["tools"].items() if k.startswith(EXPORTERS))
            on = r["split"].get("validate", {})
            parity_tools = sum(sum(p["tools"].values()) for k, p in on.items() if k.startswith("parity"))
            parity_own = sum(p["unframe"] for k, p in on.items() if k.startswith("parity"))
            lines.append(f"| {r['name']} | {r['family']} | {r.get('export_route', '')} | {b['bare']:.2f} | "
                         f"{b['novalidate']:.2f} | {r['ratio']['novalidate']:.2f} | {b['validate']:.2f} | "
                         f"{r['ratio']['validate']:.2f} | {exporter:.2f} / "
                         f"{sum(export['tools'].values()) - exporter:.2f} / {export['unframe']:.2f} | "
                         f"{parity_tools:.2f} / {parity_own:.2f} |")
        lines.append("")
    return "\n".join(lines)


def run_child(name: str, device: str, reps: int, timeout: float) -> dict[str, Any]:
    record = arch_bench.run_child(name, timeout, script=Path(__file__),
                                  extra=["--device", device, "--reps", str(reps)])
    if "error" in record:
        record.update(device=device, family="?")
    return record


def machine() -> str:
    load = os.getloadavg()
    return f"{platform.node()}: {os.cpu_count()} CPUs, load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--device", default=None, help="cpu,cuda (default: cpu, and cuda where torch sees one)")
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--family", nargs="*", default=[])
    parser.add_argument("--framework", default="torch")
    parser.add_argument("--reps", type=int, default=3, help="rounds; each side's best run counts")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per model and device")
    parser.add_argument("--journal", type=Path, default=ROOT / "bench" / "out" / "overhead.jsonl")
    parser.add_argument("--rerun", action="store_true", help="run models already in the journal again")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run_model(args.worker, args.device or "cpu", args.reps)))
        return
    devices = (args.device or ("cpu,cuda" if cuda_available() else "cpu")).split(",")
    if "cuda" in devices and not cuda_available():
        print("no CUDA device here: the cuda rows are skipped", file=sys.stderr)
        devices = [d for d in devices if d != "cuda"]
    archs = arch_bench._archs()
    frameworks = set(args.framework.split(","))
    names = [n for n, a in archs.ARCHS.items() if a.framework in frameworks and not a.heavy
             and (not args.only or n in args.only) and (not args.family or a.family in args.family)]
    args.journal.parent.mkdir(parents=True, exist_ok=True)
    done = {} if not args.journal.is_file() else {
        (r["name"], r["device"]): r for r in map(json.loads, args.journal.read_text().splitlines()) if r}
    if not args.report_only:
        for device in devices:
            for name in names:
                if (name, device) in done and not args.rerun:
                    continue
                started = time.time()
                record = run_child(name, device, args.reps, args.timeout)
                record["wall_s"] = round(time.time() - started, 1)
                record["machine"] = machine()
                done[(name, device)] = record
                with args.journal.open("a") as f:
                    f.write(json.dumps(record) + "\n")
                ratio = record.get("ratio", {})
                print(f"{device} {name}: " + (record.get("error") or
                      f"off {ratio['novalidate']:.2f}x on {ratio['validate']:.2f}x"), flush=True)
    records = [r for (n, d), r in done.items() if n in names and d in devices]
    text = report(records, f"Written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {machine()}; "
                           f"{len(records)} model runs, best of {args.reps} per side.")
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
