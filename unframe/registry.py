"""The one Registry type used for every kind of pluggable thing.

Each kind (frontends, backends, version-converter adapters, CoreML translators, MIL kernels, ...)
has exactly one ``Registry`` instance and one decorator. Rules:

* registering a key twice raises ``RegistryError`` (a plugin cannot silently replace a built-in);
* built-in modules are imported lazily, on first lookup, so ``import unframe`` stays cheap;
* third parties register through an entry-point group (e.g. ``unframe.frontends``). An entry
  point may name a module (importing it runs its decorators) or an object, which is registered
  under the entry point's name.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator
from importlib import metadata
from types import ModuleType
from typing import Any, Generic, TypeVar

from unframe.errors import RegistryError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, *, entry_point_group: str | None = None,
                 builtins: Iterable[str] = (),
                 coerce: Callable[[Any], T] | None = None) -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        self._builtins = list(builtins)
        self._coerce = coerce  # turns an entry point's object into what is registered
        self._items: dict[Hashable, T] = {}
        self._origin: dict[Hashable, str] = {}
        self._loaded = False
        self._loading = False
        self._lock = threading.RLock()
        self.plugin_errors: list[str] = []

    # -- registration -------------------------------------------------------------------------
    def register(self, key: Hashable, obj: T, *, origin: str = "") -> T:
        with self._lock:
            if key in self._items:
                raise RegistryError(
                    f"duplicate {self.kind} registration for {key!r} "
                    f"(first from {self._origin.get(key) or 'unknown'}, again from {origin or _origin_of(obj)})",
                    "each key may be registered once; rename or remove one of them",
                )
            self._items[key] = obj
            self._origin[key] = origin or _origin_of(obj)
        return obj

    def decorator(self, key: Hashable) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            self.register(key, obj)
            return obj

        return deco

    # -- lookup -------------------------------------------------------------------------------
    def load(self) -> None:
        """Import the built-in modules and the entry-point plugins (once)."""
        with self._lock:
            if self._loaded or self._loading:
                return
            self._loading = True
            try:
                for mod in self._builtins:
                    if importlib.util.find_spec(mod) is None:
                        self.plugin_errors.append(f"built-in module {mod} is missing")
                        continue
                    importlib.import_module(mod)
                if self.entry_point_group:
                    self._load_entry_points(self.entry_point_group)
                self._loaded = True
            finally:
                self._loading = False

    def _load_entry_points(self, group: str) -> None:
        for ep in metadata.entry_points(group=group):
            try:
                obj = ep.load()
            except Exception as exc:  # a broken plugin must not break the hub; doctor shows it
                self.plugin_errors.append(f"{ep.name} ({ep.value}): {type(exc).__name__}: {exc}")
                continue
            if isinstance(obj, ModuleType):
                continue  # importing it ran its decorators
            if self._coerce is not None:
                obj = self._coerce(obj)
            self.register(ep.name, obj, origin=f"entry point {ep.value}")

    def get(self, key: Hashable, default: Any = ...) -> T:
        self.load()
        try:
            return self._items[key]
        except KeyError:
            if default is ...:
                raise
            return default

    def origin(self, key: Hashable) -> str:
        self.load()
        return self._origin[key]

    def __contains__(self, key: object) -> bool:
        self.load()
        return key in self._items

    def __iter__(self) -> Iterator[Hashable]:
        self.load()
        return iter(list(self._items))

    def __len__(self) -> int:
        self.load()
        return len(self._items)

    def keys(self) -> list[Hashable]:
        self.load()
        return list(self._items)

    def items(self) -> list[tuple[Hashable, T]]:
        self.load()
        return list(self._items.items())

    def unregister(self, key: Hashable) -> None:
        """For tests that register temporary items."""
        with self._lock:
            self._items.pop(key, None)
            self._origin.pop(key, None)


def _origin_of(obj: Any) -> str:
    mod = getattr(obj, "__module__", None) or type(obj).__module__
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{mod}.{name}"
