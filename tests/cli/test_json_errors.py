"""With --json every failure prints one JSON error object on stdout (and the one-line error on
stderr): typed errors, click's usage errors, and unexpected exceptions alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from unframe.cli.main import cli


def _json(res: object) -> dict:
    return json.loads(res.stdout)  # type: ignore[attr-defined]


def test_typed_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["convert", str(tmp_path / "missing.onnx"), "--json"])
    assert res.exit_code == 3
    assert _json(res)["error"] == "input" and _json(res)["exit_code"] == 3


def test_usage_error_found_by_click(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["convert", str(tmp_path / "m.onnx"), "--no-such-flag", "--json"])
    assert res.exit_code == 2
    data = _json(res)
    assert data["error"] == "usage" and "--no-such-flag" in data["message"]


def test_usage_error_without_json_prints_no_json(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["convert", str(tmp_path / "m.onnx"), "--no-such-flag"])
    assert res.exit_code == 2 and not res.stdout.strip()


def test_unexpected_exception(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug inside a command (simulated: the conversion raises a plain ValueError)."""
    from unframe import api

    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("Buffer dtype mismatch, expected 'const double' but got 'float'")

    monkeypatch.setattr(api, "convert", broken)
    res = CliRunner().invoke(cli, ["convert", str(tmp_path / "m.onnx"), "--json"])
    assert res.exit_code == 1
    data = _json(res)
    assert data["error"] == "internal" and "Buffer dtype mismatch" in data["message"]
    assert "--debug" in data["hint"]
