"""LiteRT backend (``--to litert``, alias ``tflite``): a ``.tflite`` flatbuffer.

No maintained ONNX -> .tflite converter installs beside unframe's pins, so the model is converted
from its source: TF/Keras through TensorFlow's own TFLite converter (``from_tf``), torch through
litert-torch (``from_torch``). The artifact runs here on ai-edge-litert's interpreter (XNNPACK).
Importing this package imports neither TensorFlow, torch nor ai-edge-litert.
"""
