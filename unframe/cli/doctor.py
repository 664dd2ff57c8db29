"""``unframe doctor``: what this machine can convert, with versions and what to install."""

from __future__ import annotations

import platform
import sys
from typing import Any


def gather() -> dict[str, Any]:
    from unframe.converters.registry import BACKENDS, FRONTENDS
    from unframe.route import dist_version

    def rows(reg: Any) -> list[dict[str, Any]]:
        out = []
        for name, comp in reg.items():
            missing = comp.missing()
            out.append({
                "name": name,
                "usable": not missing,
                "versions": comp.versions(),
                "missing": missing,
                "install": "" if not missing else f"pip install 'unframe[{comp.extra}]'",
                "origin": reg.origin(name),
                "description": comp.description,
            })
        return out

    return {
        "unframe": dist_version("unframe"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "core": {d: dist_version(d) for d in ("onnx", "onnx-ir", "onnxruntime", "numpy", "click", "rich")},
        "frontends": rows(FRONTENDS),
        "backends": rows(BACKENDS),
        "plugin_errors": FRONTENDS.plugin_errors + BACKENDS.plugin_errors,
        "cache": _cache(),
    }


def _cache() -> str:
    """Where unframe keeps runtimes' answers between processes (``unframe.cache``)."""
    from unframe import cache

    folder = cache.directory()
    return str(folder) if folder is not None else "off (UNFRAME_CACHE_DIR=off)"


def render(info: dict[str, Any], console: Any) -> None:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    console.print(f"unframe {info['unframe']} on Python {info['python']} ({info['platform']})", markup=False)
    console.print("core: " + ", ".join(f"{k} {v}" for k, v in info["core"].items()), markup=False)
    if info.get("cache"):
        console.print(f"cache: {info['cache']} (UNFRAME_CACHE_DIR moves it; off keeps nothing)", markup=False)
    for kind in ("frontends", "backends"):
        t = Table(title=kind)
        for c in ("name", "usable", "versions", "to install"):
            t.add_column(c)
        for r in info[kind]:
            # cells are Text, not markup: "pip install 'unframe[torch]'" keeps its [torch]
            t.add_row(Text(str(r["name"])), "yes" if r["usable"] else "no",
                      Text(", ".join(f"{k} {v}" for k, v in r["versions"].items()) or "-"),
                      Text(r["install"] or "-"))
        console.print(t)
    for e in info["plugin_errors"]:
        console.print(f"[yellow]warning[/]: {escape(str(e))}")
