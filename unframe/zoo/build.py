"""``unframe zoo build``: build the reference models of a manifest with their scripts.

Each entry names a builder (``script.py:function`` in the manifest's ``build/`` folder) called as
``function(out_dir, opset)``; it writes ``model.onnx``, ``inputs.npz`` and ``outputs.npz`` into a
staging folder that is renamed into place when complete, so an interrupted build leaves no
half-built model. Entries whose framework is not installed are skipped, saying so, and so are
entries marked ``heavy`` (large or slow to build) unless ``heavy=True`` or ``only`` names them.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unframe.errors import InputError, UsageError
from unframe.zoo.manifest import ZooEntry, read_manifest

# What each framework's builders import (checked without importing them).
FRAMEWORK_MODULES: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "keras": ("tensorflow", "keras", "tf2onnx"),
    # installed with --no-deps: its tensorflow-text requirement pulls the full tensorflow wheel
    "keras-hub": ("tensorflow", "keras", "tf2onnx", "keras_hub"),
    "sklearn": ("sklearn", "skl2onnx"),
    "onnx": ("onnx",),
}
BUILT, SKIPPED, ALREADY, FAILED = "built", "skipped", "already built", "failed"


@dataclass
class BuildOutcome:
    name: str
    framework: str
    status: str
    path: Path
    seconds: float = 0.0
    reason: str = ""


def default_manifest() -> Path:
    """``model_zoo/manifest.toml`` in the current folder, else the one in the source checkout."""
    here = Path.cwd() / "model_zoo" / "manifest.toml"
    if here.is_file():
        return here
    return Path(__file__).resolve().parents[2] / "model_zoo" / "manifest.toml"


def missing_modules(framework: str) -> list[str]:
    mods = FRAMEWORK_MODULES.get(framework)
    if mods is None:
        return [f"(unknown framework {framework!r})"]
    return [m for m in mods if importlib.util.find_spec(m) is None]


def build_zoo(manifest: Path, *, out_dir: Path | None = None, only: tuple[str, ...] = (),
              force: bool = False, heavy: bool = False, console: Any = None) -> list[BuildOutcome]:
    """Build every entry (or the ``only`` ones) of ``manifest`` under its root or ``out_dir``;
    heavy entries only with ``heavy`` or when ``only`` names them."""
    source = read_manifest(manifest)
    root = out_dir.resolve() if out_dir is not None else source.root
    entries = _select(source.entries, only, manifest)
    scripts = manifest.parent / "build"
    outcomes = []
    for entry in entries:
        if entry.heavy and not (heavy or only):
            outcome = BuildOutcome(entry.name, entry.framework, SKIPPED, root / entry.rel,
                                   reason="heavy: build it with --heavy or --only NAME")
        else:
            outcome = build_entry(entry, scripts, root, force=force)
        outcomes.append(outcome)
        if console is not None:
            _print(console, outcome)
    return outcomes


def _select(entries: list[ZooEntry], only: tuple[str, ...], manifest: Path) -> list[ZooEntry]:
    if not only:
        return entries
    names = {e.name for e in entries}
    unknown = [n for n in only if n not in names]
    if unknown:
        raise UsageError(f"--only {unknown[0]}: no such model in {manifest}",
                         f"choose from: {', '.join(sorted(names))}")
    return [e for e in entries if e.name in only]


def build_entry(entry: ZooEntry, scripts: Path, root: Path, *, force: bool = False) -> BuildOutcome:
    final = root / entry.rel
    outcome = BuildOutcome(entry.name, entry.framework, BUILT, final)
    missing = missing_modules(entry.framework)
    if missing:
        outcome.status, outcome.reason = SKIPPED, f"{entry.framework} is not installed (missing {', '.join(missing)})"
        return outcome
    if final.exists() and not force:
        outcome.status = ALREADY
        return outcome
    started = time.perf_counter()
    try:
        _build_into_place(entry, scripts, final)
    except Exception as exc:  # one model's build failing must not stop the others
        outcome.status, outcome.reason = FAILED, f"{type(exc).__name__}: {_first_line(exc)}"
    outcome.seconds = time.perf_counter() - started
    return outcome


def _build_into_place(entry: ZooEntry, scripts: Path, final: Path) -> None:
    builder = load_builder(entry, scripts)
    folder = final.parent
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".unframe-tmp-", dir=folder.parent))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # exporters' deprecation chatter
            builder(staging, entry.opset or 13)
        if final.name != "model.onnx":
            (staging / "model.onnx").rename(staging / final.name)
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def load_builder(entry: ZooEntry, scripts: Path) -> Any:
    script, _, func = entry.builder.partition(":")
    if not script or not func:
        raise InputError(f"model {entry.name}: builder {entry.builder!r} is not 'script.py:function'",
                         "fix the manifest entry")
    path = scripts / script
    if not path.is_file():
        raise InputError(f"model {entry.name}: build script {path} not found", "fix the manifest entry")
    if str(scripts) not in sys.path:
        sys.path.insert(0, str(scripts))  # the scripts import their shared zoo_common module
    module = _import_script(path)
    try:
        return getattr(module, func)
    except AttributeError as exc:
        raise InputError(f"model {entry.name}: {script} has no function {func}", "fix the manifest entry") from exc


def _import_script(path: Path) -> Any:
    """Import a build script by its file, under a name no other module can hold."""
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    name = f"_unframe_zoo_script_{path.stem}_{digest}"
    module = sys.modules.get(name)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InputError(f"build script {path} cannot be imported", "check that it is a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _print(console: Any, o: BuildOutcome) -> None:
    style = {BUILT: "green", ALREADY: "dim", SKIPPED: "yellow", FAILED: "red"}[o.status]
    extra = f" ({o.seconds:.1f} s)" if o.status == BUILT else (f": {o.reason}" if o.reason else "")
    from rich.markup import escape

    console.print(f"[{style}]{o.status:>13}[/] {escape(o.name)}{escape(extra)}")
