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
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) and well_formed(data) else None


# The types of what unframe writes; a sidecar that differs is not one unframe wrote (or was
# edited), and its fields are not trusted to mean anything: it reads as unreadable.
_STR_FIELDS = ("flavour", "tensorrt_version", "gpu", "precision", "engine_sha256", "prepared_onnx_sha256",
               "format")
_DICT_FIELDS = ("flags", "network", "provenance")


def well_formed(meta: dict[str, Any]) -> bool:
    if any(k in meta and not isinstance(meta[k], str) for k in _STR_FIELDS):
        return False
    if any(k in meta and not isinstance(meta[k], dict) for k in _DICT_FIELDS):
        return False
    if meta.get("compute_capability") is not None and not isinstance(meta["compute_capability"], str):
        return False
    targets = meta.get("compute_capabilities")
    if targets is not None and not (isinstance(targets, list) and all(isinstance(t, str) for t in targets)):
        return False
    profiles = meta.get("profiles", [])
    if not isinstance(profiles, list) or not all(_profile_ok(p) for p in profiles):
        return False
    network = meta.get("network", {})
    inputs, outputs = network.get("inputs") or [], network.get("outputs") or []
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        return False
    layers = network.get("layers", 0)
    return isinstance(layers, int) and all(_tensor_ok(t) for t in inputs + outputs)


def _profile_ok(profile: Any) -> bool:
    return isinstance(profile, dict) and all(
        isinstance(name, str) and isinstance(p, dict)
        and all(isinstance(p.get(k), list) and all(isinstance(d, int) for d in p[k]) for k in ("min", "opt", "max"))
        for name, p in profile.items())


def _tensor_ok(t: Any) -> bool:
    return isinstance(t, dict) and isinstance(t.get("name", ""), str) and isinstance(t.get("dtype", ""), str) \
        and (t.get("shape") is None or (isinstance(t["shape"], list) and all(isinstance(d, int) for d in t["shape"])))


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
    targets = meta.get("compute_capabilities")
    if targets and device.compute_capability not in targets:
        return [f"built for compute capability {', '.join(targets)}, and this GPU ({device.name}) is "
                f"{device.compute_capability}: build it with a TensorRT that runs on this GPU"]
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
