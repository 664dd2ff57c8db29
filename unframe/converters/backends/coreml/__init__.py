"""ONNX -> CoreML backend. Importing this package must not import coremltools."""
