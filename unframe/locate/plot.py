"""The error-growth plot: each value's error (relative to its scale, log axis) along the path from
the inputs through the culprit to the output, as a PNG (written with zlib, no plotting library)
and a small self-contained HTML page (inline SVG; hover a point for its value, node and error).
"""

from __future__ import annotations

import html
import math
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

from unframe.locate.search import ValueDiff

WIDTH, HEIGHT = 720, 360
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 16, 28
FLOOR, CEIL = -12, 3  # log10 of the error axis (an infinite error is drawn at the top)


def _y(error: float) -> float:
    """Pixel row of an error on the log axis."""
    if not math.isfinite(error):
        level = CEIL
    else:
        level = min(max(math.log10(error), FLOOR), CEIL) if error > 0 else FLOOR
    return TOP + (CEIL - level) / (CEIL - FLOOR) * (HEIGHT - TOP - BOTTOM)


def _x(i: int, n: int) -> float:
    return LEFT + (i / max(n - 1, 1)) * (WIDTH - LEFT - RIGHT)


def write_plot(path: Sequence[ValueDiff], culprit: str, tolerance: float, folder: Path,
               labels: dict[str, str] | None = None) -> dict[str, str]:
    """``error.png`` and ``error.html`` in ``folder``; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    png, page = folder / "error.png", folder / "error.html"
    png.write_bytes(render_png(path, culprit, tolerance))
    page.write_text(render_html(path, culprit, tolerance, labels or {}), encoding="utf-8")
    return {"plot": str(png), "html": str(page)}


# ---------------------------------------------------------------------------------- PNG ------
class _Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(b"\xff" * (width * height * 3))

    def dot(self, x: float, y: float, color: tuple[int, int, int]) -> None:
        xi, yi = int(round(x)), int(round(y))
        if 0 <= xi < self.width and 0 <= yi < self.height:
            at = (yi * self.width + xi) * 3
            self.pixels[at:at + 3] = bytes(color)

    def line(self, x0: float, y0: float, x1: float, y1: float, color: tuple[int, int, int],
             dash: int = 0) -> None:
        steps = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
        for s in range(steps + 1):
            if dash and (s // dash) % 2:
                continue
            t = s / steps
            self.dot(x0 + (x1 - x0) * t, y0 + (y1 - y0) * t, color)

    def disc(self, x: float, y: float, r: int, color: tuple[int, int, int]) -> None:
        for dy in range(-r, r + 1):
            for dx in range(-r, r + 1):
                if dx * dx + dy * dy <= r * r:
                    self.dot(x + dx, y + dy, color)

    def text(self, x: int, y: int, text: str, color: tuple[int, int, int]) -> None:
        for k, ch in enumerate(text):
            rows = _FONT.get(ch)
            if rows is None:
                continue
            for r, bits in enumerate(rows):
                for c in range(3):
                    if bits >> (2 - c) & 1:
                        self.dot(x + 4 * k + c, y + r, color)

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(self.pixels[r * self.width * 3:(r + 1) * self.width * 3])
                       for r in range(self.height))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(
                ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


# 3x5 glyphs for the axis labels ("1e-6")
_FONT = {
    "0": (7, 5, 5, 5, 7), "1": (2, 6, 2, 2, 7), "2": (7, 1, 7, 4, 7), "3": (7, 1, 7, 1, 7),
    "4": (5, 5, 7, 1, 1), "5": (7, 4, 7, 1, 7), "6": (7, 4, 7, 5, 7), "7": (7, 1, 1, 1, 1),
    "8": (7, 5, 7, 5, 7), "9": (7, 5, 7, 1, 7), "e": (0, 7, 7, 4, 7), "-": (0, 0, 7, 0, 0),
}
GRID, AXIS, LINE, BAD, TOL = (225, 225, 225), (90, 90, 90), (31, 119, 180), (214, 39, 40), (150, 150, 150)


def render_png(path: Sequence[ValueDiff], culprit: str, tolerance: float) -> bytes:
    c = _Canvas(WIDTH, HEIGHT)
    for level in range(FLOOR, CEIL + 1, 3):
        y = _y(10.0 ** level)
        c.line(LEFT, y, WIDTH - RIGHT, y, GRID)
        c.text(8, int(y) - 2, f"1e{level}", AXIS)
    c.line(LEFT, TOP, LEFT, HEIGHT - BOTTOM, AXIS)
    c.line(LEFT, HEIGHT - BOTTOM, WIDTH - RIGHT, HEIGHT - BOTTOM, AXIS)
    if tolerance > 0:
        c.line(LEFT, _y(tolerance), WIDTH - RIGHT, _y(tolerance), TOL, dash=4)
    points = [(_x(i, len(path)), _y(d.error)) for i, d in enumerate(path)]
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        c.line(x0, y0, x1, y1, LINE)
    for (x, y), d in zip(points, path, strict=True):
        c.disc(x, y, 4 if d.name == culprit else 2, BAD if d.name == culprit or not d.ok else LINE)
    return c.png()


# --------------------------------------------------------------------------------- HTML ------
def render_html(path: Sequence[ValueDiff], culprit: str, tolerance: float,
                labels: dict[str, str]) -> str:
    esc = html.escape
    points = [(_x(i, len(path)), _y(d.error), d) for i, d in enumerate(path)]
    grid = "".join(
        f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{_y(10.0 ** k):.1f}" y2="{_y(10.0 ** k):.1f}" '
        f'stroke="#e1e1e1"/><text x="4" y="{_y(10.0 ** k) + 4:.1f}" font-size="11">1e{k}</text>'
        for k in range(FLOOR, CEIL + 1, 3))
    poly = " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in points)
    dots = "".join(
        f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{6 if d.name == culprit else 3}" '
        f'fill="{"#d62728" if d.name == culprit or not d.ok else "#1f77b4"}"><title>'
        f'{esc(d.name)} ({esc(labels.get(d.name, ""))}): error {d.error:.3g} of scale '
        f'{d.scale:.3g}</title></circle>' for x, y, d in points)
    tol = (f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{_y(tolerance):.1f}" '
           f'y2="{_y(tolerance):.1f}" stroke="#999" stroke-dasharray="4"/>' if tolerance > 0 else "")
    rows = "".join(
        f"<tr{' class=bad' if d.name == culprit else ''}><td>{i}</td><td>{esc(d.name)}</td>"
        f"<td>{esc(labels.get(d.name, ''))}</td><td>{d.error:.3g}</td><td>{d.max_abs:.3g}</td>"
        f"<td>{d.scale:.3g}</td><td>{'ok' if d.ok else 'DIVERGES'}</td></tr>"
        for i, d in enumerate(path))
    return f"""<!doctype html><meta charset="utf-8"><title>unframe: error along the path</title>
<style>body{{font:14px sans-serif;margin:16px}}td,th{{padding:2px 8px;text-align:left}}
tr.bad{{background:#fde0e0}}</style>
<h1>Error along the path to the first diverging value</h1>
<p>Each point is a value both stages computed, in the order the graph computes them; its error is
max |difference| / max |reference| (log scale). The dashed line is the stage's tolerance; the
large red point is <b>{esc(culprit)}</b>, the first value that exceeds it while its inputs agree.</p>
<svg width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">{grid}{tol}
<polyline points="{poly}" fill="none" stroke="#1f77b4"/>{dots}</svg>
<table><tr><th>#</th><th>value</th><th>node</th><th>error / scale</th><th>max abs</th>
<th>scale</th><th></th></tr>{rows}</table>
"""
