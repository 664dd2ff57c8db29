"""A few seconds of every fuzz harness in every test run, with the plain engine (random
structure-aware mutation of seeds built on the spot, a fixed random seed, all harnesses in one
process so their frameworks are imported once); and, where atheris is installed and
UNFRAME_FUZZ_SMOKE=1 asks for them, a few seconds of each under atheris (coverage-guided,
libFuzzer's hang and memory limits; each harness spends 10 to 30 s importing its frameworks in a
process of its own). The campaigns themselves (100,000 executions per harness) run from
bench/fuzz/run.py; tests/fuzz/test_corpus.py replays what they found."""

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
PLAIN_SECONDS = 2


def test_every_harness_runs_a_few_seconds_with_the_plain_engine(tmp_path: Path):
    """Fails on an untyped exception, a crash of the fuzzing process, an input that runs over the
    per-input timeout (generous here: CI shares its cores) or a peak RSS over 2 GB."""
    env = dict(os.environ, UNFRAME_FUZZ_OUT=str(tmp_path), PYTHONPATH=str(ROOT))
    seeds = subprocess.run([sys.executable, str(ROOT / "bench" / "fuzz" / "seeds.py")],
                           capture_output=True, text=True, env=env, timeout=600)
    assert seeds.returncode == 0, seeds.stderr[-3000:]
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "fuzz" / "run.py"), "all", "--engine", "plain",
                           "--seconds", str(PLAIN_SECONDS), "--timeout", "60", "--seed", "1"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, (proc.stdout[-1500:], proc.stderr[-3000:])
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    skipped = {r["harness"]: r["skipped"] for r in results if "skipped" in r}
    ran = {r["harness"]: r for r in results if "skipped" not in r}
    assert set(ran) | set(skipped) == set(harnesses.HARNESSES)
    assert len(ran) >= len(harnesses.HARNESSES) - 2, f"harnesses skipped: {skipped}"
    for name, result in ran.items():
        assert result["executions"] > 0, name
        assert result["untyped"] == 0 and result["peak_rss_mb"] < 2048, (name, result)


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
