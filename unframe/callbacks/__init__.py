"""Training callbacks that convert the model as it trains, in a background process.

- ``unframe.callbacks.keras.KerasConvert``: a ``keras.callbacks.Callback``;
- ``unframe.callbacks.lightning.LightningConvert``: a PyTorch Lightning ``Callback``;
- ``unframe.callbacks.hf.HFConvert``: a Hugging Face ``TrainerCallback``.

They share ``_core``: a CPU snapshot of the weights per conversion, a background process with
at most one job waiting, failures logged (not raised unless ``raise_errors=True``), and only
rank 0 converting. Each module imports its framework; importing this package imports none.
"""

from __future__ import annotations

from typing import Any

_WHERE = {"KerasConvert": "keras", "LightningConvert": "lightning", "HFConvert": "hf"}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"unframe.callbacks.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'unframe.callbacks' has no attribute {name!r}")
