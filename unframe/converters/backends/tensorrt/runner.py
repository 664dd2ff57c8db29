"""Run a serialized engine on the GPU, moving buffers with the CUDA driver API through ctypes
(no pycuda/cuda-python dependency). Only constructed after ``trtmodule.cuda_device()`` found a
device: a TensorRT runtime object made without a driver crashes the process.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import numpy as np

from unframe.converters.backends.tensorrt import trtmodule
from unframe.converters.base import RunnerUnavailable
from unframe.validate.runner import Runner

_NP_OF_TRT = {
    "FLOAT": np.float32, "HALF": np.float16, "INT32": np.int32, "INT64": np.int64,
    "INT8": np.int8, "UINT8": np.uint8, "BOOL": np.bool_,
}


class _Cuda:
    """The few CUDA driver calls a runner needs, each checked."""

    def __init__(self) -> None:
        lib = trtmodule.libcuda()
        if lib is None:
            raise RunnerUnavailable("no CUDA device: libcuda.so.1 not found")
        self.lib = lib
        self._check(lib.cuInit(0), "cuInit")
        device = ctypes.c_int(0)
        self._check(lib.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
        self.context = ctypes.c_void_p()
        self._check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), device),
                    "cuDevicePrimaryCtxRetain")
        self._check(lib.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        self.stream = ctypes.c_void_p()
        self._check(lib.cuStreamCreate(ctypes.byref(self.stream), 0), "cuStreamCreate")

    @staticmethod
    def _check(rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"CUDA driver call {what} failed with code {rc}")

    def alloc(self, nbytes: int) -> int:
        ptr = ctypes.c_uint64(0)
        self._check(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(max(nbytes, 1))),
                    "cuMemAlloc")
        return ptr.value

    def free(self, ptr: int) -> None:
        self.lib.cuMemFree_v2(ctypes.c_uint64(ptr))

    def to_device(self, ptr: int, array: np.ndarray) -> None:
        self._check(self.lib.cuMemcpyHtoD_v2(ctypes.c_uint64(ptr), array.ctypes.data_as(
            ctypes.c_void_p), ctypes.c_size_t(array.nbytes)), "cuMemcpyHtoD")

    def to_host(self, array: np.ndarray, ptr: int) -> None:
        self._check(self.lib.cuMemcpyDtoH_v2(array.ctypes.data_as(ctypes.c_void_p),
                                             ctypes.c_uint64(ptr), ctypes.c_size_t(array.nbytes)),
                    "cuMemcpyDtoH")

    def synchronize(self) -> None:
        self._check(self.lib.cuStreamSynchronize(self.stream), "cuStreamSynchronize")

    def close(self) -> None:
        if self.stream:
            self.lib.cuStreamDestroy_v2(self.stream)
            self.stream = ctypes.c_void_p()


class TensorRTRunner(Runner):
    """Deserializes an engine and runs it with host numpy feeds."""

    def __init__(self, engine_bytes: bytes, trt: ModuleType | None = None) -> None:
        device = trtmodule.cuda_device()
        if isinstance(device, str):
            raise RunnerUnavailable(f"no CUDA device: {device}")
        trt = trt or trtmodule.load_or_none()
        if trt is None:
            raise RunnerUnavailable("no TensorRT module is installed")
        gap = trtmodule.engine_gap(trt, device)  # its runtime would refuse the engine
        if gap is not None:
            raise RunnerUnavailable(gap)
        self.cuda = _Cuda()
        self.logger = trtmodule.CollectingLogger(trt)
        self.runtime = trt.Runtime(self.logger)
        self.engine = self.runtime.deserialize_cuda_engine(engine_bytes)
        if self.engine is None:
            raise RunnerUnavailable("TensorRT could not load the engine: "
                                    + "; ".join(self.logger.errors()[:3]))
        self.context = self.engine.create_execution_context()
        self.trt = trt
        self.name = f"{trt.__name__} {trt.__version__} on {device.name}"
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        is_input = {n: self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT for n in names}
        self._inputs = [n for n in names if is_input[n]]
        self._outputs = [n for n in names if not is_input[n]]

    def output_names(self) -> list[str]:
        return list(self._outputs)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        buffers: list[int] = []
        try:
            for name in self._inputs:
                array = np.ascontiguousarray(feeds[name], dtype=self._dtype(name))
                self.context.set_input_shape(name, array.shape)
                ptr = self.cuda.alloc(array.nbytes)
                buffers.append(ptr)
                self.cuda.to_device(ptr, array)
                self.context.set_tensor_address(name, ptr)
            outputs: dict[str, tuple[np.ndarray, int]] = {}
            for name in self._outputs:
                shape = tuple(self.context.get_tensor_shape(name))
                if any(d < 0 for d in shape):
                    raise RunnerUnavailable(f"output {name!r} has a data-dependent shape, which "
                                            "this runner does not handle")
                array = np.empty(shape, dtype=self._dtype(name))
                ptr = self.cuda.alloc(array.nbytes)
                buffers.append(ptr)
                self.context.set_tensor_address(name, ptr)
                outputs[name] = (array, ptr)
            if not self.context.execute_async_v3(self.cuda.stream.value or 0):
                raise RuntimeError("TensorRT execution failed: "
                                   + "; ".join(self.logger.errors()[:3]))
            self.cuda.synchronize()
            for array, ptr in outputs.values():
                self.cuda.to_host(array, ptr)
            return {name: outputs[name][0] for name in self._outputs}
        finally:
            for ptr in buffers:
                self.cuda.free(ptr)

    def close(self) -> None:
        # TensorRT objects first: they hold device memory of the CUDA context.
        self.context = None
        self.engine = None
        self.cuda.close()

    def _dtype(self, name: str) -> Any:
        kind = str(self.engine.get_tensor_dtype(name)).rsplit(".", 1)[-1]
        if kind == "BF16":
            import ml_dtypes

            return ml_dtypes.bfloat16
        return _NP_OF_TRT.get(kind, np.float32)
