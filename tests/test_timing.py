"""Each stage's seconds told apart into the wrapped tools' own and unframe's (issue 39):
``unframe.timing`` and the ``timing_split`` a result and ``--json`` carry.

Controls: before this change a result had ``timings`` only (no ``timing_split``), so every
assertion on the split fails; the unit tests fail on any clock that counts a nested tool twice,
drops the check bucket or records outside a stage."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from unframe import timing


def test_nested_tool_blocks_count_once_in_the_outer_one() -> None:
    with timing.stage_clock() as clock:
        with timing.tool("outer"):
            time.sleep(0.02)
            with timing.tool("inner"):
                time.sleep(0.02)
        with timing.tool("inner"):
            time.sleep(0.01)
    assert set(clock.work.tools) == {"outer", "inner"}
    assert clock.work.tools["outer"] >= 0.04
    assert 0.01 <= clock.work.tools["inner"] < 0.02  # only the block outside "outer"


def test_a_check_goes_to_its_own_bucket() -> None:
    with timing.stage_clock() as clock:
        with timing.tool("exporter"):
            time.sleep(0.01)
        with timing.checking():
            with timing.tool("runtime"):
                time.sleep(0.02)
            time.sleep(0.01)  # the comparison: unframe's
    assert set(clock.work.tools) == {"exporter"} and set(clock.check.tools) == {"runtime"}
    assert clock.check.seconds >= clock.check.tools["runtime"] + 0.01
    part = timing.split(clock.check.seconds, clock.check)
    assert part["unframe"] == pytest.approx(clock.check.seconds - clock.check.tools["runtime"], abs=1e-3)


def test_outside_a_stage_nothing_is_recorded() -> None:
    with timing.tool("x"), timing.checking():
        pass
    with timing.stage_clock() as clock:
        pass
    assert clock.work.tools == {} and clock.check.tools == {}


def test_timed_runner_methods_are_timed_once_per_call() -> None:
    from unframe.validate.runner import Runner

    class Slow(Runner):
        name = "slow runtime 1.0"

        def run(self, feeds):
            time.sleep(0.01)
            return {}

    class Wrapper(Runner):
        name = "wrapper"
        timed = False

        def __init__(self):
            self.inner = Slow()

        def run(self, feeds):
            return self.inner.run(feeds)

    with timing.stage_clock() as clock:
        Wrapper().run({})
        Wrapper().run({})
    assert list(clock.work.tools) == ["slow runtime 1.0"]
    assert clock.work.tools["slow runtime 1.0"] >= 0.02


def _model():
    torch = pytest.importorskip("torch", reason="needs the torch extra")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).eval()
    return model, torch.randn(4, 6)


def test_a_conversion_splits_every_stage_into_tools_and_unframe() -> None:
    import unframe

    model, x = _model()
    result = unframe.convert(model, to="onnx", sample_inputs=x)
    split = result.timing_split
    for key, seconds in result.timings.items():  # the same seconds, told apart
        assert split[key]["seconds"] == pytest.approx(seconds, abs=1e-3), key
        assert split[key]["unframe"] >= 0
        assert sum(split[key]["tools"].values()) <= split[key]["seconds"] + 1e-3, key
    assert split["export"]["tools"]["torch.onnx.export (dynamo)"] > 0
    assert any(name.startswith("torch ") and name.endswith(" eager") for name in split["parity:export"]["tools"])
    total = split["total"]
    assert total["unframe"] + sum(total["tools"].values()) == pytest.approx(total["seconds"], abs=2e-3)
    assert result.to_dict()["timing_split"] == split


def test_the_cli_json_carries_the_split(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="needs the torch extra")
    model, x = _model()
    program = torch.export.export(model, (x,))
    torch.export.save(program, str(tmp_path / "m.pt2"))
    np.save(tmp_path / "x.npy", x.numpy())
    proc = subprocess.run([sys.executable, "-m", "unframe.cli.main", "convert", str(tmp_path / "m.pt2"),
                           "--to", "onnx", "-o", str(tmp_path / "m.onnx"), "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    split = data["timing_split"]
    assert split["load"]["tools"].get("torch.export.load", 0) > 0
    assert split["export"]["tools"]["torch.onnx.export (dynamo)"] > 0
    assert "onnxruntime" in " ".join(split["parity:export"]["tools"])
