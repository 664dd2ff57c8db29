"""Distributed training runs: which rank this process is, and what the ranks other than 0 get.

In a distributed run only rank 0 converts a live model (``unframe.convert`` and the callbacks
alike); the other ranks return at once with a ``SkippedResult``. A file path converts on every
process that asks (the CLI and the zoo run where they are started). The rank comes from, in order:
torch.distributed when it is initialized; ``$RANK`` (torchrun, Lightning, accelerate, DeepSpeed);
``TF_CONFIG`` (Keras multi-worker: the chief, or worker 0 when there is no chief, is rank 0).
Nothing here imports a framework: torch.distributed is read only if the script imported it.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def process_rank() -> int:
    """This process's global rank in a distributed run, 0 outside one."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    rank = os.environ.get("RANK", "").strip()
    if rank.isdigit():
        return int(rank)
    return _tf_config_rank(os.environ.get("TF_CONFIG", ""))


def _tf_config_rank(text: str) -> int:
    try:
        config = json.loads(text) if text.strip() else {}
        task = config.get("task") or {}
        kind, index = str(task.get("type", "")), int(task.get("index", 0))
    except (ValueError, TypeError, AttributeError):
        return 0
    if kind == "chief":
        return 0
    if kind == "worker":
        has_chief = bool((config.get("cluster") or {}).get("chief"))
        return index + 1 if has_chief else index
    return 1 if kind else 0  # a parameter server or an evaluator: never converts


@dataclass(frozen=True)
class SkippedResult:
    """What ``unframe.convert`` returns on a rank other than 0: nothing converted, nothing
    written. Falsy, so ``if result:`` reads as "this process has a product"."""

    rank: int
    reason: str = ""
    path: Path | None = None
    written: list[Path] = field(default_factory=list)
    skipped: bool = True

    def __post_init__(self) -> None:
        if not self.reason:
            object.__setattr__(self, "reason", f"rank {self.rank} of a distributed run: "
                                               "only rank 0 converts")

    def __bool__(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"{name}: nothing was converted on this process ({self.reason})")
