"""A few seconds of each fuzz harness under atheris (coverage-guided, libFuzzer's hang and
memory limits). atheris is not part of `make test` (the 'fuzz' extra: no wheels for every
platform), so these run only where it is installed and UNFRAME_FUZZ_SMOKE=1 asks for them (each
harness spends 10 to 30 s importing its frameworks). The campaigns themselves (100,000
executions per harness) run from bench/fuzz/run.py; tests/fuzz/test_corpus.py replays what they
found in every test run."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "fuzz"))

import harnesses  # noqa: E402

SECONDS = 3


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None,
                    reason="atheris is not installed (pip install -e '.[fuzz]')")
@pytest.mark.skipif(os.environ.get("UNFRAME_FUZZ_SMOKE") != "1",
                    reason="fuzz smoke runs take minutes: set UNFRAME_FUZZ_SMOKE=1 to run them")
@pytest.mark.parametrize("name", sorted(harnesses.HARNESSES))
def test_harness_smoke(name: str, tmp_path: Path):
    missing = harnesses.HARNESSES[name].available()
    if missing:
        pytest.skip(f"the {name} harness {missing}")
    env = dict(os.environ, UNFRAME_FUZZ_OUT=str(tmp_path), PYTHONPATH=str(ROOT))
    # the timeout is generous: this checks the harness runs clean, the campaigns hold it to 10 s
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "fuzz" / "run.py"), name, "--seconds",
                           str(SECONDS), "--timeout", "120"], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["exit_code"] == 0 and not result["artifacts"], Path(result["log"]).read_text()[-3000:]
    assert result["executions"] > 0
