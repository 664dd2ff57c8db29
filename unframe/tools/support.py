"""docs/support.md, from the registries: one section per kind of registered thing.

Each section is a function returning markdown lines; a section whose registry isn't installed
here says so instead of guessing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _frontends_backends() -> list[str]:
    from unframe.converters.registry import BACKENDS, FRONTENDS

    lines = ["## Frontends and backends", "", "| kind | name | extra | formats | description |", "|---|---|---|---|---|"]
    for kind, reg in (("frontend", FRONTENDS), ("backend", BACKENDS)):
        for name, comp in reg.items():
            lines.append(f"| {kind} | {name} | {comp.extra or '(core)'} | {' '.join(comp.suffixes)} | {comp.description} |")
    lines += ["", "## Routes and quantization per backend", "",
              "| backend | through ONNX | direct from | `--quantize` schemes | keeps layers in float "
              "| other quantizer (tried when its own fails the guard) |",
              "|---|---|---|---|---|---|"]
    for name, be in BACKENDS.items():
        direct = ", ".join(f"{fe} ({be.direct_tools.get(fe, '')})" for fe in be.direct_from) or "-"
        others = ", ".join(f"{q} ({', '.join(schemes)})" for q, schemes in be.other_quantizers.items()) or "-"
        lines.append(f"| {name} | {'yes' if be.onnx_route else 'no'} | {direct} | "
                     f"{', '.join(be.quantize_schemes) or '-'} | {'yes' if be.quantize_excludes else 'no'} | {others} |")
    return lines + [""]


def _tensorrt() -> list[str]:
    from unframe.converters.backends.tensorrt.backend import support_markdown

    return support_markdown() + [""]


def _version_converter() -> list[str]:
    from unframe.version_converter.registry import adapter_table

    steps: dict[str, list[str]] = {}
    for key in adapter_table():
        name = f"{key.domain}::{key.op}" if key.domain else key.op
        steps.setdefault(name, []).append(f"{key.from_version}→{key.to_version}")
    lines = ["## Opset version converter adapters", "",
             "An op whose schema did not change between two opsets moves with no adapter; these are "
             f"the {sum(len(v) for v in steps.values())} registered one-step adapters of "
             f"{len(steps)} ops, for the steps where the op's signature or meaning changed.", "",
             "| op | steps |", "|---|---|"]
    for name in sorted(steps):
        order = sorted(steps[name], key=lambda s: (int(s.split("→")[0]), int(s.split("→")[1])))
        lines.append(f"| {name} | {', '.join(order)} |")
    return lines + [""]


def _coreml() -> list[str]:
    try:
        from unframe.converters.backends.coreml.ops import TRANSLATORS, supported_ops
    except ImportError as exc:  # onnx-ir is core; this only fails on a broken install
        return ["## CoreML backend", "", f"(not available here: {exc})", ""]
    lines = ["## CoreML backend: ONNX operators", "",
             f"{len(supported_ops())} ONNX ops (default domain) translate to MIL. `min iOS` is the "
             "oldest deployment target the translation needs; ops with a pre-flight check refuse "
             "some attribute values or types before anything is written.", "",
             "| op | min iOS | pre-flight check |", "|---|---|---|"]
    for op in supported_ops():
        t = TRANSLATORS.get(op)
        lines.append(f"| {op} | {t.min_ios} | {'yes' if t.check else ''} |")
    return lines + [""]


def _mil_evaluator() -> list[str]:
    try:
        from unframe.converters.backends.coreml.mil_eval.coverage import coverage

        covered, known = coverage()
    except ImportError as exc:
        return ["## MIL reference evaluator", "", f"(coremltools not installed here: {exc})", ""]
    missing = sorted(set(known) - set(covered))
    return ["## MIL reference evaluator", "",
            f"Kernels for {len(covered)} of the {len(known)} core MIL ops of iOS15–iOS18. "
            "A program using an op without a kernel is reported as not checkable, never as passing.",
            "", "Without a kernel: " + (", ".join(f"`{m}`" for m in missing) or "none") + ".", ""]


def _ml_to_tensor() -> list[str]:
    from unframe.passes.ml_to_tensor import LOWERINGS

    rows = sorted(LOWERINGS.items())
    lines = ["## ai.onnx.ml compiled to standard ONNX (ml_to_tensor)", "",
             f"{len(rows)} ai.onnx.ml ops are rewritten into standard ONNX ops, automatically on "
             "routes to coreml and tensorrt and with `--ml-to-tensor` for onnx output; each "
             "lowering is checked against onnxruntime's own ai.onnx.ml kernels. Ops with a "
             "pre-flight check refuse some attribute values before anything is written.", "",
             "| op | becomes | pre-flight check |", "|---|---|---|"]
    lines += [f"| {op} | {spec.summary} | {'yes' if spec.check else ''} |" for op, spec in rows]
    return lines + [""]


SWEEP = ROOT / "docs" / "benchmarks" / "sklearn_routes.json"


def _route_cells(name: str, measured: dict) -> list[str]:
    """onnx / coreml / tensorrt cells of an estimator class from the bench/sklearn_routes.py
    sweep (10,000 rows against the estimator): every case of the class at target or not."""
    cases = [v for k, v in measured.items() if k.split("-")[0] == name]
    cells = []
    for route in ("onnx", "coreml", "tensorrt"):
        rows = [c[route] for c in cases if route in c]
        if not rows:
            cells.append("yes" if route == "onnx" else "not measured")
        elif any(r["status"] == "error" for r in rows):
            cells.append("fails")
        elif route == "tensorrt":
            cells.append("built" if all(r["status"] == "built" for r in rows) else "fails")
        else:
            ok = all((r.get("labels_identical") in (None, 1.0))
                     and (r.get("max_delta") is None
                          or r["max_delta"] <= 1e-5 * max(1.0, r.get("scale") or 0.0)) for r in rows)
            cells.append("checked" if ok else "differs")
    return cells


def _sklearn() -> list[str]:
    import json

    try:
        from unframe.converters.frontends.sklearn import supported_estimators

        rows = supported_estimators()
    except ImportError as exc:
        return ["## scikit-learn estimators", "", f"(skl2onnx not installed here: {exc})", ""]
    measured = json.loads(SWEEP.read_text()) if SWEEP.exists() else {}
    lines = ["## scikit-learn estimators", "",
             f"{len(rows)} estimator types convert to ONNX; each conversion is checked against "
             "the estimator's own predictions. The target columns come from "
             "`bench/sklearn_routes.py` (docs/benchmarks/sklearn_routes.md): *checked* means "
             "labels identical and scores within 1e-5 (of the output's scale where it exceeds 1) of "
             "the estimator on 10,000 rows (onnx: "
             "with every ai.onnx.ml op compiled; coreml: the package in the MIL evaluator), "
             "*built* a TensorRT engine built on the CPU (running it needs a GPU), *not "
             "measured* that the sweep does not cover the type.", "",
             "| estimator | converted by | onnx | coreml | tensorrt |", "|---|---|---|---|---|"]
    lines += [f"| {name} | {how} | " + " | ".join(_route_cells(name, measured)) + " |"
              for name, how in rows]
    return lines + [""]


def _sklearn_safe_load() -> list[str]:
    from unframe.converters.frontends._sklearn.validators import VALIDATORS

    by_check: dict[str, list[str]] = {}
    for name, validator in VALIDATORS.items():
        by_check.setdefault(validator.summary, []).append(str(name))
    lines = ["## scikit-learn, XGBoost, LightGBM: loaded without --trust", "",
             f"{len(VALIDATORS)} types that skops does not trust by default (or that unframe "
             "checks anyway) load from a .skops file without `--trust`, because unframe validates "
             "their content before anything builds them; any other untrusted type still needs "
             "`--trust`. A file that fails a check is refused (exit 3) with the reason.", "",
             "| types | checked |", "|---|---|"]
    for summary, names in by_check.items():
        lines.append(f"| {', '.join(f'`{n}`' for n in sorted(names))} | {summary} |")
    return lines + [""]


SECTIONS: list[Callable[[], list[str]]] = [
    _frontends_backends, _version_converter, _coreml, _mil_evaluator, _tensorrt, _ml_to_tensor,
    _sklearn, _sklearn_safe_load]


def render() -> str:
    lines = ["# What unframe supports", "",
             "Generated from the registries by `python -m unframe.tools.gen_docs`; do not edit by hand.", ""]
    for section in SECTIONS:
        lines += section()
    return "\n".join(lines).rstrip() + "\n"
