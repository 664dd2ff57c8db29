"""Shared by the adapter family tests: import the node-case helpers from tests/version_converter."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nodecases import check_path  # noqa: E402

__all__ = ["check_path"]
