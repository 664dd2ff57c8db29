"""The registry of ONNX -> MIL translators: one function per ONNX op type, registered with
``@translator("Conv")``. Third parties add translators through the entry-point group
``unframe.translators`` (an entry point naming a module whose decorators register them).

Every translator is written against the opset-21 version of its op (the backend's canonical
opset): the version converter brings the model there first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from unframe.registry import Registry

if TYPE_CHECKING:
    import onnx_ir as ir

    from unframe.converters.backends.coreml.context import TranslateContext

TranslateFn = Callable[["TranslateContext"], Any]
# A check returns the reasons the node can't be translated (attribute values, dtypes...), [] if none.
CheckFn = Callable[["ir.Node"], list[str]]

_FAMILIES = (
    "activation", "elementwise", "conv", "pool", "norm", "reduce", "tensor", "shape", "gather",
    "resize", "linear", "rnn", "control_flow", "quant", "misc", "bitwise", "signal", "random_ops",
)


@dataclass(frozen=True)
class Translator:
    """One ONNX op's translation: the function, the oldest iOS version its MIL ops need, and an
    optional pre-flight check of the node's attributes."""

    op_type: str
    fn: TranslateFn
    min_ios: int = 16
    check: CheckFn | None = None
    # the oldest iOS generation this particular node needs, when it depends on its attributes
    needs_ios: Callable[[ir.Node], int] | None = None

    def required_ios(self, node: ir.Node) -> int:
        return max(self.min_ios, self.needs_ios(node) if self.needs_ios is not None else 0)


TRANSLATORS: Registry[Translator] = Registry(
    "CoreML translator",
    entry_point_group="unframe.translators",
    builtins=[f"unframe.converters.backends.coreml.ops.{f}" for f in _FAMILIES],
)

# ONNX ops with no translator, and the supported op (or rewrite) to use instead.
ALTERNATIVES: dict[str, str] = {
    "Unique": "none on CoreML (dynamic output size); move it out of the model",
    "StringNormalizer": "pre-process strings outside the model",
    "RegexFullMatch": "pre-process strings outside the model",
    "StringSplit": "pre-process strings outside the model",
    "StringConcat": "pre-process strings outside the model",
    "MaxUnpool": "use ScatterND or Resize",
    "Multinomial": "pass random values as an input",
    "NegativeLogLikelihoodLoss": "compute the loss outside the inference model",
    "SoftmaxCrossEntropyLoss": "compute the loss outside the inference model",
    "Momentum": "training ops have no place in a CoreML model",
    "Adam": "training ops have no place in a CoreML model",
    "Adagrad": "training ops have no place in a CoreML model",
    "Gradient": "training ops have no place in a CoreML model",
    "SequenceConstruct": "use Concat of tensors",
    "SequenceAt": "use Gather / Slice on a stacked tensor",
    "SplitToSequence": "use Split",
    "ConcatFromSequence": "use Concat",
    "ImageDecoder": "decode images outside the model (CoreML takes image inputs: --image-input)",
    "RoiAlign": "crop with Slice and Resize",
    "ConvInteger": "use DequantizeLinear + Conv",
    "MatMulInteger": "use DequantizeLinear + MatMul",
    "QLinearConv": "use DequantizeLinear + Conv + QuantizeLinear",
    "QLinearMatMul": "use DequantizeLinear + MatMul + QuantizeLinear",
    "DynamicQuantizeLinear": "use QuantizeLinear with a fixed scale",
    "Det": "none on CoreML",
    "Compress": "use Gather with constant indices",
    "TfIdfVectorizer": "pre-process text outside the model",
    "CenterCropPad": "use Slice and Pad",
}


def translator(*op_types: str, min_ios: int = 16, check: CheckFn | None = None,
               needs_ios: Callable[[ir.Node], int] | None = None) -> Callable[[TranslateFn], TranslateFn]:
    """Register ``fn`` as the translator of each ONNX op type (default domain)."""

    def deco(fn: TranslateFn) -> TranslateFn:
        for op_type in op_types:
            TRANSLATORS.register(op_type, Translator(op_type, fn, min_ios, check, needs_ios))
        return fn

    return deco


def supported_ops() -> list[str]:
    """The ONNX op types (default domain) the CoreML backend translates, sorted."""
    return sorted(str(k) for k in TRANSLATORS.keys())
