"""A live torch model, snapshotted before a conversion and restored after it (see
``unframe.preserve``).

What is restored, for the object handed in and every submodule (wrappers included):

- the train/eval flag of every module;
- the module tree itself: ``_parameters``, ``_buffers``, ``_modules`` and every hook dict
  (forward, pre-forward, backward, state-dict hooks...), and attributes added or replaced;
- every parameter and buffer bit for bit (BatchNorm running stats included), its storage,
  device, dtype, ``requires_grad`` and ``.grad``. Values are copied to the CPU first (the memory
  this needs is checked before copying) and written back only where they changed, so that an
  autograd graph the training loop still holds is not invalidated. Weights past ``SPILL_BYTES``
  in all are copied to an unlinked temporary file instead (the disk it needs is checked first):
  a copy in memory would double the resident size of a 1B-parameter model, and the export
  needs that memory itself;
- the torch RNG (CPU and CUDA), numpy's and Python's, grad mode and the default dtype.

Inside, the model is in eval mode, autocast is off and float32 math is full float32 (TF32 and
oneDNN's bf16 shortcuts off, ``full_float32``): the export and the parity runs see the model's
own precision.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from unframe.errors import UsageError
from unframe.preserve import PythonRng, check_copy_fits

SPILL_BYTES = 512 * 2**20  # weights above this in all are kept on disk, not in memory
RESTORE_SLICE_BYTES = 64 * 2**20  # a spilled tensor is compared and written back in slices this large

# module.__dict__ entries that hold hooks: dicts whose contents are restored in place, since
# RemovableHandles refer to these very dict objects.
_TREE_DICTS = ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set")


@dataclass
class _TensorState:
    tensor: Any
    alias: Any  # shares the original storage: restores it if the tensor's data was replaced
    copy: Any  # a CPU copy of the values, or a _Spilled one on disk
    version: int
    requires_grad: bool
    grad: Any


@dataclass
class _ModuleState:
    module: Any
    training: bool
    attrs: dict[str, Any]
    dicts: dict[str, Any]  # name -> shallow copy of a dict/set attribute (hooks, tree)


@dataclass
class TorchState:
    modules: list[_ModuleState] = field(default_factory=list)
    tensors: list[_TensorState] = field(default_factory=list)
    configs: list[tuple[Any, dict[str, Any]]] = field(default_factory=list)  # HF configs
    rng: Any = None
    cuda_rng: Any = None
    python_rng: PythonRng | None = None
    grad_enabled: bool = True
    default_dtype: Any = None
    spill: _Spill | None = None

    @classmethod
    def capture(cls, root: Any | None, what: str) -> TorchState:
        import torch

        state = cls(rng=torch.get_rng_state(), python_rng=PythonRng.capture(),
                    grad_enabled=torch.is_grad_enabled(), default_dtype=torch.get_default_dtype())
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state.cuda_rng = torch.cuda.get_rng_state_all()
        if root is not None:
            modules = list(root.modules())
            tensors = _unique_tensors(modules)
            nbytes = sum(t.numel() * t.element_size() for t in tensors if t.device.type != "meta")
            if nbytes > SPILL_BYTES:
                state.spill = _Spill.open(nbytes, what)
            else:
                check_copy_fits(nbytes, what)
            state.modules = [_module_state(m) for m in modules]
            state.tensors = [_tensor_state(t, state.spill) for t in tensors]
            state.configs = _configs(modules)
        return state

    def restore(self) -> None:
        import torch

        for ms in self.modules:
            _restore_module(ms)
        for config, saved in self.configs:
            vars(config).clear()
            vars(config).update(saved)
        with torch.no_grad():
            for ts in self.tensors:
                _restore_tensor(ts)
        if self.spill is not None:
            self.spill.file.close()  # unlinked already: this frees the disk
        torch.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        if self.python_rng is not None:
            self.python_rng.restore()
        torch.set_grad_enabled(self.grad_enabled)
        torch.set_default_dtype(self.default_dtype)


def _unique_tensors(modules: list[Any]) -> list[Any]:
    """Parameters, their grads (``module.to()`` casts those in place too) and buffers, once. A
    tensor subclass that wraps others (torchao's ``Int8Tensor``: int8 data and scales; a DTensor is
    kept by its local shard instead) stands for the plain tensors inside it: those hold the
    values, and its own bits can't be read as one tensor's."""
    seen: dict[int, Any] = {}

    def add(t: Any) -> None:
        inner = _wrapped(t)
        if inner is not None:
            for part in inner:
                add(part)
            return
        seen.setdefault(id(t), t)
        if t.grad is not None:
            seen.setdefault(id(t.grad), t.grad)

    for m in modules:
        for t in [*m._parameters.values(), *m._buffers.values()]:
            if t is not None:
                add(t)
    return list(seen.values())


def _wrapped(t: Any) -> list[Any] | None:
    """The tensors a traceable wrapper subclass holds (``__tensor_flatten__``), or None for a plain
    tensor (or a DTensor, which ``_local`` reads shard by shard)."""
    if getattr(type(t), "to_local", None) is not None:
        return None
    try:
        from torch.utils._python_dispatch import is_traceable_wrapper_subclass
    except ImportError:  # an older torch: no such subclasses to see through
        return None
    if not is_traceable_wrapper_subclass(t):
        return None
    names, _ = t.__tensor_flatten__()
    return [getattr(t, name) for name in names]


def _configs(modules: list[Any]) -> list[tuple[Any, dict[str, Any]]]:
    """Hugging Face configs the export adjusts (``use_cache``): shallow copies of their fields."""
    from unframe.converters.frontends._torch.unwrap import is_hf_config

    found: dict[int, Any] = {}
    for m in modules:
        for name in ("config", "generation_config"):
            obj = vars(m).get(name)
            if obj is not None and is_hf_config(obj):
                found.setdefault(id(obj), obj)
    return [(obj, dict(vars(obj))) for obj in found.values()]


def _module_state(module: Any) -> _ModuleState:
    dicts = {name: (set(value) if isinstance(value, set) else dict(value))
             for name, value in vars(module).items()
             if name in _TREE_DICTS or ("hook" in name and isinstance(value, dict))}
    return _ModuleState(module, module.training, dict(vars(module)), dicts)


def _tensor_state(t: Any, spill: _Spill | None) -> _TensorState:
    import torch

    copy = None
    if t.device.type != "meta":  # an uninitialized (lazy) tensor has no values to keep
        with torch.no_grad():
            local = _local(t.detach())
            copy = spill.save(local) if spill is not None else local.to("cpu", copy=True)
    return _TensorState(t, t.detach(), copy, t._version, t.requires_grad, t.grad)


@dataclass
class _Spilled:
    """A tensor's bytes at ``offset`` in the spill file."""

    spill: _Spill
    offset: int
    dtype: Any
    shape: tuple[int, ...]

    def load(self, start: int = 0, stop: int | None = None) -> Any:
        """The saved values (elements ``start:stop`` of the flattened tensor, flat, when given)."""
        import torch

        total = int(torch.Size(self.shape).numel())
        stop = total if stop is None else stop
        flat = torch.empty(stop - start, dtype=self.dtype)
        raw = flat.view(torch.uint8).numpy() if flat.numel() else None
        if raw is not None:
            self.spill.file.seek(self.offset + start * flat.element_size())
            self.spill.file.readinto(memoryview(raw))
        return flat.view(self.shape) if (start, stop) == (0, total) else flat

    def restore_into(self, live: Any, changed: bool) -> None:
        """Write the saved values back into ``live`` where they differ (everywhere when
        ``changed``), a slice of ``RESTORE_SLICE_BYTES`` at a time: a 1 GB embedding is never
        read back whole (it set the export's peak memory)."""
        if not live.is_contiguous() or live.dtype != self.dtype or tuple(live.shape) != self.shape:
            copy = self.load()
            if changed or not same_bits(live, copy):
                live.copy_(copy)
            return
        flat = live.view(-1)
        step = max(1, RESTORE_SLICE_BYTES // max(live.element_size(), 1))
        for start in range(0, flat.numel(), step):
            saved = self.load(start, min(start + step, flat.numel())).reshape(-1)
            part = flat[start:start + saved.numel()]
            if changed or not same_bits(part, saved):
                part.copy_(saved)


@dataclass
class _Spill:
    """CPU copies of the weights in one unlinked temporary file (gone with the process, even on
    a crash): written once, read back one tensor at a time on restore."""

    file: IO[bytes]
    offset: int = 0

    @classmethod
    def open(cls, nbytes: int, what: str) -> _Spill:
        folder = tempfile.gettempdir()
        free = shutil.disk_usage(folder).free
        if nbytes > free * 0.9:
            raise UsageError(f"{what} holds {nbytes / 1e9:.2f} GB of weights; keeping a copy to "
                             f"restore it after the conversion needs that much disk in {folder} "
                             f"({free / 1e9:.2f} GB free)",
                             "set TMPDIR to a folder with room, or save a checkpoint and convert "
                             "the file instead")
        return cls(tempfile.TemporaryFile(prefix="unframe-weights-"))

    def save(self, t: Any) -> _Spilled:
        import torch

        host = t.detach().to("cpu").contiguous()  # a device tensor passes through the CPU alone
        spilled = _Spilled(self, self.offset, host.dtype, tuple(host.shape))
        if host.numel():
            self.file.seek(self.offset)
            self.file.write(memoryview(host.reshape(-1).view(torch.uint8).numpy()))
            self.offset += host.numel() * host.element_size()
        return spilled


def _restore_module(ms: _ModuleState) -> None:
    current = vars(ms.module)
    for name in [n for n in current if n not in ms.attrs]:
        del current[name]
    for name, value in ms.attrs.items():
        if name in ms.dicts:
            _refill(value, ms.dicts[name])
        if current.get(name, _MISSING) is not value:
            current[name] = value
    ms.module.training = ms.training


_MISSING = object()


def _refill(container: Any, saved: Any) -> None:
    """Put the saved entries back into the same dict/set object (handles point at it)."""
    if isinstance(container, set):
        container.clear()
        container.update(saved)
        return
    if list(container) == list(saved) and all(container[k] is v for k, v in saved.items()):
        return
    container.clear()
    container.update(saved)


def _restore_tensor(ts: _TensorState) -> None:
    t = ts.tensor
    if (t.data_ptr() != ts.alias.data_ptr() or t.dtype != ts.alias.dtype
            or t.device != ts.alias.device or t.shape != ts.alias.shape):
        t.data = ts.alias  # the original storage, device and dtype
    changed = t._version != ts.version
    if isinstance(ts.copy, _Spilled):
        ts.copy.restore_into(_local(t.detach()), changed)
    elif ts.copy is not None and (changed or not same_bits(_local(t.detach()), ts.copy)):
        _local(t.detach()).copy_(ts.copy)
    if t.is_leaf and t.requires_grad != ts.requires_grad:
        t.requires_grad_(ts.requires_grad)
    if t.grad is not ts.grad:
        t.grad = ts.grad


def _local(t: Any) -> Any:
    """A DTensor's shard on this rank (a view of it), else the tensor itself. Kept and compared
    shard by shard: a DTensor's own equality is a collective, which only this rank would join."""
    to_local = getattr(type(t), "to_local", None)
    return t.to_local() if to_local is not None else t


def same_bits(a: Any, cpu_copy: Any) -> bool:
    """Bitwise equality (NaN payloads and -0.0 included), comparing on the copy's device."""
    import torch

    a = a.to("cpu") if a.device.type != "cpu" else a
    if a.dtype != cpu_copy.dtype or a.shape != cpu_copy.shape:
        return False
    if a.dtype.is_floating_point and a.dtype.itemsize in _INT_OF_SIZE:
        as_int = _INT_OF_SIZE[a.dtype.itemsize]
        return torch.equal(a.view(as_int), cpu_copy.view(as_int))
    return torch.equal(a, cpu_copy)


_INT_OF_SIZE: dict[int, Any] = {}


def _int_views() -> None:
    import torch

    _INT_OF_SIZE.update({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64})


@contextlib.contextmanager
def preserved(obj: Any, what: str) -> Iterator[None]:
    """Snapshot ``obj`` (an nn.Module or wrapper; anything else: the process state only), put
    it in eval mode with autocast off, and restore everything on exit."""
    import torch

    if not _INT_OF_SIZE:
        _int_views()
    root = obj if isinstance(obj, torch.nn.Module) else None
    state = TorchState.capture(root, what)
    try:
        with _no_autocast(), full_float32():
            if root is not None:
                _eval(root)
            yield
    finally:
        state.restore()


def _eval(root: Any) -> None:
    """``root.eval()``; a module that refuses it (a GraphModule from torch.export, or one that PT2E
    quantization converted: its graph was traced in one mode) gets its flags set directly."""
    try:
        root.eval()
    except NotImplementedError:
        for module in root.modules():
            module.training = False


@contextlib.contextmanager
def _no_autocast() -> Iterator[None]:
    """An autocast region around the call would change what the export records."""
    import torch

    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.autocast("cpu", enabled=False))
        if torch.cuda.is_available():
            stack.enter_context(torch.autocast("cuda", enabled=False))
        yield


# Where float32 math may take a shortcut: cuDNN convolutions and RNNs use TF32 by default on
# Ampere and later GPUs, cuBLAS matmuls do after set_float32_matmul_precision("high"), and
# oneDNN may use TF32 or bf16 on the CPU. TF32 keeps 10 mantissa bits: a CNN's outputs move about
# 1e-3 relative, as far as a real conversion error, so a reference must not run that way.
#
# torch >= 2.9 keeps two views of these settings: the legacy flags (``allow_tf32``) and the
# per-backend ``fp32_precision`` strings. Its legacy getters raise when the two disagree, and
# torch's own exporters read them. So the block goes in through the legacy setters (which set
# both views alike), then the leaves that still inherit a shortcut, and it comes out by putting
# back every string, the legacy flags that could be read, and the strings again: measured to
# give back both views as they were, whichever API the script used (test_torch_live.py).
# One exception, measured: after ``torch.backends.fp32_precision = "tf32"`` (the global new API)
# and an export, torch no longer takes "tf32" back for oneDNN's parent setting; its three leaves
# (what oneDNN's kernels read) do come back.
_PRECISION_NODES = ("", "cuda.matmul", "cudnn", "cudnn.conv", "cudnn.rnn",
                    "mkldnn", "mkldnn.matmul", "mkldnn.conv", "mkldnn.rnn")  # parents first
_LEAVES = {"cuda.matmul": "cuda", "cudnn.conv": "cuda", "cudnn.rnn": "cuda",
           "mkldnn.matmul": "cpu", "mkldnn.conv": "cpu", "mkldnn.rnn": "cpu"}
_SHORTCUTS_BEFORE: list[set[str]] = []  # per active full_float32: devices whose shortcut was on


def _precision_nodes() -> dict[str, Any]:
    import torch

    found = {}
    for path in _PRECISION_NODES:
        node: Any = torch.backends
        for part in filter(None, path.split(".")):
            node = getattr(node, part, None)
        if hasattr(node, "fp32_precision"):  # torch >= 2.9
            found[path] = node
    return found


def _legacy_flags() -> list[tuple[Any, Any]]:
    import torch

    return [(getattr(torch._C, f"_get_{lib}_allow_tf32", None), getattr(torch._C, f"_set_{lib}_allow_tf32", None))
            for lib in ("cublas", "cudnn")]


def _read(getter: Any) -> bool | None:
    try:
        return bool(getter())
    except RuntimeError:  # the two views disagree (the script mixed the APIs): not readable
        return None


@dataclass
class Float32Settings:
    """How torch may compute float32, in both of its views, to be put back as found."""

    nodes: dict[str, Any]
    strings: dict[str, str]
    legacy: list[tuple[Any, bool | None]]  # (setter, value; None: unreadable, the APIs were mixed)

    @classmethod
    def capture(cls) -> Float32Settings:
        nodes = _precision_nodes()
        return cls(nodes, {path: node.fp32_precision for path, node in nodes.items()},
                   [(setter, _read(getter)) for getter, setter in _legacy_flags() if getter and setter])

    def shortcuts(self) -> set[str]:
        """The devices ("cuda", "cpu") whose float32 math may take a shortcut."""
        found = {_LEAVES[p] for p, v in self.strings.items() if p in _LEAVES and v not in ("ieee", "none")}
        return found | ({"cuda"} if any(v for _, v in self.legacy) else set())

    def full(self) -> None:
        for setter, _ in self.legacy:
            setter(False)
        for node in self.nodes.values():  # parents first: a leaf may inherit the shortcut
            if node.fp32_precision not in ("ieee", "none"):
                node.fp32_precision = "ieee"

    def restore(self) -> None:
        self._put_back()
        for setter, value in self.legacy:
            if value is not None:
                setter(value)
        self._put_back()

    def _put_back(self) -> None:
        for path, node in self.nodes.items():
            if node.fp32_precision != self.strings[path]:
                node.fp32_precision = self.strings[path]


@contextlib.contextmanager
def full_float32() -> Iterator[None]:
    """float32 math in full precision for the block; every setting found comes back after."""
    found = Float32Settings.capture()
    _SHORTCUTS_BEFORE.append(found.shortcuts())
    try:
        found.full()
        yield
    finally:
        _SHORTCUTS_BEFORE.pop()
        found.restore()


def float32_shortcut_was_on(device_type: str) -> bool:
    """Inside ``full_float32``: whether float32 math on ``device_type`` ("cuda", "cpu") was
    allowed TF32 or bf16 before it."""
    return bool(_SHORTCUTS_BEFORE) and device_type in _SHORTCUTS_BEFORE[-1]
