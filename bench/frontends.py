"""Frontend overhead: unframe.convert (validation off) against the bare exporter call on the
same models, per framework, in one run. Each framework's cases live in bench/frontends_<fw>.py
(a ``run(quick) -> list[dict]`` function); this script runs those that are installed and prints
one table. Target: time ratio <= 1.15x the bare exporter.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

MODULES = {"torch": "frontends_torch", "tf": "frontends_tf", "sklearn": "frontends_sklearn"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer models and repetitions")
    ap.add_argument("--only", choices=sorted(MODULES), action="append")
    args = ap.parse_args()
    rows: list[dict] = []
    for fw, mod in MODULES.items():
        if args.only and fw not in args.only:
            continue
        try:
            module = importlib.import_module(mod)
            rows.extend({"framework": fw, **r} for r in module.run(args.quick))
        except ImportError as exc:
            print(f"{fw}: skipped ({exc})")
        except Exception:
            traceback.print_exc()
            print(f"{fw}: FAILED")
    if not rows:
        return
    keys = [k for k in rows[0] if k != "framework"]
    print("\nframework  " + "  ".join(f"{k:>14}" for k in keys))
    for r in rows:
        print(f"{r['framework']:<10} " + "  ".join(f"{_fmt(r.get(k)):>14}" for k in keys))


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


if __name__ == "__main__":
    main()
