"""``--quantize`` for .tflite: each route's own quantizer.

From TF/Keras (TensorFlow's TFLite converter, ``optimizations=[Optimize.DEFAULT]``):

- ``int8``: full-integer quantization: a ``representative_dataset`` over the calibration sets (in
  the converter's flat input order) gives every activation its range; weights int8 per channel.
  The inputs and outputs stay float32 (quantize/dequantize ops at the edges), so the file is
  called as the float one was;
- ``int8-dynamic`` and ``w8``: dynamic-range quantization (no dataset): weights stored int8 per
  channel; TFLite's hybrid kernels quantize the activations of the layers that have them at run
  time, the rest computes in float. TFLite has no weight-only mode apart from this one.

From torch (litert-torch):

- ``int8``: PT2E with litert-torch's ``PT2EQuantizer`` (symmetric, weights per channel,
  activations calibrated), converted with ``QuantConfig(pt2e_quantizer=...)``. litert-torch makes
  the inputs and outputs int8 too (their scale and zero point are in the file); unframe's runner
  quantizes the float feeds and dequantizes the outputs with them;
- ``int8-dynamic``: litert-torch's dynamic recipe (int8 weights per channel, activations at run
  time); ``w8``: its weight-only recipe (int8 weights per channel, float compute).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

SCHEMES = ("int8", "int8-dynamic", "w8")
TF_TOOL = "TensorFlow's TFLite converter"
TORCH_TOOL = "litert-torch"


# -- TF/Keras ----------------------------------------------------------------------------------
def tf_configure(tf: Any, converter: Any, request: Any, names: Sequence[str]) -> str:
    """Set the converter up for ``request``; returns what the note says of it."""
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if request.scheme.name != "int8":
        return (f"{request.scheme.name}: {TF_TOOL}'s dynamic-range quantization (int8 weights per "
                "channel; hybrid kernels quantize activations at run time)")
    converter.representative_dataset = lambda: _flat_sets(request.calibration, names)
    # inference_input_type/output_type left float: the file takes and gives what the source does
    return (f"int8: {TF_TOOL}'s full-integer quantization (weights per channel, activations "
            f"calibrated on {request.origin or 'the calibration sets'}); inputs and outputs stay float32")


def _flat_sets(sets: Sequence[dict[str, Any]], names: Sequence[str]) -> Iterator[list[Any]]:
    import numpy as np

    for feeds in sets:
        missing = [n for n in names if n not in feeds]
        if missing:
            from unframe.errors import InputError

            raise InputError(f"the calibration sets have no input {', '.join(missing)}",
                             f"give arrays for the model's inputs: {', '.join(names)}")
        yield [np.asarray(feeds[n]) for n in names]


# -- torch -------------------------------------------------------------------------------------
def torch_prepare(flat: Any, traced: Sequence[Any], shapes: Any, request: Any, example: Any
                  ) -> tuple[Any, dict[str, Any], str]:
    """The module litert-torch converts, its ``convert`` keyword arguments and the note."""
    scheme = request.scheme.name
    if scheme == "int8":
        return _pt2e(flat, traced, shapes, request, example)
    from litert_torch.generative.quantize import quant_recipes

    if scheme == "w8":
        return flat, {"quant_config": quant_recipes.full_weight_only_recipe()}, (
            f"w8: {TORCH_TOOL}'s weight-only recipe (int8 weights per channel, float compute)")
    return flat, {"quant_config": quant_recipes.full_dynamic_recipe()}, (
        f"int8-dynamic: {TORCH_TOOL}'s dynamic recipe (int8 weights per channel, activations "
        "quantized at run time)")


def _pt2e(flat: Any, traced: Sequence[Any], shapes: Any, request: Any, example: Any
          ) -> tuple[Any, dict[str, Any], str]:
    import torch
    from litert_torch.quantize.pt2e_quantizer import PT2EQuantizer, get_symmetric_quantization_config
    from litert_torch.quantize.quant_config import QuantConfig
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from unframe.converters.frontends._torch.inputs import tensor_of

    quantizer = PT2EQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True,
                                                                              is_dynamic=False))
    with torch.no_grad():
        # ``shapes`` is litert-torch's form (``forward(*xs)`` bound as one tuple); torch.export's
        # own takes one entry per positional input
        exported = torch.export.export(flat, tuple(traced), dynamic_shapes=shapes[0] if shapes else None,
                                       strict=False)
        prepared = prepare_pt2e(exported.module(), quantizer)
        for xs in _flat_sets(request.calibration, example.names):
            prepared(*[tensor_of(x) for x in xs])
        converted = convert_pt2e(prepared, fold_quantize=False)
    return converted, {"quant_config": QuantConfig(pt2e_quantizer=quantizer)}, (
        f"int8: PT2E with {TORCH_TOOL}'s PT2EQuantizer (symmetric; weights per channel, activations "
        f"calibrated on {request.origin or 'the calibration sets'}); inputs and outputs are int8 in "
        "the file (scale and zero point in its tensors), the runner quantizes the feeds")


# -- size --------------------------------------------------------------------------------------
def sizes(content: bytes) -> tuple[int, int]:
    """(float-equivalent bytes, bytes) of the flatbuffer: each constant tensor stored as int8 or
    int32 with quantization parameters counted as float32 on the float side (what the float
    file stores of it), the rest the same on both sides."""
    from unframe.converters.backends.litert import flatbuf

    schema = flatbuf.schema()
    model = schema.Model.GetRootAsModel(bytearray(content), 0)
    quantized = {schema.TensorType.INT8, schema.TensorType.UINT8, schema.TensorType.INT16,
                 schema.TensorType.INT32, schema.TensorType.INT4}
    seen: set[int] = set()
    stored = as_float = 0
    for s in range(model.SubgraphsLength()):
        graph = model.Subgraphs(s)
        for t in range(graph.TensorsLength()):
            tensor = graph.Tensors(t)
            index = tensor.Buffer()
            if index in seen or index <= 0 or index >= model.BuffersLength():
                continue
            size = _buffer_bytes(model, index)
            if not size:
                continue
            seen.add(index)
            q = tensor.Quantization()
            numel = int(max(1, _numel(tensor)))
            if tensor.Type() in quantized and q is not None and q.ScaleLength() > 0:
                stored, as_float = stored + size, as_float + 4 * numel
    return len(content) - stored + as_float, len(content)


def _buffer_bytes(model: Any, index: int) -> int:
    buffer = model.Buffers(index)
    return int(buffer.Size()) if buffer.Offset() else int(buffer.DataLength())


def _numel(tensor: Any) -> int:
    n = 1
    for i in range(tensor.ShapeLength()):
        n *= int(tensor.Shape(i))
    return n
