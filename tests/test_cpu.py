"""unframe.cpu: which CPUs' int8 kernels saturate 8-bit weights."""

from __future__ import annotations

import pytest

from unframe import cpu


@pytest.mark.parametrize(("machine", "flags", "saturates"), [
    ("x86_64", {"sse4_2", "avx2"}, True),                    # AVX2 without VNNI: vpmaddubsw saturates
    ("x86_64", {"avx2", "avx512f", "avx512bw"}, True),       # AVX-512 before VNNI
    ("x86_64", {"avx2", "avx512f", "avx512_vnni"}, False),
    ("x86_64", {"avx2", "avx_vnni"}, False),
    ("x86_64", set(), False),                                # flags unknown: no claim
    ("aarch64", {"asimd", "asimddp"}, False),                # ARM accumulates in int32
])
def test_which_cpus_saturate_int8(monkeypatch, machine, flags, saturates):
    monkeypatch.setattr(cpu.platform, "machine", lambda: machine)
    monkeypatch.setattr(cpu, "info", lambda: ("some cpu", frozenset(flags)))
    assert cpu.saturates_int8() is saturates


@pytest.mark.skipif(not __import__("os").path.exists("/proc/cpuinfo"), reason="reads /proc/cpuinfo (Linux)")
def test_this_machines_cpu_is_read_from_proc_cpuinfo():
    with open("/proc/cpuinfo") as fh:
        text = fh.read()
    name, flags = cpu.info()
    assert flags and all(f in text for f in list(flags)[:20])
    assert name and name in text
