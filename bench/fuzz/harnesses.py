"""The fuzz harnesses: one function per target, taking the fuzzer's bytes.

A harness must return normally or raise an ``UnframeError`` whose exit code is not 1 (a typed
refusal of bad input). Anything else is a finding: an untyped exception, an ``UnframeError``
with exit code 1 (an internal error), a changed input file, a crash of this process, a hang
(run.py: over 10 s) or peak RSS over 2 GB. ``one_input`` applies that contract; run.py drives it
with atheris (coverage-guided) or a plain random engine; tests/fuzz/test_corpus.py replays every
saved finding through the same functions (no atheris needed).

Inputs that are several files are packed in one byte string: a tag byte choosing the kind
(``tagged``), or a zip of a folder (a .mlpackage). ONNX models with external data run in a
fixed folder (``Workspace``) holding data files and the traps a hostile location could reach:
a link out of the folder, a linked folder, a hard link, a FIFO.
"""

from __future__ import annotations

import collections
import contextlib
import io
import os
import random
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unframe.errors import UnframeError

# Every harness runs with these limits: parity gets seconds, memory a bounded budget, and the
# divergence locator (which a failed parity starts, 120 s by default) two seconds.
LIMITS = {"max_memory": 64 << 20, "parity_timeout": 5.0, "locate": 2.0}
# HDF5 loops forever on about one mutated Keras file in twenty; the child reading it is stopped
# after probes.BASE_SECONDS (5 s) plus the read time. At 5 s those stops took 90 % of a keras
# campaign; the harness gives the reader 0.5 s (a seed reads in about 10 ms), stopped the same way.
KERAS_READER_SECONDS = 0.5


class InputModified(AssertionError):
    """The harness's input file changed: unframe must never modify an input."""


# ----------------------------------------------------------------------------- workspace ------
class Workspace:
    """A folder per process, reused by every run: ``model/`` is where inputs are written, beside
    the data files external data may name and the traps it must not reach."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="unframe-fuzz-"))
        model = self.root / "model"
        (model / "sub").mkdir(parents=True)
        rng = random.Random(0)
        (model / "w.bin").write_bytes(bytes(rng.randrange(256) for _ in range(4096)))
        (model / "sub" / "w2.bin").write_bytes(bytes(rng.randrange(256) for _ in range(256)))
        outside = self.root / "outside.bin"
        outside.write_bytes(b"secret" * 100)
        (self.root / "outdir").mkdir()
        (self.root / "outdir" / "w2.bin").write_bytes(b"secret" * 100)
        os.symlink(outside, model / "link.bin")
        os.symlink(self.root / "outdir", model / "dirlink")
        os.link(outside, model / "hard.bin")
        os.mkfifo(model / "fifo.bin")
        self.model = model

    def write(self, name: str, data: bytes) -> Path:
        path = self.model / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        path.write_bytes(data)
        return path

    def unpack(self, name: str, data: bytes) -> Path:
        """A zipped folder (a .mlpackage) unpacked under ``model/name`` (names leaving it are
        dropped: the harness's own unpacking must not write outside)."""
        path = self.model / name
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir()
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            for info in zf.infolist()[:64]:
                target = (path / info.filename).resolve()
                if path.resolve() not in target.parents or info.file_size > 64 << 20:
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                if not info.is_dir():
                    target.write_bytes(zf.read(info))
        return path

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


_WS: list[Workspace] = []
_SESSION: list[Any] = []


@contextlib.contextmanager
def _setting(module: Any, name: str, value: Any) -> Iterator[None]:
    """``module.name`` is ``value`` for the block (a harness's own limit), then what it was."""
    before = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, before)


def workspace() -> Workspace:
    if not _WS:
        from unframe import sandbox

        # One sandbox session for the whole campaign: each run would otherwise start (and import
        # TensorRT or coremltools in) a fresh child, as one conversion does. A crashed child is
        # replaced on the next call either way.
        _SESSION.append(sandbox.session())  # kept referenced: a collected one would end itself
        _SESSION[0].__enter__()
        _WS.append(Workspace())
    return _WS[0]


def end() -> None:
    """Close the campaign's sandbox session and remove the workspace (tests call this; a
    campaign just exits)."""
    while _SESSION:
        _SESSION.pop().__exit__(None, None, None)
    while _WS:
        _WS.pop().cleanup()


@contextlib.contextmanager
def unchanged(path: Path) -> Iterator[None]:
    before = path.read_bytes() if path.is_file() else None
    yield
    if before is not None and path.read_bytes() != before:
        raise InputModified(f"{path} was modified")


def _untag(data: bytes, kinds: int) -> tuple[int, bytes]:
    return (data[0] % kinds, data[1:]) if data else (0, b"")


# ----------------------------------------------------------------------------- harnesses ------
def onnx_load(data: bytes) -> None:
    """The ONNX loader and external-data resolver: load, then read every tensor's data."""
    import onnx_ir as ir

    from unframe import io as uio
    from unframe import limits

    path = workspace().write("model.onnx", data)
    with unchanged(path), limits.memory_budget(LIMITS["max_memory"]):
        model = uio.load_model(path)
        for node in ir.traversal.RecursiveGraphIterator(model.graph):
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.TENSOR:
                    attr.value.numpy()
        for value in _initializers(model):
            if value.const_value is not None:
                value.const_value.numpy()


def _initializers(model: Any) -> list[Any]:
    from unframe import io

    return io.all_initializers(model)


INSPECT_KINDS = ("model.onnx", "model.mlpackage", "model.engine")


def inspect(data: bytes) -> None:
    """``unframe inspect`` on an ONNX file, a zipped .mlpackage or an engine + sidecar."""
    from rich.console import Console

    from unframe.cli.inspect import describe, render

    kind, body = _untag(data, len(INSPECT_KINDS))
    ws = workspace()
    name = INSPECT_KINDS[kind]
    if name.endswith(".mlpackage"):
        try:
            path = ws.unpack(name, body)
        except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError, NotImplementedError, RuntimeError):
            return  # not a zip: the harness's packing, not unframe, refused it
    elif name.endswith(".engine"):
        engine, _, sidecar = body.partition(b"\n--sidecar--\n")
        path = ws.write(name, engine)
        ws.write(name + ".json", sidecar)
    else:
        path = ws.write(name, body)
    with unchanged(path):
        render(describe(str(path)), Console(file=io.StringIO(), width=100))


def check(data: bytes) -> None:
    """``unframe check --to all``: every backend's pre-flight (TensorRT's parser sandboxed)."""
    import unframe

    path = workspace().write("model.onnx", data)
    with unchanged(path):
        unframe.check(str(path), to="all")


def opset(data: bytes) -> None:
    """The version converter with its parity check: to an opset chosen by the first byte."""
    import unframe

    target, body = _untag(data, 22)
    path = workspace().write("model.onnx", body)
    with unchanged(path):
        unframe.convert_opset(str(path), 7 + target, **LIMITS)


def coreml(data: bytes) -> None:
    """ONNX -> Core ML (the translator), checked with the MIL evaluator; kept in memory."""
    import unframe

    path = workspace().write("model.onnx", data)
    with unchanged(path):
        unframe.convert(str(path), to="coreml", **LIMITS)


def tensorrt(data: bytes) -> None:
    """ONNX -> TensorRT engine: preparation passes, then the parser and builder in the sandbox."""
    import unframe

    path = workspace().write("model.onnx", data)
    with unchanged(path):
        unframe.convert(str(path), to="tensorrt", builder_optimization_level=0, **LIMITS)


def mil_eval(data: bytes) -> None:
    """The MIL evaluator on a (zipped) foreign .mlpackage: load it (sandboxed), run it."""
    from unframe import limits
    from unframe.converters.backends.coreml.mil_eval import MILRunner
    from unframe.validate.inputs import random_tensor

    try:
        path = workspace().unpack("prog.mlpackage", data)
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError, NotImplementedError, RuntimeError):
        return
    import numpy as np

    with limits.memory_budget(LIMITS["max_memory"]), \
            limits.time_limit(LIMITS["parity_timeout"], "the MIL evaluator"):
        runner = MILRunner(path)
        rng = np.random.default_rng(0)
        feeds = {}
        for spec in runner.input_specs():
            shape = tuple(d if isinstance(d, int) else 2 for d in (spec.shape or ()))
            feeds[spec.name] = random_tensor(rng, shape, _ir_dtype(spec.dtype))
        runner.run(feeds)


def _ir_dtype(name: str) -> Any:
    import numpy as np
    import onnx_ir as ir

    try:
        return ir.DataType.from_numpy(np.dtype(name))
    except (TypeError, ValueError):
        return ir.DataType.FLOAT


def torch_pt2(data: bytes) -> None:
    """The torch loader on a .pt2 archive (ExportedProgram; TorchScript and pickles by content)."""
    import unframe

    path = workspace().write("model.pt2", data)
    with unchanged(path):
        unframe.load(str(path), from_="torch")


KERAS_KINDS = ("model.keras", "model.h5")


def keras(data: bytes) -> None:
    """The Keras loaders (.keras zip, legacy .h5), in safe mode (no --trust)."""
    import unframe
    from unframe.converters.frontends._tf import probes

    kind, body = _untag(data, len(KERAS_KINDS))
    path = workspace().write(KERAS_KINDS[kind], body)
    with unchanged(path), _setting(probes, "BASE_SECONDS", KERAS_READER_SECONDS):
        unframe.load(str(path), from_="tf")


def tflite(data: bytes) -> None:
    """The TFLite loader (the interpreter sandboxed)."""
    import unframe

    path = workspace().write("model.tflite", data)
    with unchanged(path):
        unframe.load(str(path), from_="tf")


def skops(data: bytes) -> None:
    """The scikit-learn loader on a .skops archive, without --trust."""
    import unframe

    path = workspace().write("model.skops", data)
    with unchanged(path):
        unframe.load(str(path), from_="sklearn")


def zoo_manifest(data: bytes) -> None:
    """The zoo's manifest reader (and the folder discovery it falls back to)."""
    from unframe.zoo.manifest import check_out_dir, load_source

    path = workspace().write("manifest.toml", data)
    with unchanged(path):
        source = load_source(path)
        check_out_dir(source, workspace().root / "out")


# ------------------------------------------------------------------------------- registry ----
@dataclass
class Harness:
    name: str
    run: Callable[[bytes], None]
    mutator: str  # a key of mutators_for()
    needs: tuple[str, ...] = ()  # importable modules the harness needs (else it is skipped)
    max_len: int = 1 << 20
    instrument: tuple[str, ...] = ("unframe",)
    about: str = field(default="")

    def __post_init__(self) -> None:
        self.about = self.about or (self.run.__doc__ or "").strip().splitlines()[0]

    def available(self) -> str | None:
        """None when the harness can run here, else what is missing."""
        import importlib.util

        missing = [m for m in self.needs if importlib.util.find_spec(m) is None]
        return f"needs {', '.join(missing)}" if missing else None


HARNESSES: dict[str, Harness] = {h.name: h for h in (
    Harness("onnx_load", onnx_load, "onnx", instrument=("unframe", "onnx_ir")),
    Harness("inspect", inspect, "inspect", needs=("coremltools",)),
    Harness("check", check, "onnx", needs=("coremltools",)),
    Harness("opset", opset, "tagged_onnx"),
    Harness("coreml", coreml, "onnx", needs=("coremltools",)),
    Harness("mil_eval", mil_eval, "mlpackage", needs=("coremltools",)),
    Harness("tensorrt", tensorrt, "onnx", needs=("tensorrt_rtx",)),
    Harness("torch_pt2", torch_pt2, "zip", needs=("torch",), max_len=4 << 20),
    Harness("keras", keras, "keras", needs=("keras", "tensorflow"), max_len=8 << 20),
    Harness("tflite", tflite, "bytes", needs=("tensorflow",)),
    Harness("skops", skops, "zip", needs=("skops", "sklearn")),
    Harness("zoo_manifest", zoo_manifest, "toml", max_len=64 << 10),
)}


OUTCOMES: collections.Counter[str] = collections.Counter()


def one_input(harness: Harness, data: bytes) -> str:
    """Run ``harness`` on ``data`` under the contract: returns "ok" or the typed error's kind;
    raises on a finding. Outcomes are tallied in OUTCOMES (a crash or a timeout the sandbox
    turned into a typed error counts as "sandboxed")."""
    try:
        harness.run(data)
    except UnframeError as exc:
        if exc.exit_code == 1:
            raise
        sandboxed = "in a child process" in exc.message or "its child process was stopped" in exc.message
        OUTCOMES["sandboxed" if sandboxed else exc.kind] += 1
        return exc.kind
    OUTCOMES["ok"] += 1
    return "ok"


def stats() -> dict[str, Any]:
    """Outcomes so far, and how often each sandbox child had to be started (crashes, timeouts)."""
    from unframe import sandbox

    return {"outcomes": dict(OUTCOMES), "child_starts": {n: b.starts for n, b in sandbox._children.items()}}
