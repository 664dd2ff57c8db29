"""``--quantize`` for ExecuTorch programs: PT2E with ExecuTorch's XNNPACK quantizer.

The exported program (``direct._export``) is quantized before the edge lowering:
``prepare_pt2e`` inserts observers, the request's calibration sets (feeds by the frontend's
input names, rebuilt into the wrapper's ``(args, kwargs)``) run through it, ``convert_pt2e``
leaves quantize/dequantize pairs around each conv and linear, and the result is exported again
with the same dynamic dims for the XNNPACK partitioner, which takes the Q/DQ patterns as int8
kernels. Inputs and outputs stay float.

- ``int8``: int8 weights per output channel (symmetric), int8 activations with ranges observed
  on the calibration sets;
- ``int8-dynamic``: int8 weights per output channel, activation ranges computed at run time (the
  quantizer annotates linear layers only: convolutions stay float).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

SCHEMES = ("int8", "int8-dynamic")
TOOL = "PT2E (torchao prepare/convert) with ExecuTorch's XNNPACKQuantizer"


def quantize_program(program: Any, example: Any, args: Any, kwargs: Any, shapes: Any,
                     request: Any) -> Any:
    """The quantized ExportedProgram of ``program`` (the float one is left as it is)."""
    import torch
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    dynamic = request.scheme.activations == "dynamic"
    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True, is_dynamic=dynamic))
    prepared = prepare_pt2e(program.module(), quantizer)
    with torch.no_grad():
        # dynamic ranges are measured at run time; one pass still sets the weights' observers
        for feeds in request.calibration or [None]:
            call_args, call_kwargs = (args, kwargs) if feeds is None else _rebuild(example, feeds)
            prepared(call_args, call_kwargs)
        converted = convert_pt2e(prepared)
        return torch.export.export(converted, (tuple(args), dict(kwargs)), dynamic_shapes=shapes,
                                   strict=False)


def _rebuild(example: Any, feeds: dict[str, Any]) -> tuple[Any, Any]:
    from unframe.converters.frontends._torch.inputs import tensor_of

    missing = [n for n in example.names if n not in feeds]
    if missing:
        from unframe.errors import InputError

        raise InputError(f"the calibration sets have no input {', '.join(missing)}",
                         f"give arrays for the model's inputs: {', '.join(example.names)}")
    return example.rebuild({n: tensor_of(feeds[n]) for n in example.names})


def float_weight_bytes(program: Any) -> int:
    """Bytes of the float program's parameters, buffers and constants as float32 (what a float
    ``.pte`` stores of them)."""
    tensors = [*program.state_dict.values(), *getattr(program, "constants", {}).values()]
    return sum(t.numel() * 4 if t.is_floating_point() else t.numel() * t.element_size()
               for t in tensors if hasattr(t, "numel"))


def quantize_note(request: Any, delegation: dict[str, Any], quantized_layers: Sequence[str]) -> str:
    """What was quantized and where its int8 ops run."""
    scheme = request.scheme.name
    how = ("weights int8 per channel, activations int8 with ranges observed on "
           f"{request.origin or 'the calibration sets'}" if scheme == "int8"
           else "weights int8 per channel, activations quantized at run time (linear layers only)")
    portable_q = {op: n for op, n in delegation.get("portable_ops", {}).items() if "quantize" in op}
    where = ("XNNPACK runs every quantize/dequantize op" if not portable_q else
             "portable kernels run " + ", ".join(f"{op} x{n}" for op, n in sorted(portable_q.items())))
    layers = ", ".join(f"{op} x{n}" for op, n in _counts(quantized_layers)) or "no layer"
    return f"{scheme} ({TOOL}): {how}; quantized: {layers}; {where}; inputs and outputs stay float"


def quantized_layers(program: Any) -> list[str]:
    """The conv/linear nodes of the quantized program whose weight comes through a dequantize."""
    out = []
    for node in program.graph.nodes:
        name = str(getattr(node.target, "__name__", node.target))
        if node.op != "call_function" or not any(k in name for k in ("conv", "linear")):
            continue
        weight = node.args[1] if len(node.args) > 1 else None
        if weight is not None and "dequantize" in str(getattr(weight, "target", "")):
            out.append(name.split(".")[0])
    return out


def _counts(names: Sequence[str]) -> list[tuple[str, int]]:
    from collections import Counter

    return sorted(Counter(names).items())
