"""The public-architecture set's torch models (model_zoo/architectures.toml) on ExecuTorch's direct
route: each built from its tiny config with seeded weights (model_zoo/build/arch_models.py), its
inputs prepared as the torch frontend prepares them (the batch axis proven by a probe run),
``convert_from_torch``, then the .pte run by ExecuTorch's runtime and compared with torch eager by
unframe's comparator on the samples and the probe (the pipeline's parity stage, without the
pipeline: the direct route isn't planned yet). One child process per model (a time limit; a
crash is a record, not the end of the run).

    PYTHONPATH=. .venv/bin/python bench/executorch_archs.py [--only a,b] [--heavy] [--timeout 900]

Outcomes: ``ok`` (parity passed), ``refused`` (exit 4 with blockers), ``parity`` (the program ran
and differs, or failed to run a feed), ``error`` (anything else: exit 1/9, a crash, a timeout).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(ROOT / "tests" / "converters" / "backends" / "executorch"))


def worker(name: str) -> dict[str, Any]:
    from architectures import _archs

    archs = _archs()
    arch = archs.ARCHS[name]
    record: dict[str, Any] = {"name": name, "family": arch.family}
    model, samples = archs.build_checked(name)
    from et_helpers import parity, prepare

    from unframe.converters.backends.executorch.direct import convert_from_torch
    from unframe.converters.base import Target
    from unframe.errors import UnframeError

    target = Target("executorch")
    try:
        p = kv_prepared(model, samples, name) if arch.options.get("kv_cache") else prepare(model, samples)
        started = time.perf_counter()
        artifact = convert_from_torch(p.model, p.inputs, target, Path(tempfile.mkdtemp(prefix="et-arch-")), p.outputs)
        record["convert_s"] = time.perf_counter() - started
    except UnframeError as exc:
        record.update(outcome="refused" if exc.exit_code == 4 else "error", exit=exc.exit_code,
                      message=str(exc)[:300], blockers=[str(b)[:200] for b in getattr(exc, "blockers", [])][:5])
        return record
    d = artifact.metadata["delegation"]
    record["xnnpack"] = f"{d['delegated_nodes']}/{d['delegated_nodes'] + d['portable_nodes']}"
    record["dynamic"] = sorted(artifact.metadata["bounds"])
    result = parity(p, artifact, target)
    record["outcome"] = "ok" if result.status == "passed" else "parity"
    record["cases"] = result.cases
    record["worst_rel_to_scale"] = max((o.max_abs / o.scale for o in result.outputs if o.scale), default=0.0)
    if result.status != "passed":
        record["message"] = result.reason[-400:]
    return record


def kv_prepared(model: Any, samples: Any, name: str) -> Any:
    """What the torch frontend hands on for ``--kv-cache``: its cache wrapper, the wrapper's
    inputs (the model's own cache of a prompt's first part) and output names."""
    from et_helpers import Prepared

    from unframe.converters.frontends._torch import inputs as inp
    from unframe.converters.frontends._torch import kvcache

    kv = kvcache.prepare(model, samples, False, name)
    return Prepared(kv.module, kv.inputs, kv.output_names, [inp.feeds(kv.inputs)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker")
    ap.add_argument("--only")
    ap.add_argument("--heavy", action="store_true")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--journal", default="/tmp/executorch_archs.jsonl")
    args = ap.parse_args()
    if args.worker:
        try:
            record = worker(args.worker)
        except Exception as exc:  # noqa: BLE001 - the record says what failed
            record = {"name": args.worker, "outcome": "error", "message": f"{type(exc).__name__}: {exc}"[:300],
                      "trace": traceback.format_exc()[-600:]}
        print(json.dumps(record), flush=True)
        return
    from architectures import _archs, interleave, read_journal, run_child

    archs = _archs()
    names = [n for n, a in archs.ARCHS.items() if a.framework == "torch" and (args.heavy or not a.heavy)]
    if args.only:
        names = [n for n in names if n in args.only.split(",")]
    journal = Path(args.journal)
    done = read_journal(journal)
    for name in interleave(names, {n: archs.ARCHS[n].family for n in names}):
        if name in done:
            continue
        record = run_child(name, args.timeout, Path(__file__))
        record.setdefault("outcome", "error")
        record.setdefault("family", archs.ARCHS[name].family)
        with journal.open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"{name}: {record['outcome']} {record.get('message', '')[:150]}", flush=True)
    records = [r for n, r in read_journal(journal).items() if n in names]
    print(table(records))


def table(records: list[dict[str, Any]]) -> str:
    lines = ["| model | family | outcome | XNNPACK nodes | dynamic dims | convert (s) | worst max abs / scale | note |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sorted(records, key=lambda r: (r.get("family", ""), r["name"])):
        rel = r.get("worst_rel_to_scale")
        note = (r.get("message") or "").replace("|", "/")[:160]
        lines.append(f"| {r['name']} | {r.get('family', '')} | {r['outcome']} | {r.get('xnnpack', '')} | "
                     f"{', '.join(r.get('dynamic') or [])} | {r.get('convert_s', 0):.1f} | "
                     f"{'' if rel is None else f'{rel:.1e}'} | {note} |")
    counts = {k: sum(r["outcome"] == k for r in records) for k in ("ok", "refused", "parity", "error")}
    lines.append("")
    lines.append(f"{len(records)} torch models: " + ", ".join(f"{k} {v}" for k, v in counts.items())
                 + f" ({100 * counts['ok'] / max(1, len(records)):.0f} % converted with parity)")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
