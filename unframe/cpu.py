"""What this machine's CPU is, as runtimes' kernels see it (read once, no import beyond the
standard library).

``saturates_int8()``: x86 CPUs without VNNI (AVX2, and AVX-512 before VNNI) multiply uint8
activations by int8 weights with ``vpmaddubsw``, which adds pairs of products into int16 and
saturates there: onnxruntime's int8 kernels (its ``QLinearConv`` / ``MatMulInteger`` family) and
OpenVINO's CPU plugin lose accuracy on 8-bit weights. Both vendors' advice is 7-bit weights on
such CPUs (onnxruntime's ``reduce_range``, NNCF's ``OverflowFix.ENABLE``); a VNNI CPU
(``avx512_vnni``, ``avx_vnni``, AMX) and ARM's dot-product instructions accumulate in int32.
A seeded MnasNet's int8 graph on an AVX2 EPYC: cosine 0.974 with 8-bit weights, 0.990 with 7.
"""

from __future__ import annotations

import functools
import platform
import re
import subprocess

VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8", "avx_vnni_int8")


@functools.lru_cache(maxsize=1)
def info() -> tuple[str, frozenset[str]]:
    """(model name, instruction-set flags, lower case); empty where the system doesn't say."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            text = fh.read(200_000)
    except OSError:
        text = ""
    if text:
        name = re.search(r"^(?:model name|Hardware|CPU part)\s*:\s*(.*)$", text, re.MULTILINE)
        flags = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", text, re.MULTILINE)
        return ((name.group(1).strip() if name else platform.processor()),
                frozenset(flags.group(1).lower().split()) if flags else frozenset())
    if platform.system() == "Darwin":
        try:
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string", "machdep.cpu.features",
                                  "machdep.cpu.leaf7_features"], capture_output=True, text=True, timeout=5)
            lines = out.stdout.splitlines()
            flags = " ".join(lines[1:]).lower().replace("avx512vnni", "avx512_vnni")
            return (lines[0].strip() if lines else platform.processor()), frozenset(flags.split())
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor(), frozenset()


def is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")


def saturates_int8() -> bool:
    """Whether this CPU's int8 kernels saturate 8-bit weights (see the module's doc): an x86 CPU
    known to have AVX2 (its flags read) and no VNNI. Unknown flags: False (no claim made)."""
    flags = info()[1]
    return is_x86() and "avx2" in flags and not any(f in flags for f in VNNI_FLAGS)


__all__ = ["VNNI_FLAGS", "info", "is_x86", "saturates_int8"]
