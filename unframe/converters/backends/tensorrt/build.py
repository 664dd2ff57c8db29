"""Parse a prepared ONNX file and build a serialized engine with TensorRT's builder.

Strongly typed network (precision comes from the graph), one optimization profile, optional
workspace limit, timing cache, version- and hardware-compatibility. Failures become typed errors:
a parse error names the node, op and parser message; a build that returns nothing says the likely
cause (workspace, precision, shape range) from the builder's logged errors.

The parser and the builder run in the conversion's TensorRT child process (``unframe.sandbox``):
both are native code fed a graph unframe can't vouch for, and a segfault there must not take
unframe down. ``parse_in_child`` keeps the parsed network in the child for ``build_in_child``;
a crash while parsing is bad input (exit 3), while building a tool failure (exit 9).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

from unframe import sandbox, timing
from unframe.converters.backends.tensorrt import trtmodule
from unframe.errors import (
    Blocker,
    ConversionError,
    InputError,
    MissingExtraError,
    UnsupportedError,
    UsageError,
)

if TYPE_CHECKING:
    from unframe.converters.backends.tensorrt.profiles import ProfileShape

SANDBOX = "tensorrt"  # the child every TensorRT call of a conversion shares


class Ranges(NamedTuple):
    """One input's profile shapes as they cross to the child: plain tuples, so that the child
    never imports onnx-ir (and with it sympy: seconds) to unpickle them."""

    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]


def parse_timeout(onnx_path: Path) -> float:
    """Seconds the parser gets (TensorRT imported): a few, plus 20 MB/s of model and weights.
    The builder has no limit: large models take long, legitimately."""
    data = onnx_path.with_name(onnx_path.name + ".data")
    size = onnx_path.stat().st_size + (data.stat().st_size if data.exists() else 0)
    return 10.0 + size / 20e6


def import_tensorrt() -> None:
    """(In the child, before a timed call.) TensorRT's import is not the parser's time."""
    trtmodule.load_or_none()

HARDWARE_LEVELS = {
    "none": "NONE", "ampere+": "AMPERE_PLUS", "ampere_plus": "AMPERE_PLUS",
    "same-cc": "SAME_COMPUTE_CAPABILITY", "same_compute_capability": "SAME_COMPUTE_CAPABILITY",
}
CAUSES = (
    ("workspace", ("memory", "workspace", "allocat", "out of memory")),
    ("shape range", ("profile", "dimension", "shape", "dims")),
    ("precision", ("type", "precision", "fp16", "bf16", "half", "fp8", "int8")),
)


@dataclass
class BuildOptions:
    workspace: int | None = None
    timing_cache: Path | None = None
    version_compatible: bool = False
    hardware_compatibility: str | None = None
    optimization_level: int | None = None


@dataclass
class BuildResult:
    engine: bytes
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    flags: dict[str, Any] = field(default_factory=dict)
    network: dict[str, Any] = field(default_factory=dict)  # see network_summary()
    module: str = ""  # tensorrt or tensorrt_rtx, as imported in the child
    version: str = ""


def parse(trt: ModuleType, onnx_path: Path, logger: Any) -> tuple[Any, Any, Any]:
    """(builder, network, parser) for the ONNX file; UnsupportedError naming every node the
    parser refused."""
    builder = trt.Builder(logger)
    network = builder.create_network(trtmodule.strongly_typed_flags(trt))
    parser = trt.OnnxParser(network, logger)
    with trtmodule.stderr_lines() as printed:
        parsed = parser.parse_from_file(os.fspath(onnx_path))
    if not parsed:
        blockers = parse_errors(parser, printed.lines)
        first = blockers[0] if blockers else Blocker("?", "the parser failed without saying why")
        raise UnsupportedError(
            f"TensorRT's ONNX parser refused {onnx_path.name}: {first}"
            + (f" (+{len(blockers) - 1} more)" if len(blockers) > 1 else ""),
            "see the blockers; `unframe check MODEL --to tensorrt` lists what the table knows",
            blockers=blockers)
    return builder, network, parser


def parse_errors(parser: Any, printed: list[str] | None = None) -> list[Blocker]:
    """One blocker per parser error; one that names no node (the model as a whole) reads what
    the parser printed, which says more than its assertion."""
    out: list[Blocker] = []
    for i in range(parser.num_errors):
        error = parser.get_error(i)
        message = " ".join(str(error.desc()).split())
        if int(error.node()) < 0 and printed:
            out.append(Blocker("*", f"parser: {'; '.join(printed[:2])}"))
            continue
        out.append(Blocker(str(error.node_operator()) or "?", f"parser: {message}",
                           str(error.node_name()) or f"#{int(error.node())}"))
    return out


def build(onnx_path: Path, profile: dict[str, ProfileShape], options: BuildOptions) -> BuildResult:
    """Parse ``onnx_path`` and build an engine, both in the conversion's TensorRT child."""
    ranges = {name: Ranges(tuple(p.min), tuple(p.opt), tuple(p.max)) for name, p in profile.items()}
    sandbox.call(SANDBOX, parse_in_child, onnx_path, what=f"TensorRT's ONNX parser on {onnx_path.name}",
                 timeout=parse_timeout(onnx_path), preload=import_tensorrt, crash_error=InputError,
                 hint="the model holds something TensorRT's parser can't take; `unframe check --to "
                      "tensorrt` lists what the support table knows")
    return sandbox.call(SANDBOX, build_in_child, ranges, options, what="TensorRT's builder",
                        crash_error=ConversionError,
                        hint="rerun with --debug and report the model; --json shows the builder's last output")


# State the parse leaves in the child for the build: (module, logger, builder, network, parser).
_parsed: list[Any] = []


def _module() -> ModuleType:
    trt = trtmodule.load_or_none()
    if trt is None:
        raise MissingExtraError("building a TensorRT engine", "tensorrt", "tensorrt-rtx-cu12 (or NVIDIA's tensorrt)")
    return trt


def parse_in_child(onnx_path: Path) -> None:
    """(In the child.) Parse the ONNX file into a network kept for ``build_in_child``."""
    _parsed.clear()
    trt = _module()
    logger = trtmodule.CollectingLogger(trt)
    builder, network, parser = parse(trt, onnx_path, logger)
    _parsed.extend((trt, logger, builder, network, parser))


def build_in_child(profile: dict[str, Ranges], options: BuildOptions) -> BuildResult:
    """(In the child.) Build the network the last ``parse_in_child`` left."""
    if not _parsed:
        raise ConversionError("TensorRT's builder was asked to build before a parse",
                              "rerun with --debug and report it")
    trt, logger, builder, network, _parser = _parsed
    try:
        result = build_network(trt, builder, network, logger, profile, options)
    finally:
        _parsed.clear()
    result.module, result.version = trt.__name__, str(trt.__version__)
    return result


def build_network(trt: ModuleType, builder: Any, network: Any, logger: Any,
                  profile: dict[str, Ranges], options: BuildOptions) -> BuildResult:
    config = builder.create_builder_config()
    flags = _configure(trt, builder, config, profile, options)
    cache = _load_timing_cache(config, options.timing_cache)
    with timing.tool(f"{trt.__name__} {trt.__version__} build"):
        serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise _build_failure(logger, builder, profile)
    result = BuildResult(engine=bytes(serialized), flags=flags, network=network_summary(network),
                         warnings=[m for lvl, m in logger.messages if lvl == "WARNING"][:20])
    if options.timing_cache is not None:
        _save_timing_cache(config, options.timing_cache)
        result.notes.append(f"timing cache {'updated' if cache else 'written'}: "
                            f"{options.timing_cache}")
    return result


def verdict_in_child(path: Path) -> tuple[bool, dict[int, str], str, list[str]] | None:
    """(In the child.) ``supports_model_v2`` on the file at ``path``: (supported, failed nodes
    by index with the parser's message, module name, what the parser printed to stderr); None
    without TensorRT."""
    trt = trtmodule.load_or_none()
    if trt is None:
        return None
    logger = trtmodule.CollectingLogger(trt)
    builder = trt.Builder(logger)
    network = builder.create_network(trtmodule.strongly_typed_flags(trt))
    parser = trt.OnnxParser(network, logger)
    with trtmodule.stderr_lines() as printed:
        supported = bool(parser.supports_model_v2(path.read_bytes(), str(path)))
    failed: dict[int, str] = {}
    for i in range(parser.num_errors):
        error = parser.get_error(i)
        failed.setdefault(int(error.node()), " ".join(_text(error.desc).split()))
    return supported and not failed, failed, trt.__name__, printed.lines


def _text(getter: Any) -> str:
    """A parser message: it quotes the model's own strings, which need not be UTF-8 (pybind11
    then raises on the conversion)."""
    try:
        return str(getter())
    except UnicodeDecodeError:
        return "(a message that is not UTF-8 text: the model's names are not valid text)"


def network_summary(network: Any) -> dict[str, Any]:
    """The parsed network's I/O (name, dtype, shape with -1 for dynamic dims) and how many layer
    outputs it computes in each type: what the sidecar records and tests check."""
    def io(tensor: Any) -> dict[str, Any]:
        return {"name": tensor.name, "dtype": _type_name(tensor.dtype),
                "shape": [int(d) for d in tensor.shape]}

    types: dict[str, int] = {}
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        for j in range(layer.num_outputs):
            kind = _type_name(layer.get_output(j).dtype)
            types[kind] = types.get(kind, 0) + 1
    return {"inputs": [io(network.get_input(i)) for i in range(network.num_inputs)],
            "outputs": [io(network.get_output(i)) for i in range(network.num_outputs)],
            "layers": network.num_layers, "layer_output_types": dict(sorted(types.items()))}


def _type_name(dtype: Any) -> str:
    return str(dtype).rsplit(".", 1)[-1]


def _configure(trt: ModuleType, builder: Any, config: Any, profile: dict[str, Ranges],
               options: BuildOptions) -> dict[str, Any]:
    flags: dict[str, Any] = {}
    if options.workspace is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(options.workspace))
        flags["workspace"] = int(options.workspace)
    if options.optimization_level is not None:
        config.builder_optimization_level = int(options.optimization_level)
        flags["builder_optimization_level"] = int(options.optimization_level)
    if options.version_compatible:
        flag = getattr(trt.BuilderFlag, "VERSION_COMPATIBLE", None)
        # TensorRT-RTX has the flag but no lean runtime to embed: its build fails late.
        if flag is None or trt.__name__ == "tensorrt_rtx":
            raise UsageError(f"{trt.__name__} has no version-compatible engines",
                             "drop --version-compatible")
        config.set_flag(flag)
        flags["version_compatible"] = True
    if options.hardware_compatibility:
        flags["hardware_compatibility"] = _hardware(trt, config, options.hardware_compatibility)
    if profile:
        opt_profile = builder.create_optimization_profile()
        for name, shape in profile.items():
            opt_profile.set_shape(name, shape.min, shape.opt, shape.max)
        config.add_optimization_profile(opt_profile)
    return flags


def _hardware(trt: ModuleType, config: Any, level: str) -> str:
    key = HARDWARE_LEVELS.get(level.lower().strip())
    enum = getattr(trt, "HardwareCompatibilityLevel", None)
    if key is None:
        raise UsageError(f"unknown --hardware-compatibility {level!r}",
                         f"use one of: {', '.join(sorted(HARDWARE_LEVELS))}")
    if enum is None or not hasattr(config, "hardware_compatibility_level"):
        raise UsageError(f"{trt.__name__} has no hardware-compatibility levels",
                         "drop --hardware-compatibility")
    config.hardware_compatibility_level = getattr(enum, key)
    return key.lower()


def _load_timing_cache(config: Any, path: Path | None) -> bool:
    """Loads the cache at ``path`` if it exists (else starts an empty one); True if loaded."""
    data = path.read_bytes() if path is not None and path.is_file() else b""
    cache = config.create_timing_cache(data)
    config.set_timing_cache(cache, ignore_mismatch=False)
    return bool(data)


def _save_timing_cache(config: Any, path: Path) -> None:
    cache = config.get_timing_cache()
    if cache is None:
        return
    data = bytes(cache.serialize())
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, dir=path.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


# Builder errors that mean this TensorRT can't implement something the parser took: a refusal
# (exit 4, the message as the blocker), not a failed conversion. Measured with tensorrt-rtx 1.7
# (NonMaxSuppression; torchvision's NMS inside its `if boxes.numel() == 0` branch).
BUILDER_REFUSALS = (
    ("no runners that implement it", "the builder has no implementation of this layer"),
    ("data-dependent shapes are only allowed in the top-level scope",
     "the builder takes data-dependent shapes only outside If and Loop bodies"),
)


def _build_failure(logger: Any, builder: Any, profile: dict[str, Ranges]) -> ConversionError | UnsupportedError:
    errors = list(logger.errors())
    recorder = getattr(builder, "error_recorder", None)
    if recorder is not None:
        errors.extend(str(recorder.get_error_desc(i)) for i in range(recorder.num_errors()))
    text = " ".join(errors).lower()
    refused = [(why, e) for e in errors for words, why in BUILDER_REFUSALS if words in e.lower()]
    if refused:
        blockers = [Blocker("*", f"TensorRT's builder: {why} ({' '.join(e.split())[:300]})")
                    for why, e in refused]
        return UnsupportedError(f"TensorRT's builder can't build this network: {refused[0][0]}",
                                "build with NVIDIA's full tensorrt package, or cut the part out of the graph "
                                "(see the blockers)", blockers=blockers)
    cause = next((name for name, words in CAUSES if any(w in text for w in words)), None)
    first = errors[0] if errors else "no error was logged"
    hints = {
        "workspace": "raise --workspace (or free GPU memory)",
        "shape range": f"check the optimization profile {_describe(profile)} against the model",
        "precision": "an op can't run in the requested precision: try --precision fp32",
        None: "rerun with --debug and report the builder log",
    }
    return ConversionError(
        "TensorRT's builder returned no engine"
        + (f" (likely cause: {cause})" if cause else "") + f": {first}",
        hints[cause], details={"builder_errors": errors[:20]})


def _describe(profile: dict[str, Ranges]) -> str:
    return "; ".join(f"{n}: {p.min}..{p.max}" for n, p in profile.items()) or "(static)"
