"""``unframe doctor``'s table: the install hint survives rich's markup ("unframe[torch]")."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from unframe.cli.doctor import gather, render
from unframe.converters.registry import BACKENDS, FRONTENDS


def _rendered(info: dict) -> str:
    console = Console(file=io.StringIO(), width=200, color_system=None, record=True)
    render(info, console)
    return console.export_text()


@pytest.mark.parametrize(("registry", "name"), [(FRONTENDS, "torch"), (BACKENDS, "coreml")])
def test_install_column_keeps_the_extra(monkeypatch, registry, name):
    component = registry.get(name)
    monkeypatch.setattr(component, "missing", lambda: ["somepkg"])
    info = gather()
    row = next(r for r in info[f"{'front' if registry is FRONTENDS else 'back'}ends"] if r["name"] == name)
    assert not row["usable"] and row["install"] == f"pip install 'unframe[{component.extra}]'"
    text = _rendered(info)
    assert f"pip install 'unframe[{component.extra}]'" in text
    assert "pip install 'unframe'" not in text


def test_plugin_errors_are_not_read_as_markup():
    info = {"unframe": "0", "python": "3", "platform": "p", "core": {}, "frontends": [], "backends": [],
            "plugin_errors": ["bad (pkg.mod:Thing): ImportError: needs unframe[torch]"]}
    assert "needs unframe[torch]" in _rendered(info)


def test_doctor_says_where_the_cache_is(monkeypatch, tmp_path):
    monkeypatch.setenv("UNFRAME_CACHE_DIR", str(tmp_path / "kept"))
    assert f"cache: {tmp_path / 'kept'}" in _rendered(gather())
    monkeypatch.setenv("UNFRAME_CACHE_DIR", "off")
    assert "cache: off" in _rendered(gather())
