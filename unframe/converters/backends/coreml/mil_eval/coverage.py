"""Which core MIL ops (iOS15..iOS18) the evaluator has kernels for, for docs/support.md."""

from __future__ import annotations

from unframe.converters.backends.coreml.mil_eval._ct import import_coremltools
from unframe.converters.backends.coreml.mil_eval.registry import KERNELS

_TARGETS = ("iOS15", "iOS16", "iOS17", "iOS18")


def core_mil_ops() -> list[str]:
    """Every public core MIL op coremltools defines for an ML Program target (iOS15..iOS18)."""
    import_coremltools()
    import coremltools.converters.mil.mil.ops.defs  # noqa: F401  (registers the ops)
    from coremltools.converters.mil.mil.ops.registry import SSAOpRegistry

    ops = []
    for name, versions in SSAOpRegistry.core_ops.items():
        if name.startswith("_"):
            continue
        if any(getattr(target, "name", str(target)) in _TARGETS for target in versions):
            ops.append(name)
    return sorted(ops)


def coverage() -> tuple[list[str], list[str]]:
    """(core MIL ops with a kernel, every core MIL op). ``const`` needs no kernel and counts as covered."""
    known = core_mil_ops()
    covered = sorted(op for op in known if op in KERNELS or op == "const")
    return covered, known
