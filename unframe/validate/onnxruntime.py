"""Runners for ONNX graphs: onnxruntime, with onnx's reference evaluator as the fallback for
graphs onnxruntime can't load (e.g. an opset newer than it supports)."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import onnx
import onnx_ir as ir

from unframe import sandbox, timing
from unframe.distributions import dist_version
from unframe.errors import InputError, UnframeError
from unframe.validate.runner import Runner, TensorSpec


def _version(dist: str) -> str:
    return dist_version(dist) or "?"


ModelLike = "ir.Model | onnx.ModelProto | str | os.PathLike[str]"


class _ModelFile:
    """Gives a path or serialized bytes for any model form, writing a file (``io.tool_file``)
    only when the model has external data or is too large to serialize in memory."""

    def __init__(self, model: Any) -> None:
        self._file: contextlib.ExitStack | None = None
        self.path: str | None = None
        self.data: bytes | None = None
        if isinstance(model, (str, os.PathLike)):
            self.path = os.fspath(model)
        elif isinstance(model, onnx.ModelProto):
            self.data = model.SerializeToString()
        elif isinstance(model, ir.Model):
            from unframe import io

            if io.needs_external_data(model, io.TOOL_INLINE_BYTES):
                self._file = contextlib.ExitStack()
                self.path = os.fspath(self._file.enter_context(io.tool_file(model)))
            else:
                self.data = ir.to_proto(model).SerializeToString()
        else:
            raise TypeError(f"can't run a {type(model).__name__} as ONNX")

    def proto(self) -> onnx.ModelProto:
        if self.path:
            return onnx.load(self.path)
        return onnx.load_from_string(self.data)

    def cleanup(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


_DEFAULT_THREADS: list[int | None] = [None]


def set_default_threads(threads: int | None) -> None:
    """Threads per onnxruntime session made from now on in this process (None: onnxruntime's
    choice). Zoo workers run side by side, one thread each."""
    _DEFAULT_THREADS[0] = threads


# onnxruntime graph rewrites that change what a graph computes, off in every session: Pad_Fusion
# folds a zero Pad into a following MaxPool's pads, which MaxPool reads as -inf (a window of
# negative values then gives its max, not the Pad's 0; Keras ResNet50V2's stem, measured: 1 % of
# the logits' scale; the same bug as onnx-optimizer's fuse_pad_into_pool)
DISABLED_REWRITES = ("Pad_Fusion",)


def rewrite_hazards(model: ir.Model) -> list[str]:
    """Notes for the user of a written graph that onnxruntime's default rewrites would compute
    differently (``DISABLED_REWRITES``): parity ran with them off."""
    def zero_pad(node: ir.Node | None) -> bool:
        if node is None or node.op_type != "Pad" or node.domain not in ("", "ai.onnx"):
            return False
        mode = node.attributes.get("mode")
        value = node.inputs[2] if len(node.inputs) > 2 else None
        const = None if value is None else value.const_value
        return (mode is None or mode.value == "constant") and (
            value is None or (const is not None and not np.any(const.numpy())))

    pools = [n for n in ir.traversal.RecursiveGraphIterator(model.graph)
             if n.op_type == "MaxPool" and n.inputs and n.inputs[0] is not None and zero_pad(n.inputs[0].producer())]
    if not pools:
        return []
    return [f"{len(pools)} MaxPool(s) read a zero Pad ({pools[0].name or 'unnamed'}): onnxruntime's Pad_Fusion "
            "(graph optimization level basic and up) folds it into the pool, whose padding counts as "
            "-inf, and changes the results where a window's values are negative; parity ran with it "
            "off: create sessions with disabled_optimizers=['Pad_Fusion']"]


class OnnxRuntimeRunner(Runner):
    """onnxruntime on the CPU, graph optimizations limited to basic ones (and those of them that
    change results, ``DISABLED_REWRITES``, off) so that what runs is the graph as written. Inside ``untrusted_graphs()`` the session lives in a child process
    (``RemoteSession``): onnxruntime's kernels and graph loader are native code a hostile graph
    can crash (SIGFPE, SIGSEGV), and a crash there is a typed error, not a dead unframe."""

    def __init__(self, model: Any, *, providers: list[str] | None = None,
                 optimization: str = "basic", threads: int | None = None, isolated: bool = False) -> None:
        self.name = f"onnxruntime {_version('onnxruntime')}"
        src = _ModelFile(model)
        config = SessionConfig(optimization, threads or _DEFAULT_THREADS[0],
                               tuple(providers or ["CPUExecutionProvider"]))
        self.remote: RemoteSession | None = None
        if _untrusted[0] or isolated:
            self.remote = RemoteSession(src, config)  # keeps ``src`` (a restarted child reopens it)
            self._inputs, self._outputs = self.remote.inputs, self.remote.outputs
            return
        try:
            self.session = config.session(src.path or src.data)
        finally:
            src.cleanup()
        self._inputs = [IOSpec(i.name, tuple(i.shape), i.type) for i in self.session.get_inputs()]
        self._outputs = [o.name for o in self.session.get_outputs()]

    def input_specs(self) -> list[TensorSpec]:
        return [TensorSpec(i.name, tuple(i.shape), _ort_type(i.type)) for i in self._inputs]

    def output_names(self) -> list[str]:
        return list(self._outputs)

    def close(self) -> None:
        """Let the session go (its weights with it), here or in the child."""
        if self.remote is not None:
            self.remote.close()
        self.session = None

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        from unframe import limits

        wanted = {i.name for i in self._inputs}
        feeds = {k: v for k, v in feeds.items() if k in wanted}
        if self.remote is not None:
            values = self.remote.run(feeds)
        else:
            values = _run_session(self.session, feeds, limits.remaining())
        return {n: _plain(v) for n, v in zip(self._outputs, values, strict=True)}


class IOSpec(NamedTuple):
    """An onnxruntime input's name, shape and type string (picklable, unlike NodeArg)."""

    name: str
    shape: tuple[Any, ...]
    type: str


class SessionConfig(NamedTuple):
    optimization: str
    threads: int | None
    providers: tuple[str, ...]

    def session(self, model: str | bytes) -> Any:
        import onnxruntime as ort

        from unframe.quiet import debug_enabled

        opts = ort.SessionOptions()
        # 4 = fatal only: a refused model is reported through the exception (typed by the
        # pipeline); onnxruntime's own log line would only add a second, colored error line
        opts.log_severity_level = 3 if debug_enabled() else 4
        opts.graph_optimization_level = {
            "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[self.optimization]
        if self.threads:
            opts.intra_op_num_threads = self.threads
            opts.inter_op_num_threads = 1
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        with timing.tool(f"onnxruntime {_version('onnxruntime')}"):
            return ort.InferenceSession(model, opts, providers=list(self.providers),
                                        disabled_optimizers=list(DISABLED_REWRITES))


def _run_session(session: Any, feeds: Mapping[str, np.ndarray], seconds: float | None) -> list[Any]:
    """``session.run`` under the current time limit (onnxruntime's own terminate flag)."""
    import onnxruntime as ort

    from unframe import limits

    options = ort.RunOptions()
    timer = limits.cancel_after(lambda: setattr(options, "terminate", True))
    try:
        return session.run(None, dict(feeds), options)
    except Exception:
        limits.raise_if_expired()  # cancelled by the parity time limit: say that, not ORT's words
        raise
    finally:
        if timer is not None:
            timer.cancel()


# -------------------------------------------------------------------- graphs from outside ------
SANDBOX = "onnxruntime"
OPEN_SECONDS = 120.0  # session creation of a graph that takes longer is refused as a hang
KEEP_BYTES = 256 << 20  # a serialized graph up to this size is kept to reopen it in a new child
REFERENCE_SANDBOX = "onnx-reference"
REFERENCE_BASELINE = 2 << 30  # the reference child's own address space (Python, numpy, onnx)
_untrusted = [0]


@contextlib.contextmanager
def untrusted_graphs() -> Iterator[None]:
    """While inside, every onnxruntime session is made and run in the onnxruntime child process
    (the ONNX frontend holds this for a conversion of a graph it loaded: a file, or a proto from
    anywhere). The child outlives conversions (one onnxruntime import per process); its sessions
    are dropped when the outermost block ends."""
    _untrusted[0] += 1
    try:
        yield
    finally:
        _untrusted[0] -= 1
        if not _untrusted[0]:
            for name in (SANDBOX, REFERENCE_SANDBOX):
                box = sandbox.existing(name)
                if box is not None and box.alive():
                    with contextlib.suppress(UnframeError, sandbox.SandboxedFailure):
                        box.call(_child_forget, what=f"{name} (dropping sessions)", timeout=30)


class RemoteSession:
    """An onnxruntime session in the ``SANDBOX`` child: opened there, run there; reopened when
    the child was restarted (after a crash or a time limit) since it was opened."""

    def __init__(self, src: _ModelFile, config: SessionConfig | None, *, box: str = SANDBOX,
                 memory_limit: int | None = None) -> None:
        """``config`` None: onnx's reference evaluator instead of onnxruntime. ``memory_limit``:
        the child's address space (a fresh child when it differs from the running one's)."""
        self.src: _ModelFile | None = src
        self.config = config
        self.box_name, self.memory_limit = box, memory_limit
        self.key = uuid.uuid4().hex
        self.generation = -1
        self.inputs: list[IOSpec] = []
        self.outputs: list[str] = []
        self._open()

    def _box(self) -> sandbox.Sandbox:
        box = sandbox.shared(self.box_name, keep=True)
        if box.memory_limit != self.memory_limit:
            box.close()  # restarted with this limit on the next call
            box.memory_limit = self.memory_limit
        return box

    def _open(self) -> None:
        box = self._box()
        assert self.src is not None
        what = "onnxruntime" if self.config is not None else "onnx's reference evaluator"
        with timing.tool(self._tool()):  # in the child: its start, the import, the session
            reply = box.call(_child_open, self.key, self.src.path, self.src.data, self.config,
                             what=f"{what} loading the graph", timeout=OPEN_SECONDS,
                             preload=_child_import if self.config is not None else _child_import_reference,
                             hint="the graph holds something onnxruntime can't take; check it with "
                                  "`unframe check`, or convert with --no-validate")
        if isinstance(reply, str):  # onnxruntime refused the graph (an exception, not a crash)
            raise RuntimeError(reply)
        self.inputs, self.outputs = reply
        self.generation = box.starts
        if self.src.data is not None and len(self.src.data) > KEEP_BYTES:
            self.src = None  # not held twice: a child restarted since can't reopen it (said so)
        elif self.src.path is not None and _in_user_folder(self.src.path):
            self.src.cleanup()  # a graph file beside the user's data goes once read (no reopen)
            self.src = None

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[Any]:
        box = self._box()
        if not box.alive() or box.starts != self.generation:
            self._reopen("was restarted (a crash or a time limit before)")
        reply = self._call_run(box, feeds)
        if reply is _FORGOTTEN:  # the child dropped its sessions (the outermost untrusted block
            self._reopen("dropped it")  # ended) while this runner was still held
            reply = self._call_run(self._box(), feeds)
        if isinstance(reply, str):
            from unframe import limits

            limits.raise_if_expired()
            raise RuntimeError(reply)
        return reply

    def _call_run(self, box: sandbox.Sandbox, feeds: Mapping[str, np.ndarray]) -> Any:
        from unframe import limits

        seconds = limits.remaining()
        what = "onnxruntime" if self.config is not None else "onnx's reference evaluator"
        try:
            with timing.tool(self._tool()):
                return box.call(_child_run, self.key, dict(feeds), seconds, what=f"{what} running the graph",
                                timeout=None if seconds is None else max(seconds, 0.0) + 5.0,
                                hint="the graph or its inputs hold something onnxruntime can't take")
        except UnframeError:
            limits.raise_if_expired()  # the time limit stopped the child: say that
            raise

    def _tool(self) -> str:
        return f"onnxruntime {_version('onnxruntime')}" if self.config is not None else f"onnx.reference {_version('onnx')}"

    def close(self) -> None:
        """The child drops this session (nothing to do where the child is gone)."""
        box = sandbox.existing(self.box_name)
        if box is not None and box.alive() and box.starts == self.generation:
            with contextlib.suppress(UnframeError, sandbox.SandboxedFailure):
                box.call(_child_close, self.key, what="onnxruntime (closing a session)", timeout=30)
        self.generation = -1

    def _reopen(self, why: str) -> None:
        if self.src is None:
            raise InputError(f"onnxruntime's child process {why} and the graph is too large to "
                             "send it again", "convert again; --no-validate converts without running "
                             "the graph")
        self._open()


def _in_user_folder(path: str) -> bool:
    from unframe import io

    return io.in_user_folder(path)


def _child_import() -> None:
    """(In the child, before the first timed call.)"""
    import onnxruntime  # noqa: F401


def _child_import_reference() -> None:
    """(In the reference child, before the first timed call.)"""
    import onnx.reference  # noqa: F401


_SESSIONS: dict[str, Any] = {}  # (in the child) open sessions by key
_FORGOTTEN = None  # (the child's reply) no session under that key: dropped by _child_forget


def _child_open(key: str, path: str | None, data: bytes | None, config: SessionConfig | None
                ) -> tuple[list[IOSpec], list[str]] | str:
    """(In the child.) Open a session (``config`` None: onnx's reference evaluator); a refusal
    comes back as its message."""
    if config is None:
        from onnx.reference import ReferenceEvaluator

        try:
            proto = onnx.load(path) if path else onnx.load_from_string(data)
            _SESSIONS[key] = ReferenceEvaluator(proto)
        except Exception as exc:  # noqa: BLE001
            return f"{type(exc).__name__}: {exc}"
        inits = {i.name for i in proto.graph.initializer}
        return ([IOSpec(i.name, (), "") for i in proto.graph.input if i.name not in inits],
                [o.name for o in proto.graph.output])
    try:
        session = config.session(path or data)
    except Exception as exc:  # noqa: BLE001 - the parent raises it as onnxruntime would
        return f"{type(exc).__name__}: {exc}"
    _SESSIONS[key] = session
    return ([IOSpec(i.name, tuple(i.shape), i.type) for i in session.get_inputs()],
            [o.name for o in session.get_outputs()])


def _child_run(key: str, feeds: dict[str, np.ndarray], seconds: float | None) -> list[Any] | str:
    """(In the child.) Run a session under ``seconds`` (onnxruntime's terminate flag)."""
    from unframe import limits

    session = _SESSIONS.get(key)
    if session is None:
        return _FORGOTTEN
    try:
        with limits.time_limit(seconds, "onnxruntime"):
            if not hasattr(session, "get_inputs"):  # onnx's reference evaluator
                return [_plain(v) for v in _run_reference(session, feeds)]
            return [_plain(v) for v in _run_session(session, feeds, seconds)]
    except limits.TimeLimitExceeded:
        return "onnxruntime ran past the time limit"
    except MemoryError:
        raise  # the sandbox says it as a resource limit (the child's address space is bounded)
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"


def _child_close(key: str) -> None:
    """(In the child.) Drop one session."""
    _SESSIONS.pop(key, None)
    import gc

    gc.collect()


def _child_forget() -> None:
    """(In the child.) Drop every session."""
    _SESSIONS.clear()


class ReferenceRunner(Runner):
    """onnx.reference.ReferenceEvaluator: slow, but knows every opset of the installed onnx."""

    def __init__(self, model: Any, *, why: str = "") -> None:
        from onnx.reference import ReferenceEvaluator

        src = _ModelFile(model)
        self.name = f"onnx.reference {_version('onnx')}"
        self.why = why
        self.remote: RemoteSession | None = None
        if _untrusted[0]:  # numpy on a graph from outside: in a child, its memory bounded
            from unframe import limits

            step = 256 << 20  # rounded up: a budget that follows free memory needn't restart the child
            limit = -(-(limits.max_memory() + REFERENCE_BASELINE) // step) * step
            self.remote = RemoteSession(src, None, box=REFERENCE_SANDBOX, memory_limit=limit)
            self._inputs = [i.name for i in self.remote.inputs]
            self._outputs = list(self.remote.outputs)
            return
        try:
            proto = src.proto()
        finally:
            src.cleanup()
        self._proto = proto
        self.evaluator = ReferenceEvaluator(proto)
        self._outputs = [o.name for o in proto.graph.output]
        inits = {i.name for i in proto.graph.initializer}
        self._inputs = [i.name for i in proto.graph.input if i.name not in inits]

    def output_names(self) -> list[str]:
        return list(self._outputs)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        wanted = {k: v for k, v in feeds.items() if k in self._inputs}
        if self.remote is not None:
            values = self.remote.run(wanted)
        else:
            values = _run_reference(self.evaluator, wanted)
        return {n: _plain(v) for n, v in zip(self._outputs, values, strict=True)}


def _run_reference(evaluator: Any, feeds: Mapping[str, np.ndarray]) -> list[Any]:
    with np.errstate(all="ignore"):  # a division by zero is a value to compare, not a warning to print
        return evaluator.run(None, dict(feeds))


def onnx_runner(model: Any, optimization: str = "basic", isolated: bool = False) -> Runner:
    """onnxruntime when it can load the model, else the reference evaluator (saying why).
    ``optimization`` "all" runs it as a user's session does by default (a quantized graph's Q/DQ
    pairs fused into onnxruntime's int8 kernels, ``QLinearConv``...); "basic" runs the graph as
    written (a Q/DQ graph then computes in float between its quantize steps). ``isolated``: the
    session lives in unframe's onnxruntime child (a crash there is an error, not a dead process)."""
    try:
        return OnnxRuntimeRunner(model, optimization=optimization, isolated=isolated)
    except Exception as exc:  # onnxruntime refuses: unsupported opset/op/type
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        runner = ReferenceRunner(model, why=first)
        runner.name += " (onnxruntime refused the model)"
        return runner


def _plain(v: Any) -> np.ndarray:
    if isinstance(v, list):  # sequences / ZipMap outputs
        return np.asarray(v, dtype=object)
    return np.asarray(v)


_ORT_TYPES = {
    "tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
    "tensor(bfloat16)": "bfloat16", "tensor(int64)": "int64", "tensor(int32)": "int32",
    "tensor(int16)": "int16", "tensor(int8)": "int8", "tensor(uint8)": "uint8",
    "tensor(uint16)": "uint16", "tensor(uint32)": "uint32", "tensor(uint64)": "uint64",
    "tensor(bool)": "bool", "tensor(string)": "str",
}


def _ort_type(t: str) -> str:
    return _ORT_TYPES.get(t, t)


def model_path_or_none(model: Any) -> Path | None:
    return Path(model) if isinstance(model, (str, os.PathLike)) else None
