"""Internals of the TensorFlow/Keras frontend (``unframe.converters.frontends.tensorflow``).

- ``native``: loading files and objects into a ``TfModel`` (with the trust checks)
- ``custom``: custom Keras classes from a module file, a module or a dict (``custom_objects``)
- ``signature``: input/output specs, InputSpec overrides and parity feeds
- ``export``: the tf2onnx routes, their fallbacks and the post-export graph edits
- ``runners``: TensorFlow-side runners (Keras, tf.function/SavedModel signature, TFLite)

Nothing here imports tensorflow or keras at module import time.
"""
