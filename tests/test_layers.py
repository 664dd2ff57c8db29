"""unframe's layers: no import runs upward, no two modules import each other, private names stay private.

The layer order (from the ground up) is written once, in ``LAYERS`` below, and in words in
docs/architecture.md. A module imports only from its own layer or below; modules of one layer may
import each other, but not in a circle.

The graph is read from the source with ``ast`` (nothing is imported). An edge ``a -> b`` is an
import in ``a`` of the unframe module ``b``, wherever it stands (module level or inside a
function): an import deferred into a function still ties the two modules together, it only
hides the tie until the function runs. Only imports under ``if TYPE_CHECKING:`` are exempt.

* ``import unframe.x.y`` and ``from unframe.x.y import name`` reach ``unframe.x.y``;
* ``from unframe.x import y`` reaches ``unframe.x.y`` when ``y`` is a submodule, else ``unframe.x``;
* a ``Registry(..., builtins=[...])`` imports its built-in modules on first lookup, so a module
  that imports the registry's module (other than those built-ins, which import it for its
  decorator) reaches each built-in: a translator that imports the walk which looks it up is a
  circle even though no single statement closes it.

A private name (``_name``) imported from another unframe module (``from unframe.x import _name``)
is a failure too: what a module shares, it names without the underscore.
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

# The layers from the ground up, as module paths relative to ``unframe`` ("" is the package's own
# __init__, the lazy public API over api.py). The longest matching prefix decides a module's
# layer, so ``converters.base`` sits below the rest of ``converters``.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "quiet", "opset", "distributions", "distributed", "timing", "cpu", "cache", "deferred"),
    ("io", "limits", "sandbox", "registry", "archives", "preserve"),
    ("version_converter",),
    ("validate",),
    ("passes",),
    ("converters.base",),
    ("converters",),  # frontends, backends and their registry
    ("locate",),
    ("pipeline",),
    ("route",),
    ("api", ""),
    ("cli", "zoo", "callbacks"),
    ("tools",),
)

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


# -- reading the imports -------------------------------------------------------------------------

def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_statements(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import in the tree, in functions too; ``if TYPE_CHECKING:`` bodies are skipped."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _target(stmt: ast.ImportFrom, module: str, is_pkg: bool) -> str:
    if not stmt.level:
        return stmt.module or ""
    base = (module if is_pkg else module.rpartition(".")[0]).split(".")
    base = base[: len(base) - (stmt.level - 1)]
    return ".".join(base + ([stmt.module] if stmt.module else []))


def _imported(stmt: ast.Import | ast.ImportFrom, module: str, is_pkg: bool,
              known: Mapping[str, object]) -> set[str]:
    if isinstance(stmt, ast.Import):
        named = {a.name for a in stmt.names}
    else:
        target = _target(stmt, module, is_pkg)
        named = {f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in stmt.names}
    reached = {t for t in named if t in known}
    return reached | {p for t in reached for p in _outer_packages(t, module, known)}


def _outer_packages(target: str, importer: str, known: Mapping[str, object]) -> set[str]:
    """The packages Python runs first when ``importer`` imports ``target``: every package above
    ``target`` that ``importer`` isn't inside (inside one, its ``__init__`` has run already), the
    top package left out (its ``__init__`` imports nothing until an attribute is asked of it)."""
    parts = target.split(".")
    outer = {".".join(parts[:i]) for i in range(2, len(parts))}
    return {p for p in outer if p in known and not (importer == p or importer.startswith(p + "."))}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(sources: Sources) -> list[tuple[str, str, str]]:
    """``(importer, module, _name)`` for every private name taken from another unframe module:
    ``from unframe.x import _name``, or ``x._name`` on a module imported as ``x``."""
    found = set()
    for module, (text, is_pkg) in sources.items():
        tree = ast.parse(text, filename=module)
        modules: dict[str, str] = {}  # a name bound to an unframe module -> that module
        for stmt in _import_statements(tree):
            if isinstance(stmt, ast.Import):
                modules.update({a.asname: a.name for a in stmt.names if a.asname and a.name in sources})
                continue
            target = _target(stmt, module, is_pkg)
            for alias in stmt.names:
                if f"{target}.{alias.name}" in sources:
                    modules[alias.asname or alias.name] = f"{target}.{alias.name}"
                elif target in sources and target != module and _private(alias.name):
                    found.add((module, target, alias.name))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr)
                    and modules.get(node.value.id, module) != module):
                found.add((module, modules[node.value.id], node.attr))
    return sorted(found)


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
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
        for stmt in _import_statements(tree):
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


# -- layers --------------------------------------------------------------------------------------

def layer_of(module: str, layers: tuple[tuple[str, ...], ...] = LAYERS, package: str = PACKAGE) -> int | None:
    """The index of the module's layer (longest matching prefix), None when no layer names it."""
    rel = "" if module == package else module.removeprefix(package + ".")
    best: tuple[int, int] | None = None
    for index, layer in enumerate(layers):
        for prefix in layer:
            hit = rel == prefix if prefix == "" else (rel == prefix or rel.startswith(prefix + "."))
            if hit and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    return best[0] if best else None


def upward_imports(graph: Graph, layers: tuple[tuple[str, ...], ...] = LAYERS,
                   package: str = PACKAGE) -> list[tuple[str, str]]:
    """``(importer, imported)`` for every import of a module from a higher layer."""
    found = []
    for module, targets in graph.items():
        low = layer_of(module, layers, package)
        for target in targets:
            high = layer_of(target, layers, package)
            if low is not None and high is not None and high > low:
                found.append((module, target))
    # a package reached only on the way to one of its modules is named by that module
    return sorted((a, b) for a, b in found if not any(x == a and y.startswith(b + ".") for x, y in found))


def _layer_name(index: int | None, layers: tuple[tuple[str, ...], ...] = LAYERS) -> str:
    return "?" if index is None else "/".join(p or "unframe" for p in layers[index])


# -- circles -------------------------------------------------------------------------------------

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
    return "\n".join(f"{len(c)} modules {c}: e.g. {' -> '.join(shortest_cycle(graph, c))}" for c in found)


# -- the project ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def project() -> tuple[dict[str, tuple[str, bool]], Graph]:
    sources = package_sources()
    graph, unreadable = import_graph(sources)
    assert len(graph) > 50  # the scan found the package
    assert unreadable == [], f"Registry builtins= that can't be read statically in {unreadable}"
    return sources, graph


def test_every_module_has_a_layer(project):
    sources, _ = project
    missing = [m for m in sources if layer_of(m) is None]
    assert missing == [], f"modules no layer names (add them to LAYERS and docs/architecture.md): {missing}"


def test_no_upward_imports(project):
    _, graph = project
    found = upward_imports(graph)
    lines = [f"{a} ({_layer_name(layer_of(a))}) imports {b} ({_layer_name(layer_of(b))})" for a, b in found]
    assert found == [], f"{len(found)} upward imports:\n" + "\n".join(lines)


def test_no_import_circles(project):
    _, graph = project
    found = cycles(graph)
    assert found == [], f"{len(found)} import circles among unframe's modules:\n" + describe(graph, found)


def test_private_names_stay_private(project):
    sources, _ = project
    found = private_imports(sources)
    lines = [f"{a} imports {name} from {b}" for a, b, name in found]
    assert found == [], f"{len(found)} private names imported across modules:\n" + "\n".join(lines)


def test_layers_are_written_in_the_architecture_doc():
    """The doc names the same order: each layer's modules appear after the layer below's."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    marker = "<!-- layers -->"
    assert marker in text, f"docs/architecture.md lacks the {marker} line the order follows"
    order = text.split(marker, 1)[1].split("\n\n", 1)[0]
    missing = [p or PACKAGE for layer in LAYERS for p in layer if f"`{p or PACKAGE}`" not in order]
    assert missing == [], f"docs/architecture.md's layer order doesn't name {missing}"
    firsts = [min(order.find(f"`{p or PACKAGE}`") for p in layer) for layer in LAYERS]
    lasts = [max(order.find(f"`{p or PACKAGE}`") for p in layer) for layer in LAYERS]
    wrong = [(_layer_name(i), _layer_name(i + 1)) for i in range(len(LAYERS) - 1) if lasts[i] > firsts[i + 1]]
    assert wrong == [], f"docs/architecture.md names these layers out of LAYERS' order: {wrong}"


# -- the checker itself --------------------------------------------------------------------------

def _pkg(**modules: str) -> dict[str, tuple[str, bool]]:
    """``_pkg(**{"p/": "...", "p.a": "..."})``: a trailing ``/`` marks a package ``__init__``."""
    return {name.rstrip("/"): (text, name.endswith("/")) for name, text in modules.items()}


def test_reports_a_direct_cycle():
    graph, _ = import_graph(_pkg(**{"p/": "", "p.a": "from p.b import f\n", "p.b": "import p.a\n"}))
    assert cycles(graph) == [["p.a", "p.b"]]
    assert describe(graph, cycles(graph)) == "2 modules ['p.a', 'p.b']: e.g. p.a -> p.b -> p.a"


def test_relative_imports_resolve():
    graph, _ = import_graph(_pkg(**{"p/": "", "p.a": "from . import b\n", "p.b": "from .a import x\n"}))
    assert graph["p.a"] == {"p.b"}
    assert cycles(graph) == [["p.a", "p.b"]]


def test_deferred_imports_are_edges_type_checking_ones_are_not():
    sources = _pkg(**{
        "p/": "",
        "p.a": "from p.b import f\n",
        "p.b": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.a import A\n"
                "def g():\n    from p.c import h\n"),
        "p.c": "",
    })
    graph, _ = import_graph(sources)
    assert graph["p.b"] == {"p.c"}
    assert cycles(graph) == []
    sources["p.b"] = ("def g():\n    import p.a\n", False)  # the same circle, hidden in a function
    assert cycles(import_graph(sources)[0]) == [["p.a", "p.b"]]


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


def test_upward_imports_name_the_pair():
    layers = (("low",), ("mid.base",), ("mid",), ("top",))
    sources = _pkg(**{
        "u/": "", "u.low": "", "u.mid/": "", "u.mid.base": "def f():\n    from u.mid.x import y\n",
        "u.mid.x": "from u.low import z\nfrom u.mid.base import b\n", "u.top": "from u.mid import x\n",
    })
    graph, _ = import_graph(sources)
    assert layer_of("u.mid.base", layers, "u") == 1 and layer_of("u.mid.x", layers, "u") == 2
    assert upward_imports(graph, layers, "u") == [("u.mid.base", "u.mid.x")]


def test_private_imports_are_named():
    sources = _pkg(**{
        "p/": "", "p.a": "_x = 1\n__all__ = []\n", "p.sub/": "",
        "p.b": "from p.a import _x, __all__\nfrom p import sub\nfrom . import a\n",
        "p.c": "def f():\n    from .a import _x as y\n",
        "p.d": "import p.a as pa\nfrom p import a\ny = pa._x + a.__all__ + a.public\n",
        "p.e": "from p import a\nclass K:\n    def f(self):\n        return self._x + a._y\n",
    })
    assert private_imports(sources) == [("p.b", "p.a", "_x"), ("p.c", "p.a", "_x"), ("p.d", "p.a", "_x"),
                                        ("p.e", "p.a", "_y")]
