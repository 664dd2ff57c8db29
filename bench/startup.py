"""Startup cost: `unframe --help` and `import unframe` against a bare `python -c pass`, in one run.

Target: `unframe --help` under 0.5 s. Prints the medians and the ratios to the anchor.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _time(cmd: list[str], runs: int) -> float:
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    exe = shutil.which("unframe") or str(Path(sys.executable).parent / "unframe")
    rows = [
        ("python -c pass (anchor)", [sys.executable, "-c", "pass"]),
        ("python -c 'import unframe'", [sys.executable, "-c", "import unframe"]),
        ("python -c 'import unframe; unframe.convert'", [sys.executable, "-c", "import unframe; unframe.convert"]),
        ("unframe --help", [exe, "--help"]),
    ]
    _time(rows[0][1], 2)  # warm the file cache
    base = None
    print(f"{'command':<48} {'median s':>9} {'x anchor':>9}")
    for label, cmd in rows:
        t = _time(cmd, args.runs)
        base = base or t
        print(f"{label:<48} {t:9.3f} {t / base:9.2f}")


if __name__ == "__main__":
    main()
