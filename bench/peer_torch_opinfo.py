"""torch's own op suite (OpInfo) through unframe, against bare ``torch.onnx.export`` as the anchor.

Each op of ``torch.testing._internal.common_methods_invocations.op_db`` that takes float32 on
the CPU gives its first ``--samples`` sample inputs (float32). A sample becomes a small module
whose ``forward(*tensors)`` calls the op: the sample's tensors are the module's inputs, its
other arguments (ints, dims, flags, shapes) are fixed in the module, as a user's model holds
them. Each case then goes

* through the anchor: ``torch.onnx.export(module, tensors, dynamo=True)`` with its defaults, the
  file run by onnxruntime on the sample and compared with torch eager;
* through ``unframe.convert(module, to="onnx", sample_inputs=tensors)`` with default options
  (a success is a conversion that returns; the returned graph is also run by onnxruntime on the
  sample, independently of unframe's own parity, and compared with eager: a disagreement there
  is a *wrong number*);
* through ``unframe.convert(module, to="coreml", sample_inputs=tensors)``.

Everything runs in one worker process, as a training script or a notebook would call unframe
again and again. The parent only watches it: a worker that dies (a signal, an abort) is a
*process death*, counted and restarted at the next case; a case that makes no progress for
``--case-seconds`` is killed the same way and counted as a hang. Exceptions that are not
``unframe.errors.UnframeError`` are *untyped*.

A case whose eager output changes between two runs on the same inputs (random ops: ``bernoulli``,
``dropout``, ``rand_like``...) is reported apart: no converter can reproduce its numbers, so it is
left out of the success rates (``randomness``). A case whose eager run fails or returns no tensor
is not a case.

Needs ``expecttest`` (torch's internal testing package imports it): ``pip install expecttest``.

    python bench/peer_torch_opinfo.py                   # every op, first sample of each
    python bench/peer_torch_opinfo.py --samples 3 --ops 50 --json out.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ATOL, RTOL = 1e-4, 1e-3  # float32's parity defaults (unframe.validate.tolerances)
TARGETS = ("onnx", "coreml")


# ------------------------------------------------------------------------------ the cases ------
def cases(samples: int, ops: int | None, only: set[str] | None) -> list[tuple[str, int]]:
    """(op name with variant, sample index) for every float32 CPU op."""
    import torch

    found = []
    for op in _op_db():
        name = _op_name(op)
        if only and name not in only and op.name not in only:
            continue
        try:
            if torch.float32 not in op.supported_dtypes("cpu"):
                continue
        except Exception:  # noqa: BLE001 - an OpInfo that can't say: not a case
            continue
        found += [(name, i) for i in range(samples)]
    names = list(dict.fromkeys(n for n, _ in found))[:ops] if ops else None
    return [c for c in found if names is None or c[0] in names]


def _op_db() -> list[Any]:
    from torch.testing._internal.common_methods_invocations import op_db

    _unseeded()
    return op_db


def _unseeded() -> None:
    """The suite runs its random ops through ``wrapper_set_seed``, which seeds torch's generator
    on every call: eager is then the same twice and looks deterministic. Call the op directly
    instead, so that two eager runs tell a random op apart (it is then reported as random)."""
    for name, module in list(sys.modules.items()):
        if name.startswith("torch.testing._internal") and hasattr(module, "wrapper_set_seed"):
            module.wrapper_set_seed = _call  # type: ignore[attr-defined]


def _call(op: Any, *args: Any, **kwargs: Any) -> Any:
    return op(*args, **kwargs)


def _op_name(op: Any) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def build(name: str, index: int) -> tuple[Any, tuple[Any, ...]] | None:
    """The module and its tensors for sample ``index`` of op ``name``; None when it has none."""
    import torch
    import torch.utils._pytree as pytree

    op = next(o for o in _op_db() if _op_name(o) == name)
    torch.manual_seed(0)
    for i, sample in enumerate(op.sample_inputs("cpu", torch.float32, requires_grad=False)):
        if i < index:
            continue
        leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
        tensors = tuple(x for x in leaves if isinstance(x, torch.Tensor))
        if not tensors:
            return None
        return OpModule(op.op, leaves, spec), tensors
    return None


def OpModule(fn: Any, leaves: list[Any], spec: Any) -> Any:  # noqa: N802 - a class factory
    import torch
    import torch.utils._pytree as pytree

    class OpCall(torch.nn.Module):
        """``forward(*tensors)``: the op on the sample, its non-tensor arguments fixed."""

        def __init__(self) -> None:
            super().__init__()
            self.fn = fn
            self.fixed = [None if isinstance(x, torch.Tensor) else x for x in leaves]

        def forward(self, *tensors: Any) -> Any:
            it = iter(tensors)
            filled = [next(it) if x is None and isinstance(leaf, torch.Tensor) else x
                      for x, leaf in zip(self.fixed, leaves, strict=True)]
            inp, args, kwargs = pytree.tree_unflatten(filled, spec)
            return self.fn(inp, *args, **kwargs)

    return OpCall().eval()


def eager(module: Any, tensors: tuple[Any, ...]) -> list[np.ndarray] | None:
    import torch
    import torch.utils._pytree as pytree

    with torch.no_grad():
        out = module(*[t.clone() for t in tensors])
    flat = [x for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor)]
    if not flat:
        return None
    return [_numpy(t) for t in flat]


def _numpy(t: Any) -> np.ndarray:
    import torch

    t = t.detach().cpu()
    if t.is_complex():
        return torch.view_as_real(t).numpy()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.numpy()


def agree(ref: list[np.ndarray], got: list[np.ndarray]) -> bool:
    if len(ref) != len(got):
        return False
    for r, g in zip(ref, got, strict=True):
        g = np.asarray(g)
        if r.shape != g.shape:
            return False
        if r.dtype.kind in "fc" or g.dtype.kind in "fc":
            if not np.allclose(g.astype(np.float64), r.astype(np.float64), atol=ATOL, rtol=RTOL, equal_nan=True):
                return False
        elif not np.array_equal(r, g):
            return False
    return True


def feeds_of(session: Any, tensors: tuple[Any, ...]) -> dict[str, np.ndarray]:
    names = [i.name for i in session.get_inputs()]
    arrays = [_numpy(t) for t in tensors]
    if len(names) != len(arrays):  # an input the graph folded away (unused): feed the rest by name
        raise ValueError(f"the graph has {len(names)} inputs for {len(arrays)} tensors")
    return dict(zip(names, arrays, strict=True))


def ort_run(path: str, tensors: tuple[Any, ...]) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, feeds_of(session, tensors))


# ------------------------------------------------------------------------------ one case -------
def run_case(name: str, index: int, workdir: Path) -> dict[str, Any]:
    import torch

    row: dict[str, Any] = {"op": name, "sample": index}
    try:
        built = build(name, index)
    except Exception as exc:  # noqa: BLE001 - the suite's own sample generation failed
        return {**row, "skip": f"sample: {type(exc).__name__}"}
    if built is None:
        return {**row, "skip": "no such sample, or no tensor input"}
    module, tensors = built
    try:
        ref = eager(module, tensors)
        again = eager(module, tensors)
    except Exception as exc:  # noqa: BLE001 - not runnable eagerly: not a case
        return {**row, "skip": f"eager: {type(exc).__name__}"}
    if ref is None:
        return {**row, "skip": "no tensor output"}
    row["random"] = not agree(ref, again or [])
    row["shapes"] = [list(t.shape) for t in tensors]
    row["anchor"] = anchor(module, tensors, ref, workdir)
    for target in TARGETS:
        torch.manual_seed(0)
        row[target] = through_unframe(module, tensors, ref, target, workdir)
    return row


def anchor(module: Any, tensors: tuple[Any, ...], ref: list[np.ndarray], workdir: Path) -> dict[str, Any]:
    import contextlib
    import io
    import warnings

    import torch

    path = str(workdir / "anchor.onnx")
    _cache_torchlib_table()
    started = time.perf_counter()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            program = torch.onnx.export(module, tensors, dynamo=True, verbose=False)
            program.save(path)
    except Exception as exc:  # noqa: BLE001 - the anchor's failure is a data point
        return {"ok": False, "why": f"export: {type(exc).__name__}: {_line(exc)}", "s": _since(started)}
    try:
        got = ort_run(path, tensors)
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "why": f"onnxruntime: {type(exc).__name__}: {_line(exc)}", "s": _since(started)}
    ok = agree(ref, got)
    return {"ok": ok, "why": "" if ok else "numbers differ from eager", "s": _since(started)}


_TABLE: dict[str, Any] = {}


def _cache_torchlib_table() -> None:
    """torch.onnx rebuilds onnxscript's table of ~500 torchlib functions on every export (about
    5 s here); it is the same table each time. The anchor gets it built once per process, as
    unframe does: what the anchor converts is unchanged, only the bench's wall time is."""
    try:
        from torch.onnx._internal.exporter import _registration
    except ImportError:
        return
    apis = _registration.onnxscript_apis
    if getattr(apis.get_torchlib_ops, "_cached", False):
        return
    original = apis.get_torchlib_ops

    def cached() -> Any:
        if "ops" not in _TABLE:
            _TABLE["ops"] = original()
        return _TABLE["ops"]

    cached._cached = True  # type: ignore[attr-defined]
    apis.get_torchlib_ops = cached


def through_unframe(module: Any, tensors: tuple[Any, ...], ref: list[np.ndarray], target: str,
                    workdir: Path) -> dict[str, Any]:
    import unframe
    from unframe.errors import UnframeError

    suffix = ".onnx" if target == "onnx" else ".mlpackage"
    out = workdir / f"unframe-{target}{suffix}"
    started = time.perf_counter()
    try:
        result = unframe.convert(module, to=target, sample_inputs=tensors, output=out, force=True)
    except UnframeError as exc:
        return {"ok": False, "typed": True, "exit": exc.exit_code, "why": _line(exc), "s": _since(started)}
    except Exception as exc:  # noqa: BLE001 - an untyped exception is what this bench counts
        return {"ok": False, "typed": False, "why": f"{type(exc).__name__}: {_line(exc)}", "s": _since(started)}
    row: dict[str, Any] = {"ok": True, "s": _since(started),
                           "notes": [n for n in result.notes if "dynamic" in n or "static" in n][:3]}
    if target == "onnx":  # unframe said it matched: check that independently
        try:
            row["right"] = agree(ref, ort_run(str(out), tensors))
        except Exception as exc:  # noqa: BLE001
            row["right"] = False
            row["why_wrong"] = f"{type(exc).__name__}: {_line(exc)}"
    return row


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def _since(started: float) -> float:
    return round(time.perf_counter() - started, 2)


# ------------------------------------------------------------------------------ the worker -----
def worker(todo: Path, progress: Path) -> None:
    """Run every case listed in ``todo`` in this one process, appending a JSON line per case."""
    cases_left = [tuple(c) for c in json.loads(todo.read_text())]
    with tempfile.TemporaryDirectory(prefix="opinfo-") as tmp:
        for name, index in cases_left:
            with progress.open("a") as f:
                f.write(json.dumps({"start": [name, index]}) + "\n")
            row = run_case(name, index, Path(tmp))
            with progress.open("a") as f:
                f.write(json.dumps(row) + "\n")


def supervise(all_cases: list[tuple[str, int]], case_seconds: float, log: Path) -> list[dict[str, Any]]:
    """Run the worker; on a death or a hang, record it and start a new worker at the next case."""
    rows: list[dict[str, Any]] = []
    todo = log.with_suffix(".todo.json")
    while len(rows) < len(all_cases):
        todo.write_text(json.dumps(all_cases[len(rows):]))
        log.write_text("")
        proc = subprocess.Popen([sys.executable, __file__, "--worker", str(todo), str(log)],
                                stdout=subprocess.DEVNULL)
        hung = _watch(proc, log, case_seconds)
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        finished = [r for r in lines if "start" not in r]
        started = [r["start"] for r in lines if "start" in r]
        rows += finished
        if len(started) > len(finished):  # it went inside a case
            name, index = started[-1]
            why = f"hang past {case_seconds:g} s" if hung else f"exit status {proc.returncode}"
            rows.append({"op": name, "sample": index, "death": True, "why": why})
            print(f"  worker died in {name}[{index}] ({why}); restarting", flush=True)
        elif proc.returncode != 0:
            raise SystemExit(f"the worker ended with status {proc.returncode} between cases")
        print(f"  {len(rows)}/{len(all_cases)} cases", flush=True)
    return rows


def _watch(proc: subprocess.Popen[bytes], log: Path, case_seconds: float) -> bool:
    """Wait for the worker; kill it when the log stops growing for ``case_seconds`` (True)."""
    last, size = time.monotonic(), -1
    while proc.poll() is None:
        time.sleep(1)
        now = log.stat().st_size
        if now != size:
            size, last = now, time.monotonic()
        elif time.monotonic() - last > case_seconds:
            proc.kill()
            proc.wait()
            return True
    return False


# ------------------------------------------------------------------------------ the report -----
def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    counted = [r for r in rows if "skip" not in r and not r.get("death") and not r.get("random")]
    deaths = [r for r in rows if r.get("death")]
    summary: dict[str, Any] = {
        "cases": len(counted), "ops": len({r["op"] for r in counted}),
        "skipped": len([r for r in rows if "skip" in r]),
        "random": len([r for r in rows if r.get("random")]),
        "deaths": len(deaths), "death_cases": [f"{r['op']}[{r['sample']}]: {r['why']}" for r in deaths],
        "anchor_ok": sum(r["anchor"]["ok"] for r in counted),
    }
    for target in TARGETS:
        results = [r[target] for r in counted]
        summary[f"{target}_ok"] = sum(x["ok"] for x in results)
        summary[f"{target}_untyped"] = sum(not x["ok"] and not x.get("typed") for x in results)
        summary[f"{target}_exits"] = dict(collections.Counter(
            str(x.get("exit", "untyped")) for x in results if not x["ok"]))
        summary[f"{target}_reasons"] = collections.Counter(
            _reason(x["why"]) for x in results if not x["ok"]).most_common(12)
        summary[f"{target}_seconds"] = round(sum(x["s"] for x in results), 1)
    summary["onnx_wrong"] = sum(r["onnx"]["ok"] and not r["onnx"].get("right", True) for r in counted)
    summary["wrong_cases"] = [f"{r['op']}[{r['sample']}]" for r in counted
                              if r["onnx"]["ok"] and not r["onnx"].get("right", True)]
    summary["untyped_cases"] = [f"{r['op']}[{r['sample']}] {t}: {r[t]['why']}" for r in counted
                                for t in TARGETS if not r[t]["ok"] and not r[t].get("typed")]
    summary["anchor_only"] = [r["op"] for r in counted if r["anchor"]["ok"] and not r["onnx"]["ok"]]
    summary["onnx_not_coreml"] = [r["op"] for r in counted if r["onnx"]["ok"] and not r["coreml"]["ok"]]
    summary["anchor_seconds"] = round(sum(r["anchor"]["s"] for r in counted), 1)
    return summary


def _reason(why: str) -> str:
    """A failure's kind, for the table: its text up to the first detail."""
    for cut in (" (", ": [", " at ", ":"):
        if cut in why[12:]:
            why = why[: 12 + why[12:].index(cut)]
    return why[:90]


def table(s: dict[str, Any]) -> str:
    n = s["cases"] or 1
    onnx_ok = s["onnx_ok"] or 1
    lines = [
        f"cases: {s['cases']} ({s['ops']} ops; {s['skipped']} samples not runnable eagerly or without "
        f"tensors, {s['random']} random, {s['deaths']} process deaths)",
        "| route | converted | rate | untyped | wrong numbers | seconds |",
        "|---|---|---|---|---|---|",
        f"| torch.onnx.export(dynamo=True) + onnxruntime (anchor) | {s['anchor_ok']} | "
        f"{100 * s['anchor_ok'] / n:.1f}% | - | - | {s['anchor_seconds']} |",
        f"| unframe to onnx | {s['onnx_ok']} | {100 * s['onnx_ok'] / n:.1f}% | {s['onnx_untyped']} | "
        f"{s['onnx_wrong']} | {s['onnx_seconds']} |",
        f"| unframe to coreml | {s['coreml_ok']} | {100 * s['coreml_ok'] / n:.1f}% "
        f"({100 * s['coreml_ok'] / onnx_ok:.1f}% of the ONNX successes) | {s['coreml_untyped']} | - | "
        f"{s['coreml_seconds']} |",
    ]
    for target in TARGETS:
        lines.append(f"{target} failures by exit code: {s[f'{target}_exits']}")
        lines += [f"  {count:4d}  {reason}" for reason, count in s[f"{target}_reasons"]]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=1, help="sample inputs per op (the first N)")
    parser.add_argument("--ops", type=int, default=None, help="only the first N ops")
    parser.add_argument("--only", default="", help="comma-separated op names")
    parser.add_argument("--case-seconds", type=float, default=600.0, help="a case past this is a hang")
    parser.add_argument("--json", default="", help="write the rows and the summary here")
    parser.add_argument("--log", default="", help="the worker's progress file (JSON lines)")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(Path(args.worker[0]), Path(args.worker[1]))
        return
    only = {o.strip() for o in args.only.split(",") if o.strip()} or None
    todo = cases(args.samples, args.ops, only)
    print(f"{len(todo)} cases", flush=True)
    log = Path(args.log or tempfile.mkstemp(prefix="opinfo-", suffix=".jsonl")[1])
    started = time.perf_counter()
    rows = supervise(todo, args.case_seconds, log)
    summary = summarize(rows)
    summary["wall_seconds"] = round(time.perf_counter() - started, 1)
    print(table(summary))
    print(json.dumps({k: summary[k] for k in ("wrong_cases", "untyped_cases", "death_cases")}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1, default=str))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
