"""Node-suite benchmark of the opset version converter: unframe vs onnx.version_converter.

Every onnx backend node test case is converted to each target opset by both converters, run in
onnxruntime (or onnx.reference when onnxruntime can't run the original correctly) and compared with
the case's expected outputs. Per target and direction it prints: correct / refused / failed (converted
but invalid or not runnable) / wrong (ran and gave different numbers).

    python bench/opset_nodes.py -j 2            # full run (~1,900 cases x 11 targets)
    python bench/opset_nodes.py --quick         # every 6th case, 5 targets
    python bench/opset_nodes.py --write docs/benchmarks/version_converter.md
    python bench/opset_nodes.py --frozen --write ...   # the exporter-like variant (see below)

``--frozen``: many node cases feed axes, pads, scales, k, min/max... from graph inputs, which no
older opset can take (they were attributes then), while exporters emit them as constants. With
``--frozen`` only such cases run, each such graph input replaced by an initializer holding the
first data set's value (and only that data set checked), for both converters alike.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime
import json
import multiprocessing
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RANDOM_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli",
              "Multinomial"}
CASES: list[Any] = []
# formal input names that were attributes at some older opset (or must be constant for a rewrite)
FROZEN_INPUTS = {"axes", "pads", "split", "scales", "sizes", "K", "k", "min", "max", "starts", "ends",
                 "steps", "shape", "repeats", "constant_value", "roi", "ratio", "axis", "value",
                 "depth", "dft_length", "training_mode", "num_outputs"}
FROZEN = False


def freeze_case(case: Any) -> Any:
    """The case with every graph input that feeds a FROZEN_INPUTS slot turned into an initializer
    holding the first data set's value; None when nothing is frozen."""
    import onnx
    from onnx import numpy_helper

    model = case.model
    names = [i.name for i in model.graph.input]
    targets = set()
    for node in model.graph.node:
        try:
            schema = onnx.defs.get_schema(node.op_type, _source_opset(model), node.domain or "")
        except Exception:
            continue
        formal = [p.name for p in schema.inputs]
        for k, name in enumerate(node.input):
            slot = formal[min(k, len(formal) - 1)] if formal else ""
            if name in names and slot in FROZEN_INPUTS:
                targets.add(name)
    if not targets or not case.data_sets:
        return None
    first_inputs, first_outputs = case.data_sets[0]
    frozen = onnx.ModelProto()
    frozen.CopyFrom(model)
    keep = [k for k, n in enumerate(names) if n not in targets]
    for k, n in enumerate(names):
        if n in targets:
            frozen.graph.initializer.append(numpy_helper.from_array(np.asarray(first_inputs[k]), n))
    kept = [frozen.graph.input[k] for k in keep]
    del frozen.graph.input[:]
    frozen.graph.input.extend(kept)
    return dataclasses.replace(case, model=frozen, data_sets=[([first_inputs[k] for k in keep], first_outputs)])


def targets_for(quick: bool) -> list[int]:
    from unframe.opset import newest_opset

    newest = newest_opset()
    base = [9, 13, 17, 21, newest] if quick else [7, 9, 11, 13, 15, 17, 19, 21, 23, 25, newest]
    return sorted(set(base))


def _is_random(model: Any) -> bool:
    for node in model.graph.node:
        if node.op_type in RANDOM_OPS:
            return True
        if node.op_type == "Dropout" and len(node.input) >= 3 and node.input[2]:
            return True  # training_mode: the mask is random
    return False


def _ops(model: Any) -> set[tuple[str, str]]:
    out = set()
    def visit(graph: Any) -> None:
        for node in graph.node:
            out.add(("" if node.domain == "ai.onnx" else node.domain, node.op_type))
            for attr in node.attribute:
                if attr.g.node:
                    visit(attr.g)
                for g in attr.graphs:
                    visit(g)
    visit(model.graph)
    return out


def _source_opset(model: Any) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _equal(expected: Any, got: Any, rtol: float, atol: float) -> bool:
    if isinstance(expected, list) or isinstance(got, list):
        if not isinstance(expected, list) or not isinstance(got, list) or len(expected) != len(got):
            return False
        return all(_equal(e, g, rtol, atol) for e, g in zip(expected, got, strict=False))
    if expected is None or got is None:
        return expected is None and got is None
    e, g = np.asarray(expected), np.asarray(got)
    if e.shape != g.shape:
        return False
    if e.dtype == object or g.dtype == object or e.dtype.kind in "SU":
        return e.tolist() == g.tolist()
    if e.dtype.kind in "fc" or g.dtype.kind in "fc":
        try:
            np.testing.assert_allclose(g.astype(np.float64) if g.dtype.kind != "c" else g,
                                       e.astype(np.float64) if e.dtype.kind != "c" else e,
                                       rtol=rtol, atol=atol, equal_nan=True)
        except (AssertionError, TypeError, ValueError):
            return False
        return True
    return bool(np.array_equal(e.astype(np.int64) if e.dtype == bool else e,
                               g.astype(np.int64) if g.dtype == bool else g))


def _run(runtime: str, model_bytes: bytes, model: Any, feeds: dict[str, Any]) -> list[Any]:
    if runtime == "ort":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.log_severity_level = 4
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)
    from onnx.reference import ReferenceEvaluator

    return list(ReferenceEvaluator(model).run(None, feeds))


def _judge(model: Any, case: Any, runtimes: list[str]) -> tuple[str, list[str]]:
    """'correct' / 'wrong' / 'failed', trying runtimes in order (only those that run the original)."""
    import onnx

    data = model.SerializeToString()
    for runtime in runtimes:
        ok = True
        for inputs, outputs in case.data_sets:
            feeds = {i.name: v for i, v in zip(model.graph.input, inputs, strict=False)}
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    got = _run(runtime, data, model, feeds)
            except Exception:
                ok = False
                break
            if len(got) < len(outputs) or not all(
                    _equal(e, g, case.rtol * 10, max(case.atol * 10, 1e-6)) for e, g in zip(outputs, got, strict=False)):
                return "wrong", [runtime]
        if ok:
            return "correct", [runtime]
    del onnx
    return "failed", []


def _original_runtimes(case: Any) -> list[str]:
    """onnxruntime if it reproduces the expected outputs from the original, else onnx.reference if
    that does (the reference runtime is slow, so it is only tried when needed)."""
    for runtime in ("ort", "ref"):
        verdict, _ = _judge(case.model, case, [runtime])
        if verdict == "correct":
            return [runtime]
    return []


def _convert_unframe(model: Any, target: int) -> tuple[Any | None, str, list[str]]:
    import onnx_ir as ir

    from unframe.errors import UnsupportedError
    from unframe.version_converter import convert_opset

    irm = ir.from_proto(model)
    try:
        result = convert_opset(irm, target)
    except UnsupportedError as exc:
        return None, "refused: " + "; ".join(str(b) for b in exc.blockers[:3]), []
    except Exception as exc:
        return None, f"crash: {type(exc).__name__}: {exc}"[:300], []
    return ir.to_proto(irm), "", list(result.adapters_used)


def _convert_onnx(model: Any, target: int) -> tuple[Any | None, str, list[str]]:
    import onnx.version_converter

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return onnx.version_converter.convert_version(model, target), "", []
    except Exception as exc:
        return None, f"refused: {type(exc).__name__}: {str(exc)[:200]}", []


def _checker(model: Any) -> str:
    import onnx

    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return ""


def run_case(args: tuple[int, list[int]]) -> list[dict[str, Any]]:
    index, targets = args

    case = CASES[index]
    if FROZEN:
        case = freeze_case(case)
        if case is None:
            return []
    started = time.time()
    try:
        return _run_case(case, targets)
    finally:
        if time.time() - started > 30:
            print(f"slow case {case.name}: {time.time() - started:.0f}s", file=sys.stderr, flush=True)


def _run_case(case: Any, targets: list[int]) -> list[dict[str, Any]]:
    from unframe.opset import exists_at

    model = case.model
    if _is_random(model):
        return []
    source = _source_opset(model)
    runtimes = _original_runtimes(case)
    if not runtimes:
        return []
    ops = _ops(model)
    original_valid = not _checker(model)
    rows = []
    for target in targets:
        if target == source:
            continue
        eligible = all(exists_at(op, target, dom) for dom, op in ops if dom in ("",))
        row = {"case": case.name, "source": source, "target": target,
               "direction": "up" if target > source else "down", "eligible": eligible}
        for name, convert in (("unframe", _convert_unframe), ("onnx", _convert_onnx)):
            converted, why, fired = convert(model, target)
            if converted is None:
                verdict, note = ("crash" if why.startswith("crash") else "refused"), why
            else:
                check = _checker(converted) if name == "unframe" and original_valid else ""
                verdict, _ = _judge(converted, case, runtimes)
                note = ""
                if verdict in ("failed", "wrong"):
                    # the other runtime may judge the converted model too, but only if it does not
                    # compute the original wrong (one that does would blame the converter for its
                    # own limitation). Only onnxruntime may overrule a "wrong": it has a kernel per
                    # opset version, while onnx.reference runs some ops with their newest semantics
                    # at every opset (RoiAlign's half_pixel, Softmax's axis), so its "right" on an
                    # old opset proves nothing. Such a pair is listed as a runtime disagreement.
                    others = [r for r in ("ort", "ref") if r not in runtimes
                              and _judge(model, case, [r])[0] != "wrong"]
                    second = _judge(converted, case, others)[0] if others else verdict
                    if verdict == "failed":
                        verdict = second
                    elif second == "correct" and others == ["ort"]:
                        verdict = "correct"
                        row[f"{name}_disagree"] = "onnx.reference computes it wrong, onnxruntime right"
                note = f"checker: {check}" if check else note
                if check and verdict == "correct":
                    verdict = "failed"
            row[name] = verdict
            row[f"{name}_note"] = note
            if name == "unframe":
                row["fired"] = fired
        rows.append(row)
    return rows


def summarize(rows: list[dict[str, Any]], targets: list[int]) -> str:
    lines = ["| target | dir | pairs | eligible | unframe correct | refused | failed | wrong | "
             "correct % of eligible | onnx correct | refused | failed | wrong |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for target in targets:
        for direction in ("up", "down"):
            sel = [r for r in rows if r["target"] == target and r["direction"] == direction]
            if not sel:
                continue
            elig = [r for r in sel if r["eligible"]]
            c = collections.Counter(r["unframe"] for r in sel)
            o = collections.Counter(r["onnx"] for r in sel)
            ce = sum(r["unframe"] == "correct" for r in elig)
            pct = f"{100 * ce / len(elig):.1f}" if elig else "-"
            lines.append(f"| {target} | {direction} | {len(sel)} | {len(elig)} | {c['correct']} | {c['refused']} | "
                         f"{c['failed'] + c['crash']} | {c['wrong']} | {pct} | {o['correct']} | {o['refused']} | "
                         f"{o['failed'] + o['crash']} | {o['wrong']} |")
    tot_u = collections.Counter(r["unframe"] for r in rows)
    tot_o = collections.Counter(r["onnx"] for r in rows)
    lines.append(f"| all | | {len(rows)} | {sum(r['eligible'] for r in rows)} | {tot_u['correct']} | "
                 f"{tot_u['refused']} | {tot_u['failed'] + tot_u['crash']} | {tot_u['wrong']} | | "
                 f"{tot_o['correct']} | {tot_o['refused']} | {tot_o['failed'] + tot_o['crash']} | {tot_o['wrong']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-j", "--jobs", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="every 6th case and 5 targets")
    parser.add_argument("--filter", default="", help="only cases whose name contains this")
    parser.add_argument("--json", type=Path, help="write every row here")
    parser.add_argument("--write", type=Path, help="write the markdown table into this file's node section")
    parser.add_argument("--frozen", action="store_true",
                        help="only cases with axes/pads/scales/... inputs, those frozen to constants")
    args = parser.parse_args()
    global FROZEN
    FROZEN = args.frozen

    import onnx
    import onnxruntime
    from onnx.backend.test.case.node import collect_testcases

    warnings.simplefilter("ignore")
    started = time.time()
    CASES.extend(collect_testcases())
    indices = [i for i, c in enumerate(CASES) if args.filter in c.name]
    if args.quick:
        indices = indices[::6]
    targets = targets_for(args.quick)
    work = [(i, targets) for i in indices]
    rows: list[dict[str, Any]] = []
    if args.jobs > 1:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(args.jobs, maxtasksperchild=50) as pool:
            for done, part in enumerate(pool.imap_unordered(run_case, work, chunksize=1)):
                rows.extend(part)
                if done % 200 == 0:
                    print(f"{done}/{len(work)} cases, {time.time() - started:.0f}s", file=sys.stderr, flush=True)
    else:
        for item in work:
            rows.extend(run_case(item))
    table = summarize(rows, targets)
    print(table)
    bad = [r for r in rows if r["unframe"] in ("wrong", "failed", "crash")]
    for r in sorted(bad, key=lambda r: (r["case"], r["target"]))[:400]:
        print(f"{r['unframe']:7s} {r['case']} {r['source']}->{r['target']} {r['unframe_note'][:200]}")
    for name in ("unframe", "onnx"):
        split = [r for r in rows if r.get(f"{name}_disagree")]
        print(f"runtime disagreements counted correct for {name}: {len(split)}")
        for r in sorted(split, key=lambda r: (r["case"], r["target"])):
            print(f"  {r['case']} {r['source']}->{r['target']}: {r[f'{name}_disagree']}")
    elapsed = time.time() - started
    print(f"{len(indices)} cases, {len(rows)} pairs, {elapsed:.0f}s")
    if args.json:
        args.json.write_text(json.dumps(rows))
    if args.write:
        title = "Node suite, inputs frozen as exporters emit them" if args.frozen else "Node suite"
        header = (f"## {title} ({datetime.date.today()}, onnx {onnx.__version__}, onnxruntime "
                  f"{onnxruntime.__version__}{', quick' if args.quick else ''})\n\n"
                  f"`python bench/opset_nodes.py -j {args.jobs}{' --quick' if args.quick else ''}"
                  f"{' --frozen' if args.frozen else ''}`: "
                  + ("only the cases that feed axes/pads/scales/k/min/max/... from graph inputs, those "
                     "inputs frozen to initializers holding the first data set's value, for both "
                     "converters; " if args.frozen else "") +
                  f"{len(indices)} cases, {len(rows)} (case, target) pairs, random-op cases excluded, "
                  f"cases that neither runtime runs correctly at their own opset excluded. "
                  f"'eligible' = every ai.onnx op of the case exists at the target. failed = converted "
                  f"but invalid (checker) or not runnable. wrong = ran with different numbers.\n\n")
        write_section(args.write, "node_frozen" if args.frozen else "node", header + table + "\n")


def write_section(path: Path, key: str, text: str) -> None:
    begin, end = f"<!-- {key}:begin -->", f"<!-- {key}:end -->"
    old = path.read_text() if path.exists() else "# Opset version converter benchmarks\n"
    if begin in old:
        head, rest = old.split(begin, 1)
        tail = rest.split(end, 1)[1]
        new = f"{head}{begin}\n{text}{end}{tail}"
    else:
        new = f"{old.rstrip()}\n\n{begin}\n{text}{end}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)


if __name__ == "__main__":
    main()
