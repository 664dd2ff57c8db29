"""Shared fixtures."""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import onnx
import pytest
from spine_utils import mlp_model

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# what unframe keeps between processes (unframe.cache) goes to a folder of this test process
# (and the processes it spawns), not the user's ~/.cache: each run starts with nothing remembered
os.environ.setdefault("UNFRAME_CACHE_DIR", tempfile.mkdtemp(prefix="unframe-test-cache-"))


def _torchvision_shim() -> None:
    """torchvision's registry wheel needs model_zoo/build/torchvision_shim.py to import with the
    CPU torch pin, and transformers imports torchvision whenever it is installed: hook it for
    the whole test process (nothing is imported until torchvision is)."""
    path = Path(__file__).resolve().parents[1] / "model_zoo" / "build" / "torchvision_shim.py"
    spec = importlib.util.spec_from_file_location("torchvision_shim", path)
    if spec is None or spec.loader is None or "torchvision_shim" in sys.modules:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["torchvision_shim"] = module
    spec.loader.exec_module(module)
    module.install_import_hook()


_torchvision_shim()
# the same for the processes the tests spawn (callbacks' conversion workers): tests/_site holds a
# sitecustomize that installs the hook at their start-up
_SITE = str(Path(__file__).resolve().parent / "_site")
os.environ["PYTHONPATH"] = os.pathsep.join(
    [_SITE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])


@pytest.fixture
def mlp_path(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), path)
    return path
