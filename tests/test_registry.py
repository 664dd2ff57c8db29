from __future__ import annotations

import pytest

from unframe.errors import RegistryError
from unframe.registry import Registry


def test_duplicate_registration_raises():
    reg: Registry[int] = Registry("thing")
    reg.register("a", 1)
    with pytest.raises(RegistryError, match="duplicate thing registration for 'a'"):
        reg.register("a", 2)
    assert reg.get("a") == 1


def test_decorator_and_lazy_builtins(tmp_path, monkeypatch):
    pkg = tmp_path / "lazy_builtin_mod.py"
    pkg.write_text("from tests_registry_target import REG\n@REG.decorator('k')\ndef f():\n    return 42\n")
    (tmp_path / "tests_registry_target.py").write_text(
        "from unframe.registry import Registry\nREG = Registry('fn', builtins=['lazy_builtin_mod'])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import tests_registry_target as target

    assert "lazy_builtin_mod" not in __import__("sys").modules  # nothing loaded before first lookup
    assert target.REG.get("k")() == 42
    assert target.REG.origin("k").startswith("lazy_builtin_mod.")


def test_missing_builtin_is_reported_not_fatal():
    reg: Registry[int] = Registry("thing", builtins=["unframe.does_not_exist_anywhere"])
    assert len(reg) == 0
    assert any("does_not_exist_anywhere" in e for e in reg.plugin_errors)


def test_frontend_and_backend_registries_have_onnx():
    from unframe.converters.registry import BACKENDS, FRONTENDS

    assert FRONTENDS.get("onnx").name == "onnx"
    assert BACKENDS.get("onnx").suffixes == (".onnx",)
