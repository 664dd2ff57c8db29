"""The Dask path: a LocalCluster with two workers gives the same report as the local pool; an
unreachable scheduler is a clear error that leaves nothing behind."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.zoo.conftest import EXPECTED, TARGET, written_models
from unframe.errors import InputError
from unframe.zoo.report import without_times
from unframe.zoo.runner import UpgradeOptions, upgrade_zoo

pytest.importorskip("dask.distributed", reason="needs dask[distributed]")


def test_dask_local_cluster_matches_local_pool(small_zoo: Path, tmp_path: Path) -> None:
    local = upgrade_zoo(small_zoo, UpgradeOptions(opset=TARGET, out_dir=tmp_path / "local", workers=2,
                                                  progress=False, timeout=120)).report
    dask = upgrade_zoo(small_zoo, UpgradeOptions(opset=TARGET, out_dir=tmp_path / "dask", workers=2,
                                                 executor="dask", progress=False, timeout=120)).report
    assert "LocalCluster (2 workers)" in dask["executor"]
    assert {r["id"]: r["status"] for r in dask["rows"]} == EXPECTED
    assert without_times(dask) == without_times(local)
    assert written_models(tmp_path / "dask") == written_models(tmp_path / "local")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_scheduler_is_clear_and_leaves_no_state(small_zoo: Path, tmp_path: Path) -> None:
    address = f"tcp://127.0.0.1:{_closed_port()}"
    out = tmp_path / "out"
    with pytest.raises(InputError, match="can't reach the Dask scheduler") as info:
        upgrade_zoo(small_zoo, UpgradeOptions(opset=TARGET, out_dir=out, executor="dask", scheduler=address,
                                              progress=False))
    assert address in str(info.value) and "\n" not in str(info.value)
    assert not out.exists()
