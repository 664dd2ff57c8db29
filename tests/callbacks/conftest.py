"""Callback tests import their framework through ``framework()``: a skip names why when it
can't be imported here."""

from __future__ import annotations

import importlib
from typing import Any

import pytest


def framework(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - e.g. a torchvision built for another torch
        pytest.skip(f"{name} can't be imported here: {type(exc).__name__}: {exc}")
