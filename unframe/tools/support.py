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


SECTIONS: list[Callable[[], list[str]]] = [_frontends_backends, _tensorrt]


def render() -> str:
    lines = ["# What unframe supports", "",
             "Generated from the registries by `python -m unframe.tools.gen_docs`; do not edit by hand.", ""]
    for section in SECTIONS:
        lines += section()
    return "\n".join(lines).rstrip() + "\n"
