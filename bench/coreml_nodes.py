"""CoreML backend on onnx's node test cases: how many convert, and how many match the expected
outputs when the saved package is evaluated with the MIL reference evaluator -- side by side
with onnxsim's CoreML export on the same cases (which converts without checking numbers).

    .venv/bin/python bench/coreml_nodes.py [--limit N] [--only SUBSTR] [--out docs/benchmarks/coreml.md]

The case helpers (``node_cases``, ``to_canonical``, ``run_case``) are also used by the tests.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import io
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

CANONICAL = 21


@dataclass
class CaseResult:
    name: str
    ops: list[str]
    status: str  # "pass" | "random" | "mismatch" | "blocked" | "no-opset" | "convert-error" | "eval-error"
    detail: str = ""
    onnxsim: str = ""  # "converted" | "failed" | ""
    extra: dict[str, Any] = field(default_factory=dict)


def node_cases() -> list[Any]:
    """onnx's node test cases (models with their inputs and expected outputs)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.seterr(all="ignore")
        cases = [c for c in collect_testcases() if c.model is not None and c.data_sets]
    # ct.convert runs gc.collect() on every call; with the cases and the frameworks loaded that
    # costs seconds, so move everything alive now out of the collector's sight.
    import coremltools  # noqa: F401  (imported before the freeze: it pulls in large frameworks)

    gc.collect()
    gc.freeze()
    return cases


def to_canonical(proto: Any, target: int = CANONICAL) -> tuple[Any | None, str]:
    """The case's model at ``target`` as an ``onnx_ir.Model``: through unframe's version converter
    when it can, else when every op's definition is the same at both opsets. (None, why) if not."""
    import onnx
    import onnx_ir as ir

    model = ir.serde.deserialize_model(proto)
    try:
        from unframe.version_converter import convert_opset

        convert_opset(model, target)
        return model, "version converter"
    except ImportError:
        pass
    except Exception as exc:  # refused: fall back to the same-definition rule
        why = f"{type(exc).__name__}: {str(exc)[:120]}"
        model = ir.serde.deserialize_model(proto)
    else:
        why = ""
    source = model.opset_imports.get("", target)
    if source == target:
        return model, "already at target"
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.domain not in ("", "ai.onnx"):
            continue
        try:
            a = onnx.defs.get_schema(node.op_type, source).since_version
            b = onnx.defs.get_schema(node.op_type, target).since_version
        except Exception:
            return None, f"{node.op_type} has no schema at opset {target}"
        if a != b:
            return None, f"{node.op_type} changed between opset {source} and {target} ({why})"
    model.opset_imports[""] = target
    return model, "same definition"


# Inputs CoreML needs at conversion time (shapes, axes, sizes...). The node cases feed them as
# graph inputs; exporters emit them as constants, so the harness freezes them from the case data.
PARAMETER_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Squeeze": (1,), "Unsqueeze": (1,),
    "Slice": (1, 2, 3, 4), "Split": (1,), "Pad": (1, 2, 3), "Resize": (1, 2, 3), "TopK": (1,),
    "OneHot": (1, 2), "CumSum": (1,), "ConstantOfShape": (0,), "Range": (0, 1, 2), "Trilu": (1,),
    "ReduceSum": (1,), "ReduceMean": (1,), "ReduceMax": (1,), "ReduceMin": (1,), "ReduceProd": (1,),
    "ReduceL1": (1,), "ReduceL2": (1,), "ReduceLogSum": (1,), "ReduceLogSumExp": (1,),
    "ReduceSumSquare": (1,), "HannWindow": (0,), "HammingWindow": (0,), "BlackmanWindow": (0,),
    "Clip": (1, 2), "Upsample": (1,), "CenterCropPad": (1,), "Dropout": (1, 2),
    "NonMaxSuppression": (2, 3, 4), "Col2Im": (1, 2), "DFT": (1, 2), "STFT": (1, 3),
}


# Ops whose outputs are draws: a case holding one is checked for shapes only ("random").
RANDOM_OPS = {"RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike", "Bernoulli", "Multinomial"}


def freeze_parameters(case: Any) -> tuple[Any, list[str]]:
    """A copy of the case's model with parameter inputs turned into initializers (same values
    as every data set, which must agree), and the names frozen."""
    import onnx
    from onnx import numpy_helper

    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    wanted = set()
    for node in model.graph.node:
        for i in PARAMETER_INPUTS.get(node.op_type, ()):
            if i < len(node.input) and node.input[i]:
                wanted.add(node.input[i])
    names = [i.name for i in model.graph.input]
    frozen = []
    for k, name in enumerate(names):
        if name not in wanted:
            continue
        values = [as_array(inputs[k]) for inputs, _ in case.data_sets]
        if any(not np.array_equal(values[0], v) for v in values[1:]):
            continue
        model.graph.initializer.append(numpy_helper.from_array(values[0], name))
        frozen.append(name)
    keep = [i for i in model.graph.input if i.name not in frozen]
    del model.graph.input[:]
    model.graph.input.extend(keep)
    return model, frozen


def as_array(value: Any) -> Any:
    from onnx import TensorProto, numpy_helper

    return numpy_helper.to_array(value) if isinstance(value, TensorProto) else value


def run_case(case: Any, workdir: Path, precision: str = "fp32") -> CaseResult:
    """Check, convert, save, evaluate the package and compare with the case's expected outputs."""
    from unframe.converters.backends.coreml.backend import CoreMLBackend
    from unframe.converters.base import Target
    from unframe.errors import UnframeError

    ops = sorted({n.op_type for n in case.model.graph.node})
    proto, frozen = freeze_parameters(case)
    model, why = to_canonical(proto)
    if model is None:
        return CaseResult(case.name, ops, "no-opset", why)
    backend = CoreMLBackend()
    target = Target("coreml", options={"precision": precision, "target": "iOS18"})
    blockers = backend.check(model, target)
    if blockers:
        return CaseResult(case.name, ops, "blocked", "; ".join(str(b) for b in blockers[:3]))
    try:
        with _quiet():
            artifact = backend.convert(model, target, workdir)
            runner = backend.runner(artifact, target)
    except (UnframeError, Exception) as exc:
        return CaseResult(case.name, ops, "convert-error", _one_line(exc))
    random = bool(RANDOM_OPS & {n.op_type for n in model.graph})
    names_in = [i.name for i in case.model.graph.input]
    names_out = [o.name for o in case.model.graph.output]
    for inputs, expected in case.data_sets:
        feeds = {n: as_array(v) for n, v in zip(names_in, inputs, strict=False) if n not in frozen}
        try:
            with _quiet():
                got = runner.run(feeds)
        except Exception as exc:
            return CaseResult(case.name, ops, "eval-error", _one_line(exc))
        for name, want in zip(names_out, expected, strict=False):
            want_array, got_array = np.asarray(as_array(want)), np.asarray(got[name])
            if random:  # another generator's draws: only the shape and dtype can agree
                if want_array.shape != got_array.shape:
                    return CaseResult(case.name, ops, "mismatch", f"{name}: shape {got_array.shape} != {want_array.shape}")
                continue
            bad = _mismatch(want_array, got_array, case)
            if bad:
                return CaseResult(case.name, ops, "mismatch", f"{name}: {bad}")
    return CaseResult(case.name, ops, "random" if random else "pass")


def _mismatch(want: np.ndarray, got: np.ndarray, case: Any) -> str:
    if want.shape != got.shape:
        return f"shape {got.shape} != expected {want.shape}"
    if want.dtype.kind in "fc":
        # MIL has no float64: such cases are computed in float32
        rtol = max(float(case.rtol or 1e-3), 1e-3)
        atol = max(float(case.atol or 1e-7), 1e-5 if want.dtype == np.float64 else 1e-6)
        if want.dtype == np.float16:
            rtol, atol = max(rtol, 1e-2), max(atol, 1e-3)
        ok = np.isclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
        if not ok.all():
            err = np.nanmax(np.abs(got.astype(np.float64) - want.astype(np.float64)))
            return f"{int((~ok).sum())} of {ok.size} differ (max abs err {err:.3g})"
        return ""
    if not np.array_equal(want, got.astype(want.dtype)):
        return f"{int(np.sum(want != got.astype(want.dtype)))} of {want.size} differ"
    return ""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200] if text else ''}"


@contextlib.contextmanager
def _quiet() -> Any:
    """coremltools prints progress bars and warnings for every conversion."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sink = io.StringIO()
        with contextlib.redirect_stderr(sink), contextlib.redirect_stdout(sink):
            yield


def onnxsim_converts(case: Any, workdir: Path) -> str:
    """'converted' when onnxsim's CoreML export produces a package, else 'failed' (given the
    same frozen parameter inputs as unframe)."""
    import onnxsim

    path = workdir / "onnxsim.mlpackage"
    try:
        with _quiet():
            onnxsim.export_coreml(freeze_parameters(case)[0], str(path))
    except Exception:
        return "failed"
    return "converted" if path.exists() else "failed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--only", default="")
    parser.add_argument("--out", default="docs/benchmarks/coreml.md")
    parser.add_argument("--no-onnxsim", action="store_true")
    args = parser.parse_args(argv)
    cases = [c for c in node_cases() if args.only in c.name]
    if args.limit:
        cases = cases[: args.limit]
    results = []
    start = time.time()
    for case in cases:
        with tempfile.TemporaryDirectory(prefix="unframe-bench-") as tmp:
            res = run_case(case, Path(tmp))
            if not args.no_onnxsim:
                res.onnxsim = onnxsim_converts(case, Path(tmp))
        results.append(res)
        print(f"{res.status:14s} {res.onnxsim:10s} {res.name} {res.detail[:150]}", flush=True)
    report = render(results, time.time() - start)
    print(report)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(report)
    return 0


def render(results: list[CaseResult], seconds: float) -> str:
    from unframe.converters.backends.coreml.ops import supported_ops

    counts = collections.Counter(r.status for r in results)
    converted = sum(1 for r in results if r.status in ("pass", "random", "mismatch", "eval-error"))
    sim = sum(1 for r in results if r.onnxsim == "converted")
    lines = [
        "# CoreML backend: onnx node test cases",
        "",
        f"Measured by `bench/coreml_nodes.py` on {len(results)} node cases of onnx "
        f"{_version('onnx')} (coremltools {_version('coremltools')}, onnxsim {_version('onnxsim')}), "
        f"{seconds:.0f} s. Each case is brought to opset {CANONICAL}, checked, converted to an "
        "ML Program (fp32, iOS18), saved, evaluated from the saved package by the MIL reference "
        "evaluator, and compared with the case's expected outputs. Inputs CoreML needs at conversion "
        "time (axes, pads, shapes, scales, sizes, starts/ends...) are frozen to constants from the "
        "case data for both converters, as exporters emit them. onnxsim's export is only counted "
        "as converting (it checks no numbers).",
        "",
        "| | unframe | onnxsim.export_coreml |",
        "|---|---|---|",
        f"| cases converted | {converted} | {sim} |",
        f"| cases checked against expected outputs | {converted} | 0 |",
        f"| cases matching | {counts['pass']} | unknown (not checked) |",
        f"| random-op cases (shapes checked, draws can't be) | {counts['random']} | - |",
        "",
        "unframe outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ".",
        "",
        f"Translated ONNX ops: {len(supported_ops())}.",
        "",
    ]
    bad = [r for r in results if r.status in ("mismatch", "eval-error", "convert-error")]
    if bad:
        lines += ["## Cases that convert but do not match, or fail", "", "| case | status | detail |", "|---|---|---|"]
        lines += [f"| {r.name} | {r.status} | {r.detail[:160].replace('|', '/')} |" for r in bad]
        lines.append("")
    return "\n".join(lines)


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
