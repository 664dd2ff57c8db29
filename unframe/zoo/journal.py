"""An append-only JSONL journal of a batch run, fsync'd line by line, so that a run killed at any
point (even ``kill -9``) can resume: models with a ``done`` record are skipped, models that were
started but not finished are redone.

Records::

    {"event": "run", "config": {...}}            first line: what the run does
    {"event": "start", "id": "a/b.onnx"}         a model was handed to a worker
    {"event": "done", "id": "a/b.onnx", "result": {...}}

A torn last line (killed mid-write) is ignored: its model is simply redone.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unframe.errors import OutputExistsError, UsageError

STATE_DIR = ".unframe-zoo"
JOURNAL_NAME = "journal.jsonl"


def journal_path(out_dir: Path) -> Path:
    return out_dir / STATE_DIR / JOURNAL_NAME


@dataclass
class JournalState:
    config: dict[str, Any] | None = None
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)

    @property
    def half_done(self) -> set[str]:
        return self.started - set(self.done)


def read_journal(path: Path) -> JournalState:
    state = JournalState()
    if not path.exists():
        return state
    with open(path, encoding="utf-8") as f:
        for line in f:
            record = _parse(line)
            if record is None:
                continue
            event = record.get("event")
            if event == "run" and state.config is None:
                state.config = record.get("config")
            elif event == "start":
                state.started.add(record["id"])
            elif event == "done":
                state.done[record["id"]] = record["result"]
    return state


def _parse(line: str) -> dict[str, Any] | None:
    if not line.endswith("\n"):
        return None  # torn write: the process died before the line was complete
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) and "event" in record else None


class Journal:
    """Append records durably. One writer (the coordinating process) per run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - held for the run

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def run(self, config: dict[str, Any]) -> None:
        self.write({"event": "run", "config": config})

    def start(self, model_id: str) -> None:
        self.write({"event": "start", "id": model_id})

    def done(self, model_id: str, result: dict[str, Any]) -> None:
        self.write({"event": "done", "id": model_id, "result": result})

    def close(self) -> None:
        self._file.close()


def open_journal(out_dir: Path, config: dict[str, Any], *, resume: bool, force: bool
                 ) -> tuple[Journal, JournalState]:
    """Start or resume a run's journal in OUT_DIR.

    - ``resume``: the journal's config must match this run's; done models are skipped.
    - a journal from an earlier run without ``resume``: refused unless ``force`` (start over).
    """
    path = journal_path(out_dir)
    state = read_journal(path)
    if resume and state.config is not None:
        _check_same_run(path, state.config, config)
        torn = _torn_tail(path)
        journal = Journal(path)
        if torn:
            journal.write({"event": "note", "text": "previous run was interrupted mid-write"})
        return journal, state
    if path.exists() and state.config is not None and not resume and not force:
        raise OutputExistsError(f"{out_dir} holds an earlier zoo run ({path})",
                                "pass --resume to continue it or --force to start over")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    journal = Journal(path)
    journal.run(config)
    return journal, JournalState(config=config)


def _check_same_run(path: Path, old: dict[str, Any], new: dict[str, Any]) -> None:
    diffs = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    if diffs:
        k = diffs[0]
        raise UsageError(f"--resume: {path} was a run with {k}={old.get(k)!r}, this one has {k}={new.get(k)!r}",
                         "resume with the same options, or pass --force to start over")


def _torn_tail(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() == 0:
            return False
        f.seek(-1, os.SEEK_END)
        torn = f.read(1) != b"\n"
    if torn:
        # Terminate the torn line so the next record starts on its own line.
        with open(path, "ab") as f:
            f.write(b"\n")
            f.flush()
            os.fsync(f.fileno())
    return torn
