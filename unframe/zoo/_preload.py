"""Imported once by the local pool's forkserver, so that every per-model process forked from it
starts with the version converter's adapters and onnxruntime already loaded (a fork, not a cold
start, per model). No onnxruntime session is made here: sessions own threads, which don't fork."""

from __future__ import annotations

import onnx  # noqa: F401
import onnx.shape_inference  # noqa: F401
import onnx_ir  # noqa: F401
import onnxruntime  # noqa: F401

import unframe.api  # noqa: F401
import unframe.io  # noqa: F401
import unframe.validate.compare  # noqa: F401
import unframe.validate.inputs  # noqa: F401
import unframe.validate.onnxruntime  # noqa: F401
from unframe.version_converter.registry import ADAPTERS
from unframe.zoo import worker  # noqa: F401

ADAPTERS.load()
