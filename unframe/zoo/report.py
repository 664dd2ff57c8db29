"""The batch report: a table in the terminal, ``report.json``, and an HTML or Markdown page
(chosen by the ``--report`` suffix), one row per model plus totals.

Rows are in the source's order (manifest order, or sorted paths) whatever order workers finished
in, so the same batch gives the same report on any executor.
"""

from __future__ import annotations

import html
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from unframe.errors import UsageError
from unframe.zoo.worker import FAILED, OK, REFUSED

REPORT_VERSION = 1
STATUSES = (OK, REFUSED, FAILED)
TIME_FIELDS = ("seconds", "wall_seconds", "models_per_minute", "model_seconds")
PAGE_SUFFIXES = (".html", ".htm", ".md", ".markdown", ".json")


def totals(rows: list[dict[str, Any]], wall_seconds: float) -> dict[str, Any]:
    counts = Counter(r["status"] for r in rows)
    model_seconds = sum(float(r.get("seconds") or 0.0) for r in rows)
    return {"models": len(rows), **{s: counts.get(s, 0) for s in STATUSES},
            "model_seconds": round(model_seconds, 3), "wall_seconds": round(wall_seconds, 3),
            "models_per_minute": round(60.0 * len(rows) / wall_seconds, 2) if wall_seconds > 0 else None}


def build_report(rows: list[dict[str, Any]], meta: dict[str, Any], wall_seconds: float) -> dict[str, Any]:
    return {"unframe_zoo_report": REPORT_VERSION, **meta, "totals": totals(rows, wall_seconds), "rows": rows}


def without_times(report: dict[str, Any]) -> dict[str, Any]:
    """The report with every timing removed (what two runs of one batch must agree on)."""
    rows = [{k: v for k, v in r.items() if k not in TIME_FIELDS} for r in report["rows"]]
    tot = {k: v for k, v in report["totals"].items() if k not in TIME_FIELDS}
    return {**{k: v for k, v in report.items() if k not in ("rows", "totals", "executor")},
            "rows": rows, "totals": tot}


def check_report_path(path: Path | None) -> None:
    if path is not None and path.suffix.lower() not in PAGE_SUFFIXES:
        raise UsageError(f"--report {path}: unknown report format {path.suffix or '(no suffix)'}",
                         "use a .html, .md or .json file name")


def write_reports(report: dict[str, Any], out_dir: Path, page: Path | None) -> list[Path]:
    """``report.json`` in OUT_DIR always; the page (HTML / Markdown / JSON) at ``page``."""
    written = [_atomic_write(out_dir / "report.json", json.dumps(report, indent=2, sort_keys=True))]
    if page is not None:
        suffix = page.suffix.lower()
        if suffix in (".html", ".htm"):
            text = render_html(report)
        elif suffix in (".md", ".markdown"):
            text = render_markdown(report)
        else:
            text = json.dumps(report, indent=2, sort_keys=True)
        written.append(_atomic_write(page, text))
    return written


def _atomic_write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".unframe-tmp-{os.getpid()}-{path.name}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


# ------------------------------------------------------------------------------ cells -------
def _err(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return f"{value:.2g}" if value else "0"


def cells(row: dict[str, Any]) -> dict[str, str]:
    parity = row.get("parity") or {}
    fw = row.get("framework_parity") or {}
    fw_text = ""
    if fw:
        fw_text = _err(fw.get("max_abs")) + ("" if fw.get("status") != "failed" else " (differs)")
    return {
        "model": row["id"],
        "source opset": "" if row.get("source_opset") is None else str(row["source_opset"]),
        "result": row["status"],
        "max abs err": _err(parity.get("max_abs")) if parity else "",
        "err / scale": _err(_relative(parity)) if parity else "",
        "vs framework": fw_text,
        "inputs": row.get("inputs") or "",
        "time (s)": f"{float(row.get('seconds') or 0):.2f}",
        "reason": row.get("reason") or "",
    }


def _relative(parity: dict[str, Any]) -> Any:
    """The max abs error relative to the output's scale (its largest reference magnitude):
    element-wise relative error near zero reads as a failure when nothing is wrong."""
    err, scale = parity.get("max_abs"), parity.get("scale")
    if isinstance(err, (int, float)) and isinstance(scale, (int, float)) and scale > 0:
        return err / scale
    return err


COLUMNS = ("model", "source opset", "result", "max abs err", "err / scale", "vs framework", "inputs",
           "time (s)", "reason")


def totals_line(report: dict[str, Any]) -> str:
    t = report["totals"]
    rate = f", {t['models_per_minute']} models/min" if t.get("models_per_minute") else ""
    return (f"{t['models']} models: {t[OK]} ok, {t[REFUSED]} refused, {t[FAILED]} failed "
            f"in {t['wall_seconds']:.1f} s{rate}")


# --------------------------------------------------------------------------- renderers ------
def print_table(report: dict[str, Any], console: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console()
        if not console.is_terminal:  # a log file or CI: no width to fit, keep every column readable
            console = Console(width=160)
    style = {OK: "green", REFUSED: "yellow", FAILED: "red"}
    table = Table(title=f"zoo upgrade to opset {report.get('opset')}", show_lines=False)
    for col in COLUMNS:
        table.add_column(col, overflow="fold", max_width=60 if col == "reason" else None,
                         no_wrap=col != "reason", min_width=8 if col == "reason" else None,
                         justify="right" if col in ("source opset", "time (s)") else "left")
    for row in report["rows"]:
        c = cells(row)
        c["result"] = f"[{style.get(row['status'], 'white')}]{c['result']}[/]"
        table.add_row(*(c[k] if k == "result" else _escape(c[k]) for k in COLUMNS))
    console.print(table)
    console.print(totals_line(report))


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def render_markdown(report: dict[str, Any]) -> str:
    lines = [f"# unframe zoo upgrade: {report.get('source')} to opset {report.get('opset')}", "",
             f"{totals_line(report)}. Executor: {report.get('executor')}.", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in report["rows"]:
        c = cells(row)
        lines.append("| " + " | ".join(c[k].replace("|", "\\|").replace("\n", " ") for k in COLUMNS) + " |")
    lines.append("")
    return "\n".join(lines)


def render_html(report: dict[str, Any]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = []
    for row in report["rows"]:
        c = cells(row)
        tds = "".join(f"<td>{html.escape(c[k])}</td>" for k in COLUMNS)
        body.append(f'<tr class="{html.escape(row["status"])}">{tds}</tr>')
    title = f"unframe zoo upgrade to opset {report.get('opset')}"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; font-size: 0.9em; }}
th, td {{ border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }}
tr.ok td:nth-child(3) {{ color: #1a7f37; }} tr.refused td:nth-child(3) {{ color: #9a6700; }}
tr.failed td:nth-child(3) {{ color: #cf222e; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>Source: <code>{html.escape(str(report.get('source')))}</code>. Executor: {html.escape(str(report.get('executor')))}.</p>
<p><strong>{html.escape(totals_line(report))}</strong></p>
<table><thead><tr>{head}</tr></thead><tbody>
{chr(10).join(body)}
</tbody></table></body></html>
"""
