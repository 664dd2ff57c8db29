"""unframe.deferred: the command line's start-up without sympy, and every use of a deferred
module still answering as the real one."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent("""
    import importlib.util, json, sys
    if sys.argv[1] == "defer":
        from unframe.deferred import defer
        assert defer("onnx_ir._symbolic_shapes") and defer("sympy")
    import onnx_ir as ir
    out = {"deferred_after_import": type(sys.modules["sympy"]).__name__ == "Deferred"}
    dim = ir.SymbolicDim("N") + 1          # an expression: onnx-ir parses it with sympy
    out["dim"] = str(dim.value)
    import sympy
    import sympy.polys
    x = sympy.Symbol("x")
    out["expr"] = str(sympy.expand((x + 1) ** 2))
    out["spec"] = importlib.util.find_spec("sympy").name
    out["is_module"] = isinstance(sympy.Expr, type)
    print(json.dumps(out))
""")


def _probe(mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_deferred_sympy_answers_as_the_real_one():
    deferred, plain = _probe("defer"), _probe("plain")
    assert deferred.pop("deferred_after_import") is True
    assert plain.pop("deferred_after_import") is False
    assert deferred == plain and plain["expr"] == "x**2 + 2*x + 1"


def test_a_module_that_fails_to_import_fails_each_time(tmp_path, monkeypatch):
    from unframe.deferred import defer

    (tmp_path / "unframe_broken_probe.py").write_text("raise ImportError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "unframe_broken_probe", raising=False)
    assert defer("unframe_broken_probe")
    assert not defer("unframe_broken_probe")  # there already
    import unframe_broken_probe  # the stand-in: no error yet

    for _ in range(2):
        with pytest.raises(ImportError, match="boom"):
            unframe_broken_probe.anything  # noqa: B018
    assert not defer("no_such_module_anywhere") and not defer("json")  # missing; imported already
    monkeypatch.delitem(sys.modules, "unframe_broken_probe")


def test_the_command_line_converts_without_importing_sympy(mlp_path, tmp_path):
    """`unframe convert` of an ONNX file (parity in onnxruntime) never needs sympy: its start-up
    does not pay for it."""
    script = textwrap.dedent(f"""
        import sys
        from unframe.cli.main import main
        sys.argv = ["unframe", "convert", {str(mlp_path)!r}, "--to", "onnx", "--opset", "17",
                    "-o", {str(tmp_path / "out.onnx")!r}]
        try:
            main()
        except SystemExit as exc:
            code = exc.code
        else:
            code = 0
        print("RESULT", code, type(sys.modules.get("sympy")).__name__)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    result = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert result == ["RESULT 0 Deferred"], done.stdout + done.stderr
    assert (tmp_path / "out.onnx").exists()
