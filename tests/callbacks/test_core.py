"""The callbacks' shared core with a real background process: at most one job waits (a newer
one supersedes it), failures are logged and raised only when asked, and a snapshot that would
not fit in memory is refused before copying."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest
import torch

import unframe.preserve as preserve
from tests.callbacks.models import TinyNet, perturbed
from unframe.callbacks._core import (
    BackgroundConverter,
    ConvertOnSchedule,
    Job,
    logged_failure,
    torch_recipe,
    torch_snapshot,
)
from unframe.errors import UnframeError, UsageError


@pytest.mark.slow
def test_one_job_waits_a_newer_one_supersedes_it_and_failures_are_raised_when_asked(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    torch.manual_seed(0)
    model = perturbed(TinyNet()).eval()
    x = torch.randn(4, 8)
    # A zero tolerance: float32 onnxruntime differs from torch in the last bits, so parity fails.
    converter = BackgroundConverter(torch_recipe(model, x), {"atol": 0.0, "rtol": 0.0},
                                    raise_errors=True)
    caplog.set_level(logging.INFO, logger="unframe.callbacks")
    try:
        converter.start()
        for i in range(3):  # back to back: the first runs, the second waits, the third replaces it
            with torch.no_grad():
                model.l1.weight.add_(0.1)
            converter.submit(Job(f"job{i}", torch_snapshot(model, "TinyNet"), tmp_path, ["onnx"], i))
            if i == 0:  # let the worker take the first job before the next ones arrive
                with converter._cv:
                    converter._cv.wait_for(lambda: converter._busy, timeout=120)
        outcomes = converter.finish(timeout=300)
    except UnframeError as exc:  # raise_errors: the first failure comes out of finish()'s poll
        assert "parity" in str(exc) and exc.exit_code == 5
        outcomes = converter.outcomes
    assert converter.superseded == ["job1"]
    assert [o.tag for o in outcomes] == ["job0", "job2"]
    assert all(o.targets["onnx"].exit_code == 5 and not o.ok for o in outcomes)
    assert sum("parity failed" in r.getMessage() for r in caplog.records) == 2
    assert sum("superseded" in r.getMessage() for r in caplog.records) == 1
    assert list(tmp_path.iterdir()) == []  # a failed parity check writes nothing


def test_failure_without_raise_errors_is_logged_and_training_goes_on(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = perturbed(TinyNet()).train()
    schedule = ConvertOnSchedule("onnx", dirpath=tmp_path, background=False, atol=0.0, rtol=0.0,
                                 sample_inputs=torch.randn(4, 8))
    schedule.begin(0, lambda: None, model, tmp_path)
    schedule.convert("epoch=0-step=1", 1, lambda: None)  # inline: the live model, guarded
    assert [o.ok for o in schedule.poll()] == [False] and model.training
    assert list(tmp_path.iterdir()) == []


def test_a_snapshot_that_would_not_fit_is_refused_before_copying(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = TinyNet()
    monkeypatch.setattr(preserve, "available_memory", lambda: 1000)
    with pytest.raises(UsageError, match="background conversion"):
        torch_snapshot(model, "TinyNet")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with logged_failure("this conversion was skipped", raise_errors=False):
            torch_snapshot(model, "TinyNet")
    assert len(caught) == 1 and "skipped" in str(caught[0].message)


def test_importing_the_callbacks_package_imports_no_framework() -> None:
    import subprocess
    import sys

    code = ("import sys, unframe.callbacks as c; assert sorted(c.__all__) == "
            "['HFConvert', 'KerasConvert', 'LightningConvert']; heavy = [m for m in ('torch', "
            "'keras', 'tensorflow', 'lightning', 'transformers') if m in sys.modules]; "
            "assert not heavy, heavy")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
