"""Every registered adapter is exercised by a node-case path declared in an adapter family test."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "adapters"))

from nodecases import case, convert  # noqa: E402

from unframe.version_converter import ADAPTERS  # noqa: E402

FAMILIES = sorted(p.stem for p in (Path(__file__).parent / "adapters").glob("test_*.py"))


def test_every_registered_adapter_fires_in_a_family_test() -> None:
    fired: set[str] = set()
    for family in FAMILIES:
        module = importlib.import_module(family)
        # adapters without onnx node cases (e.g. ai.onnx.ml's old tree operators) are fired by the
        # family's own models; the module lists them in EXERCISED and its tests assert they fire
        fired |= set(getattr(module, "EXERCISED", ()))
        for name, targets, freeze in module.PAIRS:
            model = case(name, freeze).model
            for target in targets:
                model, result = convert(model, target)
                fired |= set(result.adapters_used)
    registered = {str(key) for key in ADAPTERS.keys()}
    missing = sorted(registered - fired)
    assert not missing, f"registered adapters no test exercises: {missing}"
