"""Quiet Python API (issue 36): ``unframe.convert(nn.Module)`` printed torch.export's partial FX
graph of every failed attempt on stderr (thousands of lines before the fallback at a real model),
where the CLI prints none. The listings go to the debug log (logger ``unframe.torch``) instead.
Checked on file descriptor 2 itself (capfd), where both Python's and native writes land."""

from __future__ import annotations

import logging
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="needs torch")
pytest.importorskip("onnxscript", reason="needs onnxscript (torch.onnx dynamo exporter)")

from torch import nn  # noqa: E402

import unframe  # noqa: E402


class DataDependent(nn.Module):
    """dynamo refuses the branch on a value (both torch.export attempts print their graph);
    the TorchScript exporter records the branch the samples take."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: Any) -> Any:
        h = self.lin(x)
        if h.sum() > 0:
            return h * 2.0
        return h - 1.0


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_failed_dynamo_attempts_print_nothing_on_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    torch.manual_seed(0)
    model = DataDependent().eval()
    with torch.no_grad():
        model.lin.bias.fill_(1.0)  # the samples take the first branch
    logger, kept = logging.getLogger("unframe.torch"), Kept()
    level = logger.level
    logger.addHandler(kept)
    logger.setLevel(logging.DEBUG)
    capfd.readouterr()
    try:
        result = unframe.convert(model, to="onnx", sample_inputs=torch.rand(2, 4))
    finally:
        logger.removeHandler(kept)
        logger.setLevel(level)
    out, err = capfd.readouterr()
    assert any("retried with the TorchScript exporter" in n for n in result.notes), result.notes
    assert "GraphModule" not in err and "def forward" not in err, err[:2000]
    assert err.strip() == "", err[:2000]
    assert "def forward" not in out
    assert "def forward" in "\n".join(kept.messages)  # the listing is in the debug log
