"""kill -9 mid-run, then --resume: the outputs and the report equal an uninterrupted run's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.zoo.conftest import EXPECTED, TARGET, make_zoo, written_models
from unframe.errors import UsageError
from unframe.zoo.journal import journal_path, read_journal
from unframe.zoo.report import without_times
from unframe.zoo.runner import UpgradeOptions, upgrade_zoo

ROOT = Path(__file__).resolve().parents[2]


def _cmd(src: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "unframe.cli.main", "zoo", "upgrade", str(src), "--opset", str(TARGET),
            "-o", str(out), "-j", "1", "--no-progress", *extra]


def _run(src: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(_cmd(src, out, *extra), cwd=ROOT, capture_output=True, text=True, timeout=240)


def _done_count(out: Path) -> int:
    path = journal_path(out)
    return len(read_journal(path).done) if path.exists() else 0


def test_kill_9_then_resume_equals_uninterrupted_run(tmp_path: Path) -> None:
    src = make_zoo(tmp_path / "src")
    total = len(EXPECTED)
    killed = tmp_path / "killed"

    proc = subprocess.Popen(_cmd(src, killed), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while _done_count(killed) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole run, workers included, at once
    proc.wait()
    interrupted = read_journal(journal_path(killed))
    assert 2 <= len(interrupted.done) < total, "the run was not killed mid-way"
    assert not (killed / "report.json").exists()

    resumed = _run(src, killed, "--resume", "-j", "2")
    assert resumed.returncode == 9, resumed.stderr  # the corrupt model fails: exit code 9
    fresh = tmp_path / "fresh"
    uninterrupted = _run(src, fresh, "-j", "2")
    assert uninterrupted.returncode == 9, uninterrupted.stderr

    final = read_journal(journal_path(killed))
    assert set(final.done) == set(EXPECTED)
    for model_id, result in interrupted.done.items():
        assert final.done[model_id] == result  # done models were skipped, not redone
    lines = [json.loads(x) for x in journal_path(killed).read_text().splitlines() if x.strip()]
    assert sum(r["event"] == "run" for r in lines) == 1

    assert written_models(killed) == written_models(fresh)
    assert len(written_models(fresh)) == list(EXPECTED.values()).count("ok")
    report_a = json.loads((killed / "report.json").read_text())
    report_b = json.loads((fresh / "report.json").read_text())
    assert without_times(report_a) == without_times(report_b)
    assert report_a["totals"]["models"] == total
    assert not list(killed.rglob(".unframe-tmp-*"))


def test_resume_with_other_options_is_refused(small_zoo: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    upgrade_zoo(small_zoo, UpgradeOptions(opset=TARGET, out_dir=out, workers=2, progress=False))
    before = journal_path(out).read_bytes()
    with pytest.raises(UsageError, match="opset=17") as info:
        upgrade_zoo(small_zoo, UpgradeOptions(opset=16, out_dir=out, resume=True, progress=False))
    assert "\n" not in str(info.value)
    assert journal_path(out).read_bytes() == before
