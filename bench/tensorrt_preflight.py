"""How often TensorRT pre-flight (the support table, no TensorRT needed) agrees with the real
ONNX parser, on onnx's backend node test cases.

For each case: pre-flight's verdict is "accept" when ``preflight.check`` finds no blocker; the
parser's verdict is "accept" when a full ``parse`` into a strongly typed network succeeds (the
stricter of ``supports_model_v2`` and ``parse``; both are recorded). Prints the agreement, the
confusion counts, and the disagreements grouped by op: on the raw graphs, and on the graphs after
unframe's TensorRT preparation, which is what ``unframe check`` and ``convert`` compare (both
pre-flight and the parser read the prepared graph there).

    .venv/bin/python bench/tensorrt_preflight.py [--limit N] [--json out.json] [--build N]

``--build N`` also builds engines (CPU AOT under tensorrt-rtx) for up to N cases both accept, to
see how often an accepted parse still fails to build.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from unframe.converters.backends.tensorrt import preflight, trtmodule


def cases(limit: int | None) -> list[Any]:
    """onnx's node test cases (generating them takes ~30 s: each computes its outputs)."""
    from onnx.backend.test.case.node import collect_testcases

    found = sorted(collect_testcases(None), key=lambda c: c.name)
    return found[:limit] if limit else found


def case_op(case_name: str, model: onnx.ModelProto) -> str:
    """The op a case tests: the node's op for one-node cases; expanded (function body) cases
    are labelled by their case name."""
    ops = [n.op_type for n in model.graph.node]
    if len(ops) == 1:
        return ops[0]
    return "expanded " + case_name.removeprefix("test_").split("_expanded")[0]


class Parser:
    """One builder for every case (creating a builder is the slow part)."""

    def __init__(self, trt: Any) -> None:
        self.trt = trt
        self.logger = trtmodule.CollectingLogger(trt)
        self.builder = trt.Builder(self.logger)

    def accepts(self, data: bytes) -> tuple[bool, bool, str]:
        """(supports_model_v2, parse, "op: first error")."""
        results: list[bool] = []
        first = ""
        for mode in ("v2", "parse"):
            network = self.builder.create_network(trtmodule.strongly_typed_flags(self.trt))
            parser = self.trt.OnnxParser(network, self.logger)
            ok = parser.supports_model_v2(data) if mode == "v2" else parser.parse(data)
            results.append(bool(ok) and parser.num_errors == 0)
            if parser.num_errors and not first:
                error = parser.get_error(0)
                first = f"{error.node_operator()}: " + " ".join(str(error.desc()).split())[:160]
        return results[0], results[1], first


def prepared_model(model: onnx.ModelProto) -> ir.Model:
    """The model after unframe's TensorRT preparation passes (what check and convert read)."""
    from unframe.converters.backends.tensorrt.prepare import prepare

    try:
        return prepare(ir.from_proto(model))
    except Exception:  # preparation failing leaves the model as it was (as check_report does)
        return ir.from_proto(model)


def preflight_verdict(model: ir.Model, module: str) -> tuple[bool | None, list[str]]:
    """(accepts, reasons); None when pre-flight crashed (a finding, not a skipped case)."""
    try:
        blockers = preflight.check(model, module)
    except Exception as exc:
        return None, [f"{type(exc).__name__}: {exc}"]
    return not blockers, [str(b) for b in blockers]


def build_ok(trt: Any, data: bytes) -> tuple[bool, str]:
    logger = trtmodule.CollectingLogger(trt)
    builder = trt.Builder(logger)
    network = builder.create_network(trtmodule.strongly_typed_flags(trt))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(data):
        return False, "parse failed"
    config = builder.create_builder_config()
    config.builder_optimization_level = 0
    try:
        engine = builder.build_serialized_network(network, config)
    except Exception as exc:  # the builder raising counts as a failed build
        return False, str(exc)[:160]
    return engine is not None, (logger.errors() or [""])[0][:160]


def run(limit: int | None, build: int) -> dict[str, Any]:
    trt = trtmodule.load_or_none()
    if trt is None:
        sys.exit("needs tensorrt or tensorrt-rtx-cu12 (pip install 'unframe[tensorrt]')")
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    checker = Parser(trt)
    all_cases = cases(limit)
    for case in all_cases:
        rows.append(verdicts(case.name, case_op(case.name, case.model), case.model, checker, trt.__name__))
    public = []
    for name, op, model in reproducers():
        row = verdicts(name, op, model, checker, trt.__name__)
        row["built_prepared"] = build_ok(trt, ir.to_proto(prepared_model(model)).SerializeToString())[0]
        public.append(row)
    built: list[dict[str, Any]] = []
    by_name = {c.name: c for c in all_cases}
    for row in [r for r in rows if r["preflight"] and r["parser"]][:build]:
        case = by_name[row["case"]]
        ok, why = build_ok(trt, case.model.SerializeToString())
        built.append({"case": row["case"], "op": row["op"], "built": ok, "error": why})
    return {"module": f"{trt.__name__} {trt.__version__}", "onnx": onnx.__version__,
            "seconds": round(time.perf_counter() - start, 1), "rows": rows, "builds": built,
            "public": public}


def verdicts(name: str, op: str, model: onnx.ModelProto, checker: Parser, module: str) -> dict[str, Any]:
    """Pre-flight's and the parser's verdicts on the raw graph and on the prepared one."""
    accepts, reasons = preflight_verdict(ir.from_proto(model), module)
    v2, parsed, error = checker.accepts(model.SerializeToString())
    prepared = prepared_model(model)
    prep_accepts, prep_reasons = preflight_verdict(prepared, module)
    prep_v2, prep_parsed, prep_error = checker.accepts(ir.to_proto(prepared).SerializeToString())
    return {"case": name, "op": op, "preflight": accepts, "preflight_reasons": reasons,
            "parser_v2": v2, "parser": v2 and parsed, "parser_error": error,
            "parser_after_prepare": prep_v2 and prep_parsed,
            "preflight_prepared": prep_accepts, "preflight_prepared_reasons": prep_reasons,
            "parser_prepared_error": prep_error}


def reproducers() -> list[tuple[str, str, onnx.ModelProto]]:
    """The parser refusals of held-out architectures (issue 36) as small graphs: MaxViT's
    attention Einsum (upper-case subscripts), BLOOM's ALiBi positions (an int64 CumSum of the
    attention mask) and tf2onnx's export of a ``tf.range`` loop that fills a TensorArray (exported
    here; left out without tensorflow and tf2onnx)."""
    from onnx import TensorProto, helper, numpy_helper

    def model(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any] = ()) -> onnx.ModelProto:
        graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)

    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    einsum = model([helper.make_node("Einsum", ["q", "k"], ["y"],
                                     equation="B G P H I D, B G P H J D -> B G P H I J")],
                   [helper.make_tensor_value_info("q", f32, [1, 2, 3, 2, 4, 8]),
                    helper.make_tensor_value_info("k", f32, [1, 2, 3, 2, 4, 8])],
                   [helper.make_tensor_value_info("y", f32, None)])
    alibi = model([helper.make_node("CumSum", ["mask", "axis"], ["count"]),
                   helper.make_node("Sub", ["count", "one"], ["from_zero"]),
                   helper.make_node("Mul", ["from_zero", "mask"], ["positions"])],
                  [helper.make_tensor_value_info("mask", i64, [2, 16])],
                  [helper.make_tensor_value_info("positions", i64, [2, 16])],
                  [numpy_helper.from_array(np.array(-1, np.int64), "axis"),
                   numpy_helper.from_array(np.array(1, np.int64), "one")])
    found = [("MaxViT attention Einsum", "Einsum", einsum), ("BLOOM ALiBi positions", "CumSum", alibi)]
    loop = tf_range_loop()
    return found + ([("tf.range loop (tf2onnx)", "Loop", loop)] if loop is not None else [])


def tf_range_loop() -> onnx.ModelProto | None:
    try:
        import tensorflow as tf
        import tf2onnx
    except ImportError:
        return None
    spec = [tf.TensorSpec([2, 4], tf.float32)]

    @tf.function(input_signature=spec)
    def steps(x: Any) -> Any:
        states = tf.TensorArray(tf.float32, size=12)
        for t in tf.range(12):
            x = tf.tanh(x * 0.9 + tf.cast(t, tf.float32) * 0.1)
            states = states.write(t, x)
        return states.stack()

    proto, _ = tf2onnx.convert.from_function(steps, input_signature=spec, opset=18)
    return proto


def summarize(result: dict[str, Any]) -> str:
    rows = result["rows"]
    counts = Counter((r["preflight"], r["parser"]) for r in rows)
    agree = counts[(True, True)] + counts[(False, False)]
    lines = [
        f"TensorRT pre-flight vs {result['module']} parser on {len(rows)} onnx {result['onnx']} "
        f"node test cases ({result['seconds']} s)",
        f"agreement: {agree}/{len(rows)} = {agree / max(len(rows), 1):.1%}",
        f"  both accept:                    {counts[(True, True)]}",
        f"  both refuse:                    {counts[(False, False)]}",
        f"  pre-flight refuses, parser accepts (too strict): {counts[(False, True)]}",
        f"  pre-flight accepts, parser refuses (missed):      {counts[(True, False)]}",
        f"  pre-flight crashed:             {sum(1 for r in rows if r['preflight'] is None)}",
    ]
    rescued = [r for r in rows if r["preflight"] and not r["parser"] and r["parser_after_prepare"]]
    after = agree + len(rescued)
    lines.append(f"agreement with the parser on prepared graphs (what `convert` parses): "
                 f"{after}/{len(rows)} = {after / max(len(rows), 1):.1%} "
                 f"({len(rescued)} missed cases parse after unframe's preparation passes)")
    v2_vs_parse = sum(1 for r in rows if r["parser_v2"] and not r["parser"])
    lines.append(f"  supports_model_v2 accepts but parse refuses: {v2_vs_parse}")
    prep = Counter((r.get("preflight_prepared"), r["parser_after_prepare"]) for r in rows)
    both = prep[(True, True)] + prep[(False, False)]
    lines += [
        f"agreement on prepared graphs, pre-flight and parser both reading them (what `check` "
        f"compares): {both}/{len(rows)} = {both / max(len(rows), 1):.1%}",
        f"  both accept {prep[(True, True)]}, both refuse {prep[(False, False)]}, "
        f"too strict {prep[(False, True)]}, missed {prep[(True, False)]}, "
        f"crashed {sum(1 for r in rows if r.get('preflight_prepared', True) is None)}",
    ]
    for title, key in (("prepared, too strict", (False, True)), ("prepared, missed", (True, False))):
        group = [r for r in rows if (r.get("preflight_prepared"), r["parser_after_prepare"]) == key]
        by_op = Counter(r["op"] for r in group)
        if by_op:
            lines.append(f"  {title}: " + ", ".join(f"{op} {n}" for op, n in by_op.most_common()))
    for title, key in (("too strict", (False, True)), ("missed", (True, False))):
        by_op: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            if key == (True, False) and r["parser_after_prepare"]:
                continue  # the pipeline's preparation makes these parse
            if (r["preflight"], r["parser"]) == key:
                by_op[r["op"]].append(r)
        if not by_op:
            continue
        lines.append(f"\n{title} ({sum(len(v) for v in by_op.values())} cases, {len(by_op)} ops):")
        for op, group in sorted(by_op.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            why = group[0]["preflight_reasons"][:1] if key == (False, True) else [group[0]["parser_error"]]
            lines.append(f"  {op:28s} {len(group):3d}  e.g. {group[0]['case']}: {why[0] if why else ''}")
    if result.get("public"):
        lines.append("\nheld-out reproducers (raw: pre-flight / parser; prepared: pre-flight / parser / build):")
        word = {True: "accepts", False: "refuses", None: "crashed"}
        for r in result["public"]:
            lines.append(f"  {r['case']:28s} raw {word[r['preflight']]} / {word[r['parser']]};  prepared "
                         f"{word[r['preflight_prepared']]} / {word[r['parser_after_prepare']]} / "
                         f"{'built' if r['built_prepared'] else 'not built'}")
    if result["builds"]:
        ok = sum(1 for b in result["builds"] if b["built"])
        lines.append(f"\nbuilds of cases both accept: {ok}/{len(result['builds'])} built")
        for b in result["builds"]:
            if not b["built"]:
                lines.append(f"  {b['case']}: {b['error']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--build", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    result = run(args.limit, args.build)
    print(summarize(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
