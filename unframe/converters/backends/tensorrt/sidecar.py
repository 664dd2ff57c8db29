"""The JSON sidecar next to an engine (``model.engine.json``), and what it lets us check before
loading an engine: an engine only runs on the TensorRT version (unless version-compatible) and
the GPU (unless hardware-compatible) it was built for, and loading a mismatched one fails deep
inside TensorRT (or crashes the lean runtime).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from unframe.converters.backends.tensorrt import trtmodule
from unframe.errors import InputError

SIDECAR_SUFFIX = ".json"
ENGINE_SUFFIXES = (".engine", ".plan", ".trt")
AOT_ON_CPU = "built AOT on CPU"


def sidecar_path(engine_path: Path) -> Path:
    return engine_path.with_name(engine_path.name + SIDECAR_SUFFIX)


def write_sidecar(engine_path: Path, metadata: dict[str, Any]) -> Path:
    path = sidecar_path(engine_path)
    path.write_text(json.dumps(metadata, indent=2, sort_keys=True, default=str) + "\n",
                    encoding="utf-8")
    return path


def read_sidecar(engine_path: Path) -> dict[str, Any] | None:
    path = sidecar_path(engine_path)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check_engine_compat(engine_path: Path | str) -> list[str]:
    """Why this machine can't load the engine, judged from its sidecar; empty when it can
    (as far as the sidecar tells). Never imports TensorRT."""
    engine_path = Path(engine_path)
    meta = read_sidecar(engine_path)
    if meta is None:
        return [f"{engine_path.name} has no readable sidecar ({sidecar_path(engine_path).name}): "
                "its TensorRT version and GPU are unknown"]
    return compat_problems(meta)


def compat_problems(meta: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    flavour = meta.get("flavour")
    installed = trtmodule.installed_flavour()
    if installed is None:
        problems.append("no TensorRT module is installed to load it")
    elif flavour and flavour != installed:
        problems.append(f"built with {flavour}, but this machine has {installed}")
    else:
        built = str(meta.get("tensorrt_version", ""))
        here = next(iter(trtmodule.distribution_versions(installed).values()), "")
        if built and here and built != here and not _version_compatible(meta, built, here):
            problems.append(f"built with {flavour} {built}, but {here} is installed "
                            "(rebuild, or build with --version-compatible)")
    problems.extend(_gpu_problems(meta))
    return problems


def _version_compatible(meta: dict[str, Any], built: str, here: str) -> bool:
    # Version-compatible engines load on the same or a later major release.
    flags = meta.get("flags") or {}
    return bool(flags.get("version_compatible")) and built.split(".")[0] <= here.split(".")[0]


def _gpu_problems(meta: dict[str, Any]) -> list[str]:
    device = trtmodule.cuda_device()
    if isinstance(device, str):
        return [f"no CUDA device: {device}"]
    built_on = meta.get("gpu")
    if not built_on or built_on == AOT_ON_CPU:
        return []
    flags = meta.get("flags") or {}
    if flags.get("hardware_compatibility") in ("ampere_plus",):
        return []
    built_cc = meta.get("compute_capability")
    if built_cc and built_cc != device.compute_capability:
        return [f"built for {built_on} (compute {built_cc}), this GPU is {device.name} "
                f"(compute {device.compute_capability}); rebuild or use --hardware-compatibility"]
    return []


def is_engine_file(path: Path) -> bool:
    """By suffix, by an unframe sidecar beside it, or by the serialized engine's magic: four
    bytes ending in "trt" ("ftrt" for TensorRT plans, "vtrt" seen from TensorRT-RTX)."""
    if path.suffix.lower() in ENGINE_SUFFIXES:
        return True
    if path.suffix.lower() in (".onnx", ".json") or not path.is_file():
        return False
    if sidecar_path(path).is_file():
        return True
    with path.open("rb") as f:
        head = f.read(4)
    return len(head) == 4 and head[1:] == b"trt" and head[:1].isalpha()


def reject_engine_input(path: Path | str) -> None:
    """Raise InputError when ``path`` is a TensorRT engine: an engine is a build product for one
    GPU and TensorRT version, not a model unframe can convert."""
    path = Path(path)
    if not is_engine_file(path):
        return
    meta = read_sidecar(path) or {}
    source = (meta.get("provenance") or {}).get("source") or meta.get("onnx_sha256")
    from_hint = f" (its sidecar names the source: {source})" if source else ""
    raise InputError(
        f"{path} is a TensorRT engine, which unframe can't convert from{from_hint}",
        "convert the ONNX or framework model it was built from instead",
        details={"engine_compat": check_engine_compat(path)})
