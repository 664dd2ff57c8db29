"""Walk a coremltools MIL ``Program`` and compute every op with a numpy kernel.

The evaluator is dtype-faithful: every op's result is cast to the dtype the program declares for
that output, so a program that computes in fp16 (Core ML's default precision) is evaluated in
fp16 and its drift is visible. Heavy contractions (conv, matmul, linear, einsum) accumulate in
fp32 and round to fp16 once, which is how Core ML's GPU and Neural Engine behave to a first order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from unframe.converters.backends.coreml.mil_eval._ct import mil_types
from unframe.converters.backends.coreml.mil_eval.registry import KERNELS, KernelError, StateCell
from unframe.errors import Blocker, InputError, UnsupportedError

# ops whose value is already held by their output var once the program is loaded
_CONST_OPS = frozenset({"const", "_const_symbolic"})


@dataclass
class KernelContext:
    """What a kernel may need beyond its inputs: the op itself, its opset, nested-block evaluation."""

    op: Any
    evaluator: _Evaluator

    @property
    def opset(self) -> int:
        """The iOS version of the op's definition (15..18), from the module that defines it."""
        module = type(self.op).__module__
        for part in module.split("."):
            if part.startswith("iOS") and part[3:].isdigit():
                return int(part[3:])
        return 15

    def output_dtype(self, index: int = 0) -> np.dtype:
        return np.dtype(numpy_dtype(self.op.outputs[index].dtype))

    def run_block(self, block: Any, block_inputs: Sequence[Any] = ()) -> list[Any]:
        """Evaluate a nested block (cond branch, while_loop cond/body) and return its outputs."""
        return self.evaluator.run_block(block, block_inputs)


@dataclass
class _Evaluator:
    function_name: str
    values: dict[int, Any] = field(default_factory=dict)
    evaluated_ops: set[str] = field(default_factory=set)

    def value_of(self, var: Any) -> Any:
        key = id(var)
        if key in self.values:
            return self.values[key]
        if var.val is not None and var.op is not None and var.op.op_type in _CONST_OPS:
            value = to_numpy(var.val, var.dtype)
            self.values[key] = value
            return value
        raise KernelError(f"MIL var {var.name!r} is used before it is computed "
                          f"(function {self.function_name!r})")

    def run_block(self, block: Any, block_inputs: Sequence[Any] = ()) -> list[Any]:
        for var, value in zip(block.inputs, block_inputs, strict=False):
            self.values[id(var)] = value
        for op in block.operations:
            self.run_op(op)
        return [self.value_of(v) for v in block.outputs]

    def run_op(self, op: Any) -> None:
        if op.op_type in _CONST_OPS:
            for var in op.outputs:
                if mil_types().is_list(var.sym_type):  # e.g. a classifier's class labels
                    self.values[id(var)] = list(var.val)
                else:
                    self.values[id(var)] = to_numpy(var.val, var.dtype)
            return
        fn = KERNELS.get(op.op_type, None)
        if fn is None:  # evaluate() checks first; this guards direct run_block use
            raise _unsupported([op], self.function_name)
        # inputs named _x hold builder callbacks or blocks (cond, while_loop), not values
        args = {name: self._arg(value) for name, value in op.inputs.items()
                if not name.startswith("_")}
        try:
            result = fn(KernelContext(op, self), **args)
        except (UnsupportedError, KernelError, InputError):
            raise
        except Exception as exc:
            raise KernelError(f"MIL op {op.op_type!r} (name {op.name!r}) failed in the evaluator: "
                              f"{type(exc).__name__}: {exc}") from exc
        results = result if isinstance(result, tuple) else (result,)
        if len(results) != len(op.outputs):
            raise KernelError(f"kernel of MIL op {op.op_type!r} (name {op.name!r}) returned "
                              f"{len(results)} values for {len(op.outputs)} outputs")
        for var, value in zip(op.outputs, results, strict=False):
            self.values[id(var)] = _conform(value, var, op)
        self.evaluated_ops.add(op.op_type)

    def _arg(self, value: Any) -> Any:
        if isinstance(value, (tuple, list)):
            return [self.value_of(v) for v in value]
        return self.value_of(value)


def numpy_dtype(builtin: Any) -> Any:
    """The numpy type of a MIL builtin type (tensor types give their element type)."""
    types = mil_types()

    if types.is_tensor(builtin):
        builtin = builtin.get_primitive()
    if builtin is types.str:
        return str
    return types.nptype_from_builtin(builtin)


def to_numpy(value: Any, builtin: Any) -> Any:
    """A constant's value as numpy, strings kept as python str."""
    types = mil_types()

    if isinstance(value, str) or builtin is types.str:
        return str(value)
    if types.is_list(builtin) if hasattr(types, "is_list") else False:
        return value
    return np.asarray(value, dtype=numpy_dtype(builtin))


def _conform(value: Any, var: Any, op: Any) -> Any:
    """Cast a kernel result to the var's declared dtype; check its shape when the shape is static."""
    types = mil_types()

    if isinstance(value, (str, list, dict)) or types.is_list(var.sym_type):
        return value  # strings, lists and a classifier's {label: probability} dict
    if is_state(var):
        return value
    array = np.asarray(value)
    dtype = np.dtype(numpy_dtype(var.dtype))
    if array.dtype != dtype:
        array = array.astype(dtype)
    shape = var.shape
    if shape is not None and all(isinstance(d, (int, np.integer)) for d in shape):
        if tuple(array.shape) != tuple(int(d) for d in shape):
            raise KernelError(f"kernel of MIL op {op.op_type!r} (name {op.name!r}) gave shape "
                              f"{array.shape} for output {var.name!r}, the program says {tuple(shape)}")
    return array


def all_ops(block: Any) -> list[Any]:
    """Every op of a block, nested blocks included."""
    ops: list[Any] = []
    for op in block.operations:
        ops.append(op)
        for inner in op.blocks:
            ops.extend(all_ops(inner))
    return ops


def missing_kernels(program: Any, function: str = "main") -> list[Any]:
    """Ops of ``function`` the evaluator has no kernel for (one per op type)."""
    seen: dict[str, Any] = {}
    for op in all_ops(program.functions[function]):
        if op.op_type not in _CONST_OPS and op.op_type not in KERNELS and op.op_type not in seen:
            seen[op.op_type] = op
    return list(seen.values())


def _unsupported(ops: Sequence[Any], function: str) -> UnsupportedError:
    blockers = [Blocker(op=o.op_type, node=o.name, reason="the MIL evaluator has no kernel for this op")
                for o in ops]
    names = ", ".join(f"{o.op_type!r} (op {o.name!r})" for o in ops)
    return UnsupportedError(
        f"MIL function {function!r}: no evaluator kernel for {names}",
        "add a @kernel(...) in unframe/converters/backends/coreml/mil_eval/kernels/",
        blockers=blockers,
    )


def is_state(var: Any) -> bool:
    types = mil_types()
    return bool(getattr(types, "is_state", None) and types.is_state(var.sym_type))


def state_inputs(func: Any) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """The function's state inputs: name -> (shape, dtype) of the tensor each wraps."""
    out = {}
    for name, var in func.inputs.items():
        if is_state(var):
            wrapped = var.sym_type.wrapped_type()
            out[name] = (tuple(int(d) for d in wrapped.get_shape()),
                         np.dtype(numpy_dtype(wrapped.get_primitive())))
    return out


def evaluate(program: Any, inputs: Mapping[str, np.ndarray], function: str = "main",
             *, record: set[str] | None = None, capture: dict[str, Any] | None = None,
             states: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Evaluate ``function`` of a MIL ``Program`` on ``inputs``; outputs by name, in program order.

    Inputs are cast to the dtypes the function declares. ``record``, when given, receives the
    op types that were evaluated (tests use it to prove kernel coverage); ``capture`` receives
    every top-level op's output values by var name (the divergence locator's tap). ``states``
    holds the values of the function's state inputs (zeros when absent) and receives their
    values after the call, so a caller that keeps it carries them to the next call.
    """
    if function not in program.functions:
        raise InputError(f"MIL program has no function {function!r}",
                         f"functions: {', '.join(program.functions)}")
    func = program.functions[function]
    missing = missing_kernels(program, function)
    if missing:
        raise _unsupported(missing, function)
    ev = _Evaluator(function)
    feeds = _bind_inputs(func, inputs, function)
    states = {} if states is None else states
    for name, (shape, dtype) in state_inputs(func).items():
        if name not in states:
            states[name] = np.zeros(shape, dtype)
        elif tuple(np.shape(states[name])) != shape:
            raise InputError(f"MIL state {name!r} is {shape}, got an array of shape "
                             f"{np.shape(states[name])}", "give each state its declared shape")
        feeds[name] = StateCell(states, name)
    for name, var in func.inputs.items():
        ev.values[id(var)] = feeds[name]
    outputs = ev.run_block(func)
    if record is not None:
        record.update(ev.evaluated_ops)
    if capture is not None:
        for op in func.operations:
            for var in op.outputs:
                if id(var) in ev.values and op.op_type not in _CONST_OPS:
                    capture[var.name] = ev.values[id(var)]
    return {var.name: value for var, value in zip(func.outputs, outputs, strict=False)}


def _bind_inputs(func: Any, inputs: Mapping[str, np.ndarray], function: str) -> dict[str, Any]:
    absent = [name for name, var in func.inputs.items() if name not in inputs and not is_state(var)]
    if absent:
        raise InputError(f"MIL function {function!r} needs inputs {absent}",
                         f"give every input of: {', '.join(func.inputs)}")
    feeds: dict[str, Any] = {}
    for name, var in func.inputs.items():
        if is_state(var):
            continue
        array = np.asarray(inputs[name]).astype(numpy_dtype(var.dtype), copy=False)
        shape = var.shape
        if shape is not None and len(shape) != array.ndim:
            raise InputError(f"MIL input {name!r} has rank {len(shape)}, got an array of shape "
                             f"{array.shape}", "feed an array of the declared rank")
        feeds[name] = array
    return feeds
