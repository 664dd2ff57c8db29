"""The public-architecture set (model_zoo/architectures.toml) on the three new targets of issue 37:
OpenVINO, LiteRT and ExecuTorch, each artifact run on this CPU against its reference.

    PYTHONPATH=. .venv/bin/python bench/new_targets.py [--only NAME ...] [--family F ...] [--heavy]
        [--jobs N] [--timeout 900] [--journal bench/out/new_targets.jsonl] [--rerun]
    PYTHONPATH=. .venv/bin/python bench/new_targets.py --report-only --out docs/benchmarks/new_targets.md

One child process per model (bench/architectures.py's driver: built from its tiny config,
converted, freed before the next; a crash or a timeout is a record, not the end of the run). The
worker converts the model once, parity on, the locator off:

- torch models: ``unframe.convert(model, to=["onnx", "openvino", "litert", "executorch"])``
  (OpenVINO through ONNX, the default; LiteRT and ExecuTorch on their direct routes), then
  ``to="openvino", via="direct"`` (OpenVINO's own PyTorch frontend, the alternative route);
- Keras models: ``to=["onnx", "openvino", "litert"]``.

Per target the journal keeps: ok, unframe's exit code (any exception that isn't an unframe
error counts as exit 1), the blockers (first one in order), the last stage's parity (max abs
error and that error over the output's scale) and the conversion seconds: the result's timings
without the parity checks; a direct branch (LiteRT, ExecuTorch) of a multi-target call doesn't
count the ONNX export the other branches shared, since it starts from the source model.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import re
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from architectures import _archs, _failure, _success, interleave, read_journal, run_child  # noqa: E402

TORCH_TARGETS = ["onnx", "openvino", "litert", "executorch"]
KERAS_TARGETS = ["onnx", "openvino", "litert"]
DIRECT_OV = "openvino_direct"  # the journal's key for to="openvino", via="direct"
COLUMNS = [*TORCH_TARGETS, DIRECT_OV]
# what each issue-37 target counts (the denominator) and the share it asks for
GOALS = {"openvino": ("models whose onnx target succeeded", 0.95),
         "litert": ("torch and Keras models", 0.90),
         "executorch": ("torch models", 0.90)}
PACKAGES = ("torch", "tensorflow", "tensorflow-cpu", "keras", "onnxruntime", "openvino", "ai-edge-litert", "litert-torch",
            "executorch")


# -- the worker: one model, every new target ----------------------------------------------------

def run_model(name: str, folder: Path) -> dict[str, Any]:
    archs = _archs()
    arch = archs.ARCHS[name]
    record: dict[str, Any] = {"name": name, "family": arch.family, "framework": arch.framework, "routes": {},
                              "kv_cache": bool(arch.options.get("kv_cache"))}
    started = time.perf_counter()
    model, samples = archs.build_checked(name)
    record["build_s"] = time.perf_counter() - started
    targets = TORCH_TARGETS if arch.framework == "torch" else KERAS_TARGETS
    _convert_all(model, samples, arch.options, targets, folder / "targets", record)
    if arch.framework == "torch":
        (folder / "direct").mkdir()
        record["routes"][DIRECT_OV] = _convert_one(model, samples, arch.options, folder / "direct" / "model.xml")
    return record


def _convert_all(model: Any, samples: Any, options: dict[str, Any], targets: list[str], out: Path,
                 record: dict[str, Any]) -> None:
    import unframe
    from unframe.api import PartialFailure
    from unframe.errors import UnframeError

    try:
        multi = unframe.convert(model, to=targets, sample_inputs=samples, output=out, locate=False, **options)
    except PartialFailure as exc:
        multi = exc.result
    except UnframeError as exc:  # before the fork (load, preparation): every target fails alike
        record["routes"] = {t: _refusal(exc.exit_code, exc) for t in targets}
        return
    except Exception as exc:  # noqa: BLE001 - a bug: counted as exit 1
        record["routes"] = {t: _refusal(1, exc) for t in targets}
        return
    direct = {b.name for b in multi.route.branches if b.direct}
    for t in targets:
        if t in multi.results:
            record["routes"][t] = _done(multi.results[t], t in direct)
        else:
            record["routes"][t] = _refusal(multi.errors[t].exit_code, multi.errors[t])
        record["routes"][t]["via"] = "direct" if t in direct else "onnx"


def _convert_one(model: Any, samples: Any, options: dict[str, Any], out: Path) -> dict[str, Any]:
    import unframe
    from unframe.errors import UnframeError

    try:
        result = unframe.convert(model, to="openvino", via="direct", sample_inputs=samples, output=out,
                                 locate=False, **options)
    except UnframeError as exc:
        return _refusal(exc.exit_code, exc)
    except Exception as exc:  # noqa: BLE001
        return _refusal(1, exc)
    return _done(result, True)


def _done(result: Any, direct: bool) -> dict[str, Any]:
    entry = _success(result)
    if direct:  # the prefix's export (shared in a multi-target call) is no part of this branch
        entry["convert_s"] = sum(v for k, v in result.timings.items()
                                 if not k.startswith("parity") and k not in ("total", "export", "opset"))
    entry["notes"] = [n[:240] for n in result.notes][:6]
    return entry


def _refusal(code: int, exc: BaseException) -> dict[str, Any]:
    entry = _failure(code, exc)
    blockers = list(getattr(exc, "blockers", None) or [])
    entry["first_blocker"] = str(blockers[0])[:300] if blockers else ""
    if code == 1 and not hasattr(exc, "exit_code"):  # not an unframe error: where it was raised
        entry["trace"] = traceback.format_exc()[-1500:]
    return entry


# -- the report ----------------------------------------------------------------------------------

def outcome(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "-"
    if entry["ok"]:
        return "ok"
    return "refused" if entry["exit"] == 4 else f"exit {entry['exit']}"


def _applies(record: dict[str, Any], target: str) -> bool:
    return record.get("framework") == "torch" or target not in ("executorch", DIRECT_OV)


def counts_table(records: list[dict[str, Any]]) -> str:
    """Family x target: ok / refused (exit 4) / failed (another exit) / crashed (the worker died
    or ran past its time limit)."""
    by_family: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_family[r.get("family", "?")].append(r)
    lines = ["| family | models | " + " | ".join(COLUMNS) + " |", "|---|---:|" + "---|" * len(COLUMNS)]
    total: dict[str, Counter[str]] = {t: Counter() for t in COLUMNS}
    for family in sorted(by_family):
        cells = []
        for t in COLUMNS:
            c: Counter[str] = Counter()
            for r in by_family[family]:
                if _applies(r, t):
                    c["crashed" if "error" in r else outcome(r["routes"].get(t))] += 1
            total[t].update(c)
            cells.append(_cell(c))
        lines.append(f"| {family} | {len(by_family[family])} | " + " | ".join(cells) + " |")
    lines.append(f"| **all** | {len(records)} | " + " | ".join(f"**{_cell(total[t])}**" for t in COLUMNS) + " |")
    return "\n".join(lines)


def _cell(c: Counter[str]) -> str:
    n = sum(c.values())
    if not n:
        return "-"
    rest = [f"{k} {v}" for k, v in sorted(c.items()) if k not in ("ok", "-")]
    return f"{c['ok']}/{n}" + (f" ({', '.join(rest)})" if rest else "")


def goals(records: list[dict[str, Any]]) -> str:
    lines = [goals_table(records)]
    kv = [r for r in records if r.get("kv_cache")]
    if kv:  # the ONNX export's option: counted apart, the direct routes convert the plain module
        lines += ["", f"Without the {len(kv)} `--kv-cache` variants (the same decoders as their plain "
                  "siblings, with the ONNX export's cache option, which a direct branch notes and leaves):", "",
                  goals_table([r for r in records if not r.get("kv_cache")])]
    bad = [(r["name"], t) for r in records for t in COLUMNS if _applies(r, t)
           and ("error" in r or outcome(r["routes"].get(t)).startswith("exit"))]
    lines.append("")
    lines.append(f"Failures that are not an exit-4 refusal (exit 1/9, another code, a crash): {len(bad)}"
                 + (": " + ", ".join(f"`{n}` {t}" for n, t in bad) if bad else "."))
    return "\n".join(lines)


def goals_table(records: list[dict[str, Any]]) -> str:
    lines = ["| target | counted over | ok | share | issue target | met |", "|---|---|---:|---:|---:|---|"]
    for t, (over, goal) in GOALS.items():
        pool = [r for r in records if _applies(r, t)]
        if t == "openvino":
            pool = [r for r in pool if "error" not in r and r["routes"].get("onnx", {}).get("ok")]
        ok = sum(1 for r in pool if "error" not in r and r["routes"].get(t, {}).get("ok"))
        share = ok / len(pool) if pool else 0.0
        lines.append(f"| {t} | {len(pool)} {over} | {ok} | {100 * share:.1f} % | {100 * goal:.0f} % | "
                     f"{'yes' if share >= goal else '**no**'} |")
    return "\n".join(lines)


def parity_and_time(records: list[dict[str, Any]]) -> str:
    """Per target over its successes: the largest parity error over the output's scale, and the
    median / largest conversion seconds."""
    lines = ["| target | converted | largest max err / scale (model) | conversion s, median | largest (model) |",
             "|---|---:|---|---:|---|"]
    for t in COLUMNS:
        done = [(r["name"], r["routes"][t]) for r in records if r["routes"].get(t, {}).get("ok")]
        if not done:
            lines.append(f"| {t} | 0 | - | - | - |")
            continue
        rels = [(e["rel"], n) for n, e in done if e.get("rel") is not None]
        worst = max(rels) if rels else None
        secs = sorted((e["convert_s"], n) for n, e in done)
        lines.append(f"| {t} | {len(done)} | " + (f"{worst[0]:.1e} ({worst[1]})" if worst else "-")
                     + f" | {statistics.median(s for s, _ in secs):.1f} | {secs[-1][0]:.1f} ({secs[-1][1]}) |")
    return "\n".join(lines)


def top_blockers(records: list[dict[str, Any]]) -> str:
    """Per target, the first blocker of each refusal by op (where the tool named none, ``*``, by
    the error it raised)."""
    lines = []
    for t in COLUMNS:
        ops: Counter[str] = Counter()
        for r in records:
            e = r["routes"].get(t)
            if e and not e["ok"] and e["exit"] == 4:
                ops[_blocker_label(e.get("first_blocker") or "")] += 1
        if ops:
            lines.append(f"- {t}: " + ", ".join(f"`{op}` x{n}" for op, n in ops.most_common(8)))
    return "\n".join(lines) or "(none)"


def _blocker_label(blocker: str) -> str:
    """``[op]: reason`` -> op; ``[*]: tool: ErrorType: ...`` -> ``* (ErrorType)``."""
    match = re.match(r"(?:node '.*?' )?\[([^\]]*)\]: (.*)", blocker)
    if match is None:
        return "(no blocker named)"
    op, reason = match.groups()
    if op != "*":
        return op
    kinds = re.findall(r"\b([A-Z]\w*(?:Error|Exception|Node|Failure))\b", reason)
    return f"* ({kinds[0]})" if kinds else f"* ({reason.split(':')[0][:50]})"


def direct_vs_onnx(records: list[dict[str, Any]]) -> str:
    torch = [r for r in records if r.get("framework") == "torch" and "error" not in r]
    both = [r["name"] for r in torch if r["routes"].get("openvino", {}).get("ok")
            and r["routes"].get(DIRECT_OV, {}).get("ok")]
    only_direct = [r["name"] for r in torch if not r["routes"].get("openvino", {}).get("ok")
                   and r["routes"].get(DIRECT_OV, {}).get("ok")]
    only_onnx = [r["name"] for r in torch if r["routes"].get("openvino", {}).get("ok")
                 and not r["routes"].get(DIRECT_OV, {}).get("ok")]
    neither = [r["name"] for r in torch if r["name"] not in both + only_direct + only_onnx]
    return (f"Of {len(torch)} torch models: both routes {len(both)}; only the direct route "
            f"{len(only_direct)}{_names(only_direct)}; only through ONNX {len(only_onnx)}{_names(only_onnx)}; "
            f"neither {len(neither)}{_names(neither)}.")


def _names(names: list[str]) -> str:
    return f" ({', '.join(f'`{n}`' for n in names)})" if names else ""


def non_ok(records: list[dict[str, Any]]) -> str:
    lines = []
    for r in records:
        if "error" in r:
            lines.append(f"- `{r['name']}` (every target): crashed: {r['error'][:240]}")
            continue
        for t in COLUMNS:
            e = r["routes"].get(t)
            if e is None or e["ok"]:
                continue
            why = e.get("first_blocker") or e["message"]
            lines.append(f"- `{r['name']}` {t}: exit {e['exit']}: {' '.join(why.split())[:260]}".replace("|", "/"))
    return "\n".join(lines) or "(none)"


def machine_line(records: list[dict[str, Any]]) -> str:
    import os
    import platform

    versions = []
    for p in PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions.append(f"{p} {importlib.metadata.version(p)}")
    walls = [r.get("wall_s", 0.0) for r in records]
    return (f"Machine: {platform.node()}, {os.cpu_count()}-core CPU (no GPU), Python {platform.python_version()}; "
            f"{', '.join(versions)}. {len(records)} models, {sum(walls) / 60:.0f} min of worker time "
            f"(build, conversions and parity; the longest {max(walls, default=0):.0f} s).")


def report(records: list[dict[str, Any]]) -> str:
    return "\n\n".join([
        machine_line(records),
        "**Per family and target** (ok / models; refused = exit 4 with blockers; exit N = failed with "
        "another exit code; crashed = the worker died or ran past its time limit):", counts_table(records),
        "**Against the issue's targets:**", goals(records),
        "**Parity and conversion time** over the successes (error: the last stage's max abs error over "
        "the output's scale; seconds: every stage but parity):", parity_and_time(records),
        "**OpenVINO: through ONNX vs its own PyTorch frontend** (`via=\"direct\"`): " + direct_vs_onnx(records),
        "**Top blocker ops per target** (models refused on each):", top_blockers(records),
        "**Every target that isn't ok** (exit code, then the first blocker or the message):", non_ok(records),
    ]) + "\n"


# -- the driver ----------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--family", nargs="*", default=[])
    parser.add_argument("--heavy", action="store_true", help="also the larger keras.applications siblings")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per model")
    parser.add_argument("--jobs", type=int, default=1, help="models at once (a child process each)")
    parser.add_argument("--journal", type=Path, default=ROOT / "bench" / "out" / "new_targets.jsonl")
    parser.add_argument("--rerun", action="store_true", help="run models already in the journal again")
    parser.add_argument("--out", type=Path, default=None, help="write the report here (markdown)")
    parser.add_argument("--report-only", action="store_true", help="write the report from the journal, run nothing")
    args = parser.parse_args()
    if args.worker:
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sys.stderr):
            record = run_model(args.worker, Path(tmp))
        print(json.dumps(record, default=str), flush=True)
        return
    archs = _archs()
    names = [n for n, a in archs.ARCHS.items()
             if (not args.only or n in args.only) and (not args.family or a.family in args.family)
             and (args.heavy or not a.heavy or n in args.only)]
    if importlib.util.find_spec("keras_hub") is None:
        print("keras_hub is not installed: the keras-hub family is left out", flush=True)
        names = [n for n in names if archs.ARCHS[n].family != "keras-hub"]
    families = {n: a.family for n, a in archs.ARCHS.items()}
    args.journal.parent.mkdir(parents=True, exist_ok=True)
    done = read_journal(args.journal)
    todo = [] if args.report_only else [n for n in interleave(names, families) if args.rerun or n not in done]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:  # each job is a child process
        futures = [pool.submit(run_child, n, args.timeout, Path(__file__)) for n in todo]
        for future in as_completed(futures):
            record = future.result()
            record.setdefault("family", families[record["name"]])
            record.setdefault("framework", archs.ARCHS[record["name"]].framework)
            done[record["name"]] = record
            with args.journal.open("a") as f:
                f.write(json.dumps(record, default=str) + "\n")
            summary = {t: outcome(e) if e["ok"] or e["exit"] == 4 else f"exit {e['exit']}"
                       for t, e in record.get("routes", {}).items()}
            print(f"{record['name']}: {record.get('error') or summary} ({record.get('wall_s', 0):.0f} s)", flush=True)
    records = [done[n] for n in archs.ARCHS if n in done and (args.report_only or n in names)]
    for r in records:  # a crashed worker's record has no routes
        r.setdefault("routes", {})
        r.setdefault("kv_cache", bool(archs.ARCHS[r["name"]].options.get("kv_cache")))
    text = report(records)
    print(text)
    if args.out is not None:
        kept = args.out.read_text().partition(KEPT)[2] if args.out.is_file() else ""
        args.out.write_text(_page(text, sys.argv[1:]) + (f"\n{KEPT}{kept}" if kept else ""))


KEPT = "<!-- written by hand below: --report-only keeps it -->"


def _page(text: str, argv: list[str]) -> str:
    import datetime

    command = " ".join(["python bench/new_targets.py", *[a for a in argv if a != "--rerun"]])
    return (f"# The public-architecture set on OpenVINO, LiteRT and ExecuTorch (issue 37)\n\n"
            f"{__doc__.split(chr(10) + chr(10), 2)[2].strip()}\n\n"
            f"Report: `{command}`; written {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC "
            f"from the journal.\n\n{text}")


if __name__ == "__main__":
    main()
