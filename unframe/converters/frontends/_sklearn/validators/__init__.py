"""Safe loading by validation: the types skops does not trust by default that unframe loads
without ``--trust`` because it checks their content first.

One validator per type, registered by its fully qualified name with ``@validates``
(``registry.py``, which the families import; this package re-exports it): it receives
the skops node of one object (nothing constructed yet) and raises ``Invalid`` with the reason
when an index, size or shape that scikit-learn's (or XGBoost's, LightGBM's) unchecked native
code relies on is wrong. A new type is one function in the family's module below.

``load_validated(path)``:
1. read the archive into skops' node tree (nothing imported from the file, nothing built);
2. every node of a validated type, wherever it is (trusted by skops or not), is validated and
   must be stored the way its validator expects (``loaders``: a Tree through skops' TreeNode,
   never through a constructor call); a failure is ``InputError`` (exit 3) with the reason;
3. types skops does not trust and no validator covers: ``TrustRequiredError`` naming exactly
   those;
4. skops constructs, every type it does not trust by default being a validated one (its own
   unsafe-type set, computed once in step 3);
5. the built estimators' links between objects are checked (``structure.py``: the width of the
   input each tree is given, a boosting ensemble's shape) before anything predicts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unframe.converters.frontends._sklearn.validators._skops import Invalid, require
from unframe.converters.frontends._sklearn.validators.registry import (
    CRAFTED_HINT,
    VALIDATORS,
    Validator,
    validates,
)
from unframe.errors import InputError, TrustRequiredError

__all__ = ["CRAFTED_HINT", "VALIDATORS", "Invalid", "Validator", "load_validated", "require", "validates"]

def load_validated(path: Path) -> Any:
    """Load a .skops file without --trust: validate, then let skops build it."""
    from zipfile import ZipFile

    from unframe.archives import ZIP_READ_ERRORS
    from unframe.converters.frontends._sklearn.validators.structure import check_structure

    try:
        with ZipFile(path) as zf:
            root = _read(zf, path)
            validate_nodes(root, path)  # a crafted validated object is refused even beside
            untrusted = _untrusted(root, path)  # a type that needs --trust
            unchecked = sorted(untrusted - set(VALIDATORS.keys()))
            if unchecked:
                raise TrustRequiredError(
                    f"{path} declares types that skops does not trust by default and unframe "
                    f"can't validate: {', '.join(unchecked)}; loading them may run their code",
                    "inspect them, and pass --trust (trust=True) only if you trust the file",
                    details={"untrusted_types": unchecked})
            model = _build(root, path)
    except RecursionError:  # (a RuntimeError: before the zip errors, which include those)
        raise InputError(f"{path}: the skops schema is nested too deeply", CRAFTED_HINT) from None
    except (*ZIP_READ_ERRORS, KeyError) as exc:
        raise InputError(f"{path}: not a readable skops file ({_first_line(exc)})",
                         "check that the file is complete and was written by skops.io.dump") from None
    check_structure(model, path)
    return model


def _read(zf: Any, path: Path) -> Any:
    from unframe.converters.frontends._sklearn.validators import _skops

    try:
        return _skops.read_tree(zf)
    except Invalid as exc:
        raise InputError(f"{path}: {exc}", CRAFTED_HINT) from None
    except (TypeError, AttributeError) as exc:  # a schema entry of the wrong shape
        raise InputError(f"{path}: malformed skops schema ({_first_line(exc)})", CRAFTED_HINT) from None


def _untrusted(root: Any, path: Path) -> set[str]:
    from unframe.converters.frontends._sklearn.validators import _skops

    try:
        return _skops.untrusted_types(root)
    except (TypeError, AttributeError) as exc:  # e.g. a node whose module name is null
        raise InputError(f"{path}: malformed skops schema ({_first_line(exc)})", CRAFTED_HINT) from None


def validate_nodes(root: Any, path: Path) -> list[str]:
    """Validate every node of a validated type; returns their paths (for tests and --debug)."""
    from unframe.converters.frontends._sklearn.validators import _skops

    table = dict(VALIDATORS.items())
    checked: list[str] = []
    batches: dict[str, list[tuple[str, Any]]] = {}
    seen: set[int] = set()
    # (node, its parent's entry, key): paths are spelled out only for validated nodes
    stack: list[tuple[Any, Any, Any]] = [(root, None, "")]
    while stack:
        entry = stack.pop()
        node = entry[0]
        if id(node) in seen:
            continue
        seen.add(id(node))
        validator = table.get(f"{node.module_name}.{node.class_name}")
        if validator is not None:
            item = (_skops.path(_keys(entry)), node)
            if validator.many:
                batches.setdefault(validator.type_name, []).append(item)
            else:
                _run(validator, [item], path)
            checked.append(item[0])
        if node.children:
            stack.extend((child, entry, key) for key, child in reversed(_skops.children(node)))
    for name, items in batches.items():
        _run(table[name], items, path)
    return checked


def _keys(entry: tuple[Any, Any, Any]) -> list[Any]:
    keys = []
    while entry is not None:
        keys.append(entry[2])
        entry = entry[1]
    return keys[::-1]


def _run(validator: Validator, items: list[tuple[str, Any]], path: Path) -> None:
    from unframe.converters.frontends._sklearn.validators import _skops

    index = 0
    try:
        for k, (_, node) in enumerate(items):
            try:
                _skops.expect(node, *validator.loaders)
            except Invalid as exc:
                raise Invalid(str(exc), k) from None
        if validator.many:
            validator.check([node for _, node in items])
        else:
            validator.check(items[0][1])
    except Invalid as exc:
        reason = str(exc)
        if exc.index is not None and 0 <= exc.index < len(items):
            index = exc.index
    except (IndexError, KeyError, TypeError, ValueError, OverflowError) as exc:
        reason = f"malformed content ({type(exc).__name__}: {_first_line(exc)})"
    else:
        return
    where = items[index][0]
    raise InputError(f"{path}: {validator.type_name} at {where}: {reason}", CRAFTED_HINT,
                     details={"type": validator.type_name, "at": where})


def _build(root: Any, path: Path) -> Any:
    from unframe.converters.frontends._sklearn.validators import _skops

    try:
        return _skops.construct(root)
    except (TrustRequiredError, InputError):
        raise
    except Exception as exc:  # the libraries' own checks of validated content
        raise InputError(f"{path}: skops could not build the model ({_first_line(exc)})",
                         "check that the file matches the installed scikit-learn") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__
