"""docs/support.md, from the registries: one section per kind of registered thing.

Each section is a function returning markdown lines; a section whose registry isn't installed
here says so instead of guessing.
"""

from __future__ import annotations

from collections.abc import Callable


def _frontends_backends() -> list[str]:
    from unframe.converters.registry import BACKENDS, FRONTENDS

    lines = ["## Frontends and backends", "", "| kind | name | extra | formats | description |", "|---|---|---|---|---|"]
    for kind, reg in (("frontend", FRONTENDS), ("backend", BACKENDS)):
        for name, comp in reg.items():
            lines.append(f"| {kind} | {name} | {comp.extra or '(core)'} | {' '.join(comp.suffixes)} | {comp.description} |")
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


def _sklearn() -> list[str]:
    try:
        from unframe.converters.frontends.sklearn import supported_estimators

        rows = supported_estimators()
    except ImportError as exc:
        return ["## scikit-learn estimators", "", f"(skl2onnx not installed here: {exc})", ""]
    lines = ["## scikit-learn estimators", "",
             f"{len(rows)} estimator types convert; each conversion is checked against the "
             "estimator's own predictions.", "", "| estimator | converted by |", "|---|---|"]
    lines += [f"| {name} | {how} |" for name, how in rows]
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
    _frontends_backends, _version_converter, _coreml, _mil_evaluator, _tensorrt, _sklearn,
    _sklearn_safe_load]


def render() -> str:
    lines = ["# What unframe supports", "",
             "Generated from the registries by `python -m unframe.tools.gen_docs`; do not edit by hand.", ""]
    for section in SECTIONS:
        lines += section()
    return "\n".join(lines).rstrip() + "\n"
