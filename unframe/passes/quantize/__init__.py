"""Quantization: the schemes a ``--quantize`` request names, the calibration and held-out input
sets, the ONNX quantizers (onnxruntime's static and dynamic QDQ, unframe's weight-only
``DequantizeLinear`` pass), and the sensitivity ranking that picks the layers to keep in float
when the accuracy guard (``unframe.validate.accuracy``) fails.

Each backend quantizes with its own vendor's tool (onnxruntime for ONNX and TensorRT's Q/DQ,
coremltools.optimize, NNCF, TFLite's converter, the PT2E quantizers), reading the request from
``target.options["quantize"]`` (a ``QuantRequest``); what is here is what they share.
"""

from __future__ import annotations

from unframe.passes.quantize.schemes import (
    SCHEMES,
    QuantRequest,
    Scheme,
    Thresholds,
    parse_accuracy,
    scheme_of,
)

__all__ = ["SCHEMES", "QuantRequest", "Scheme", "Thresholds", "parse_accuracy", "scheme_of"]
