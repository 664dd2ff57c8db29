"""One model hanging or crashing its worker fails that model only; the batch goes on."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.zoo.conftest import TARGET, clip_op10, make_zoo, relu_add_op9, slow_loop_op11
from unframe.zoo.runner import UpgradeOptions, upgrade_zoo

LAYOUT = [("a_loop.onnx", slow_loop_op11), ("cnn/relu_op9.onnx", relu_add_op9), ("z_clip.onnx", clip_op10)]


def _statuses(report: dict) -> dict[str, str]:
    return {r["id"]: r["status"] for r in report["rows"]}


def test_hanging_model_times_out_and_the_rest_run(tmp_path: Path) -> None:
    src = make_zoo(tmp_path / "src", LAYOUT)
    opts = UpgradeOptions(opset=TARGET, out_dir=tmp_path / "out", workers=2, timeout=4, progress=False)
    report = upgrade_zoo(src, opts).report
    assert _statuses(report) == {"a_loop.onnx": "failed", "cnn/relu_op9.onnx": "ok", "z_clip.onnx": "ok"}
    assert "timed out after 4 s" in report["rows"][0]["reason"]
    assert not (tmp_path / "out" / "a_loop.onnx").exists()


def _worker_processes() -> list[psutil.Process]:
    """Per-model processes: children of this process's multiprocessing forkserver."""
    found = []
    for child in psutil.Process().children():
        try:
            if any("forkserver" in part for part in child.cmdline()):
                found += child.children()
        except psutil.NoSuchProcess:
            pass
    return found


def test_crashed_worker_fails_that_model_only(tmp_path: Path) -> None:
    src = make_zoo(tmp_path / "src", LAYOUT)
    opts = UpgradeOptions(opset=TARGET, out_dir=tmp_path / "out", workers=1, timeout=120, progress=False)
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(report=upgrade_zoo(src, opts).report))
    thread.start()
    deadline = time.monotonic() + 60
    victims: list[psutil.Process] = []
    while not victims and time.monotonic() < deadline:
        time.sleep(0.2)
        victims = _worker_processes()
    if not victims:
        thread.join(130)
        pytest.fail("no per-model worker process appeared")
    time.sleep(1.0)  # let it get into the endless Loop
    victims[0].kill()  # as the OOM killer or a segfault would end it
    thread.join(120)
    report = box["report"]
    assert _statuses(report) == {"a_loop.onnx": "failed", "cnn/relu_op9.onnx": "ok", "z_clip.onnx": "ok"}
    assert "worker process died (SIGKILL)" in report["rows"][0]["reason"]
