"""Shared fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import pytest
from spine_utils import mlp_model

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


@pytest.fixture
def mlp_path(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), path)
    return path
