"""Distributed runs: only rank 0 converts; an FSDP-sharded model is refused unless asked, and
with ``gather=True`` its full weights are gathered on rank 0, converted and checked, while every
rank's live shards stay as they were and training goes on as if the call never happened (a real
two-process gloo group running FSDP2 on the CPU)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import unframe
from unframe.distributed import SkippedResult, process_rank

HERE = Path(__file__).parent


def test_ranks_other_than_zero_return_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    monkeypatch.setenv("RANK", "3")
    result = unframe.convert(model, to="onnx", sample_inputs=torch.randn(2, 4),
                             output=tmp_path / "m.onnx")
    assert isinstance(result, SkippedResult) and not result and result.rank == 3
    assert "only rank 0 converts" in result.reason
    with pytest.raises(AttributeError, match="nothing was converted"):
        result.report  # noqa: B018 - the access is what is tested
    assert list(tmp_path.iterdir()) == []
    assert model.training and all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    monkeypatch.setenv("RANK", "0")
    assert unframe.convert(model, to="onnx", sample_inputs=torch.randn(2, 4)).report


@pytest.mark.parametrize(("config", "rank"), [
    ({"cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"]}, "task": {"type": "chief", "index": 0}}, 0),
    ({"cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"]}, "task": {"type": "worker", "index": 0}}, 1),
    ({"cluster": {"worker": ["b:1", "c:1"]}, "task": {"type": "worker", "index": 0}}, 0),
    ({"cluster": {"worker": ["b:1", "c:1"]}, "task": {"type": "worker", "index": 1}}, 1),
    ({"cluster": {"ps": ["p:1"]}, "task": {"type": "ps", "index": 0}}, 1),
])
def test_keras_multi_worker_rank_from_tf_config(config: dict, rank: int,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    assert process_rank() == rank


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_fsdp_model_gathered_on_rank_zero_when_asked(tmp_path: Path) -> None:
    port = _free_port()
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, str(HERE / "fsdp_rank.py"), str(tmp_path)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=240)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("the two-rank FSDP run did not finish in 240 s")
    assert all(p.returncode == 0 for p in procs), "\n".join(log[-3000:] for log in logs)
    r0, r1 = (json.loads((tmp_path / f"rank{i}.json").read_text()) for i in range(2))

    # not asked: rank 0 refuses with what to do, exit 4; rank 1 returns at once
    assert r0["without_gather"]["exit_code"] == 4 and "gather=True" in r0["without_gather"]["message"]
    assert r1["without_gather"] == {"type": "SkippedResult", "truthy": False}
    assert not (tmp_path / "refused.onnx").exists()
    # asked: rank 0 converts the gathered weights, checked by parity and against the unsharded twin
    assert r0["result"]["type"] == "ConversionResult" and r0["result"]["parity"]
    assert r1["result"] == {"type": "SkippedResult", "truthy": False, "path": None, "parity": None}
    assert r0["scale"] > 0.3, "outputs near zero would prove nothing"
    assert r0["max_abs"] < 1e-5 * max(1.0, r0["scale"])
    # every rank's shards, flags and requires_grad as they were; training goes on identically
    assert r0["unchanged"] and r1["unchanged"]
    for report in (r0, r1):
        for sharded, twin in report["losses"]:
            assert sharded == pytest.approx(twin, rel=1e-5, abs=1e-6)


def test_a_file_converts_on_every_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI and the zoo convert files where they are started, $RANK or not."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    first = unframe.convert(model, to="onnx", sample_inputs=torch.randn(2, 4), output=tmp_path / "m.onnx")
    monkeypatch.setenv("RANK", "2")
    again = unframe.convert_opset(first.path, 18, output=tmp_path / "m18.onnx")
    assert again.report and (tmp_path / "m18.onnx").exists()
