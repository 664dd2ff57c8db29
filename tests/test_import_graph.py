"""No import cycles among unframe's modules.

The graph is read from the source with ``ast`` (nothing is imported). An edge ``a -> b`` is a
module-level import in ``a`` of the unframe module ``b``:

* ``import unframe.x.y`` and ``from unframe.x.y import name`` reach ``unframe.x.y``;
* ``from unframe.x import y`` reads ``y`` off ``unframe.x``, so it reaches ``unframe.x`` and,
  when ``y`` is a submodule, ``unframe.x.y`` as well (a submodule taken through its package's
  ``__init__`` ties it to everything that ``__init__`` imports);
* imports inside functions and under ``if TYPE_CHECKING:`` don't count;
* a ``Registry(..., builtins=[...])`` imports its built-in modules on first lookup, so a module
  that imports the registry's module (other than those built-ins, which import it for its
  decorator) reaches each built-in: a translator that imports the walk which looks it up is a
  cycle even though no single statement closes it.
"""

from __future__ import annotations

import ast
import sys
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "unframe"

Sources = Mapping[str, tuple[str, bool]]  # module name -> (source text, is a package __init__)
Graph = dict[str, set[str]]


def package_sources(root: Path = ROOT, package: str = PACKAGE) -> dict[str, tuple[str, bool]]:
    out: dict[str, tuple[str, bool]] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        out[".".join(parts)] = (path.read_text(encoding="utf-8"), is_pkg)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements run when the module is imported (not function bodies, not TYPE_CHECKING)."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            if not _is_type_checking(stmt.test):
                yield from _module_level(stmt.body)
            yield from _module_level(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            for block in (stmt.body, stmt.orelse, stmt.finalbody):
                yield from _module_level(block)
            for handler in stmt.handlers:
                yield from _module_level(handler.body)
        elif isinstance(stmt, ast.With):
            yield from _module_level(stmt.body)
        else:
            yield stmt


def _imported(stmt: ast.stmt, module: str, is_pkg: bool, known: Mapping[str, object]) -> set[str]:
    if isinstance(stmt, ast.Import):
        return {a.name for a in stmt.names if a.name in known}
    if not isinstance(stmt, ast.ImportFrom):
        return set()
    if stmt.level:
        base = (module if is_pkg else module.rpartition(".")[0]).split(".")
        base = base[: len(base) - (stmt.level - 1)]
        target = ".".join(base + ([stmt.module] if stmt.module else []))
    else:
        target = stmt.module or ""
    out = {f"{target}.{a.name}" for a in stmt.names} | {target}
    return {t for t in out if t in known}


def _registry_builtins(tree: ast.Module) -> list[str] | None:
    """The ``builtins=`` of every ``Registry(...)`` assigned at module level (None: unreadable)."""
    consts: dict[str, object] = {}
    found: list[str] = []

    def value(expr: ast.expr) -> object:
        return eval(compile(ast.Expression(expr), "<builtins>", "eval"), {"__builtins__": {}, **consts})

    for stmt in _module_level(tree.body):
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is None:
            continue
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        call = stmt.value
        if isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", "")) == "Registry":
            for kw in call.keywords:
                if kw.arg == "builtins":
                    try:
                        found.extend(str(m) for m in value(kw.value))  # type: ignore[attr-defined]
                    except Exception:
                        return None
            continue
        for target in targets:
            if isinstance(target, ast.Name):
                try:
                    consts[target.id] = value(stmt.value)
                except Exception:
                    consts.pop(target.id, None)
    return found


def import_graph(sources: Sources) -> tuple[Graph, list[str]]:
    """The module graph of ``sources`` (registry built-ins included, see the module docstring),
    and the modules whose ``Registry`` built-ins could not be read statically."""
    graph: Graph = {m: set() for m in sources}
    lazy: dict[str, list[str]] = {}
    unreadable: list[str] = []
    for module, (text, is_pkg) in sources.items():
        tree = ast.parse(text, filename=module)
        for stmt in _module_level(tree.body):
            graph[module] |= _imported(stmt, module, is_pkg, sources) - {module}
        builtins = _registry_builtins(tree)
        if builtins is None:
            unreadable.append(module)
        elif builtins:
            lazy[module] = [b for b in builtins if b in sources]
    static = {m: set(e) for m, e in graph.items()}
    for registry, builtins in lazy.items():
        for module, targets in static.items():
            if registry in targets and module != registry and module not in builtins:
                graph[module].update(builtins)
    return graph, unreadable


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def shortest_cycle(graph: Graph, component: list[str]) -> list[str]:
    """One shortest loop through the component's first module, for the failure message."""
    start, members = component[0], set(component)
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v] & members):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if w not in parent:
                parent[w] = v
                queue.append(w)
    return component


def describe(graph: Graph, found: list[list[str]]) -> str:
    return "\n".join(f"{len(c)} modules: {' -> '.join(shortest_cycle(graph, c))}" for c in found)


# -- the project ---------------------------------------------------------------------------------

def test_unframe_has_no_import_cycles():
    graph, unreadable = import_graph(package_sources())
    assert len(graph) > 50  # the scan found the package
    assert unreadable == [], f"Registry builtins= that can't be read statically in {unreadable}"
    found = cycles(graph)
    assert found == [], "import cycles among unframe's modules:\n" + describe(graph, found)


# -- the checker itself --------------------------------------------------------------------------

def _pkg(**modules: str) -> dict[str, tuple[str, bool]]:
    """``_pkg(**{"p/": "...", "p.a": "..."})``: a trailing ``/`` marks a package ``__init__``."""
    return {name.rstrip("/"): (text, name.endswith("/")) for name, text in modules.items()}


def test_reports_a_direct_cycle():
    graph, _ = import_graph(_pkg(**{"p/": "", "p.a": "from p.b import f\n", "p.b": "import p.a\n"}))
    assert cycles(graph) == [["p.a", "p.b"]]
    assert describe(graph, cycles(graph)) == "2 modules: p.a -> p.b -> p.a"


def test_reports_a_cycle_through_a_package_init():
    sources = _pkg(**{
        "p/": "from p.walker import Walker\n",
        "p.walker": "from p.context import Step\n",
        "p.context": "from p import fold as _fold\n",  # reads fold off the half-built package
        "p.fold": "",
    })
    graph, _ = import_graph(sources)
    assert cycles(graph) == [["p", "p.context", "p.walker"]]
    sources["p.context"] = ("import p.fold as _fold\n", False)
    assert cycles(import_graph(sources)[0]) == []


def test_relative_imports_resolve():
    graph, _ = import_graph(_pkg(**{"p/": "", "p.a": "from . import b\n", "p.b": "from .a import x\n"}))
    assert graph["p.a"] == {"p", "p.b"}
    assert cycles(graph) == [["p.a", "p.b"]]


def test_deferred_and_type_checking_imports_are_not_edges():
    sources = _pkg(**{
        "p/": "",
        "p.a": "from p.b import f\n",
        "p.b": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.a import A\n"
                "def g():\n    from p.a import h\n"),
    })
    graph, _ = import_graph(sources)
    assert graph["p.b"] == set()
    assert cycles(graph) == []


def test_registry_builtins_close_a_cycle():
    """ops/ registers translators lazily; a translator importing the walk that looks them up loops."""
    sources = _pkg(**{
        "p/": "",
        "p.ops/": ('from unframe.registry import Registry\n_F = ("conv",)\n'
                   'TRANSLATORS = Registry("t", builtins=[f"p.ops.{f}" for f in _F])\n'),
        "p.ops.conv": "from p.ops import translator\nfrom p.translate import TranslateContext\n",
        "p.translate": "from p.ops import TRANSLATORS\n",
    })
    graph, unreadable = import_graph(sources)
    assert unreadable == []
    assert graph["p.translate"] == {"p.ops", "p.ops.conv"}
    assert graph["p.ops"] == set()  # the registry's own module: built-ins import it for the decorator
    assert cycles(graph) == [["p.ops.conv", "p.translate"]]
    # the fix: the context lives in a lower module that imports neither
    sources["p.context"] = ("", False)
    sources["p.ops.conv"] = ("from p.ops import translator\nfrom p.context import TranslateContext\n", False)
    assert cycles(import_graph(sources)[0]) == []


@pytest.mark.parametrize("builtins", ["_missing()", "[f'p.{x}' for x in NOT_A_CONSTANT]"])
def test_unreadable_registry_builtins_are_reported(builtins):
    sources = _pkg(**{"p/": f"from unframe.registry import Registry\nR = Registry('r', builtins={builtins})\n"})
    assert import_graph(sources)[1] == ["p"]
