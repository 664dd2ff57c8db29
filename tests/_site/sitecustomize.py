"""Loaded at start-up by every Python process the tests spawn (conftest puts this folder on
PYTHONPATH): the conversion workers of unframe.callbacks import transformers, which imports
torchvision, which needs model_zoo/build/torchvision_shim.py with the CPU torch pin."""

import importlib.util
import sys
from pathlib import Path

_path = Path(__file__).resolve().parents[2] / "model_zoo" / "build" / "torchvision_shim.py"
_spec = importlib.util.spec_from_file_location("torchvision_shim", _path)
if _spec is not None and _spec.loader is not None and "torchvision_shim" not in sys.modules:
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["torchvision_shim"] = _module
    _spec.loader.exec_module(_module)
    _module.install_import_hook()
