"""Which GPUs a flavour's engines run on. TensorRT-RTX's runtime refuses every engine on a GPU
whose compute capability it doesn't list (an H100, compute 9.0: "TensorRT-RTX does not support
this compute capability", seen by bench/trt_gpu.py on a lent H100), and its engines are built for
a portable list of compute capabilities, not for the machine that built them.

The real tensorrt-rtx module and builder; the GPU is the one thing stood in for (this machine has
none): ``trtmodule.cuda_device`` answers with the device each case needs. No TensorRT runtime
object is made, so nothing here touches a CUDA driver."""

from __future__ import annotations

import json

import pytest
from trt_models import cnn_model, trt_or_skip

from unframe.converters.backends.tensorrt import sidecar, trtmodule
from unframe.converters.backends.tensorrt.runner import TensorRTRunner
from unframe.converters.base import RunnerUnavailable, Target
from unframe.converters.registry import BACKENDS

H100 = trtmodule.CudaDevice(1, "NVIDIA H100 80GB HBM3", "9.0")
RTX_4090 = trtmodule.CudaDevice(1, "NVIDIA GeForce RTX 4090", "8.9")
RTX_2080 = trtmodule.CudaDevice(1, "NVIDIA GeForce RTX 2080 Ti", "7.5")


@pytest.fixture
def rtx():
    trt = trt_or_skip()
    if trt.__name__ != "tensorrt_rtx":
        pytest.skip(f"the installed flavour is {trt.__name__}, not tensorrt_rtx")
    return trt


def gpu(monkeypatch, device):
    monkeypatch.setattr(trtmodule, "cuda_device", lambda: device)


def test_runs_on_lists_every_compute_capability_of_the_module(rtx):
    members = [n for n in dir(rtx.ComputeCapability) if n.startswith("SM")]
    listed = trtmodule.runs_on(rtx)
    assert len(listed) == len(members) >= 4
    for name in members:  # SM120 -> 12.0, SM86 -> 8.6
        assert f"{name[2:-1]}.{name[-1]}" in listed
    assert set(trtmodule.RTX_DEFAULT_TARGETS) <= set(listed)
    if rtx.__version__.startswith("1.7."):  # the pinned release: what docs/support.md says
        assert listed == trtmodule.RTX_RUNS_ON
    # Hopper is not among them (the H100 refused every engine): when a release adds it, the
    # engine_gap message and docs/support.md change with it
    assert "9.0" not in listed


def test_engine_gap_names_the_gpu_and_what_runs(rtx):
    gap = trtmodule.engine_gap(rtx, H100)
    assert gap is not None and "9.0" in gap and H100.name in gap
    assert all(cc in gap for cc in trtmodule.runs_on(rtx))
    assert trtmodule.engine_gap(rtx, RTX_4090) is None


def test_runner_refuses_before_any_cuda_call_on_an_unsupported_gpu(rtx, monkeypatch):
    gpu(monkeypatch, H100)
    # the engine bytes are never read: the refusal comes first, before libcuda is asked anything
    with pytest.raises(RunnerUnavailable, match=r"runs engines only on compute capability .*this GPU "
                                                 r"\(NVIDIA H100 80GB HBM3\) is 9\.0"):
        TensorRTRunner(b"not an engine", rtx)


def test_rtx_engine_records_its_portable_targets_and_compat_checks_them(rtx, monkeypatch, tmp_path):
    backend = BACKENDS.get("tensorrt")
    target = Target("tensorrt", options={"builder_optimization_level": 0})
    gpu(monkeypatch, H100)  # built on a machine with an H100: the engine still isn't for it
    artifact = backend.convert(cnn_model(batch=1), target, tmp_path)
    meta = artifact.metadata
    assert meta["compute_capabilities"] == list(trtmodule.RTX_DEFAULT_TARGETS)
    assert meta["compute_capability"] is None and meta["gpu"] == H100.name
    assert backend.probe(cnn_model(batch=1), target) is None  # the locator can't run engines here

    engine = tmp_path / "m.engine"
    engine.write_bytes(artifact.model)
    sidecar.write_sidecar(engine, meta)
    assert sidecar.read_sidecar(engine)["compute_capabilities"] == meta["compute_capabilities"]
    problems = sidecar.check_engine_compat(engine)
    assert any("this GPU (NVIDIA H100 80GB HBM3) is 9.0" in p for p in problems), problems
    gpu(monkeypatch, RTX_2080)  # Turing: not in the portable default either
    assert any("is 7.5" in p for p in sidecar.check_engine_compat(engine))
    gpu(monkeypatch, RTX_4090)
    assert not any("compute capability" in p for p in sidecar.check_engine_compat(engine))

    meta["compute_capabilities"] = "8.9"  # not a list: not a sidecar unframe wrote
    (tmp_path / "m.engine.json").write_text(json.dumps(meta))
    assert sidecar.read_sidecar(engine) is None
