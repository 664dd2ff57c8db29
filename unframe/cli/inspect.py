"""``unframe inspect``: what is in an artifact, read without running it.

* ONNX (``.onnx``): versions, ops, inputs/outputs, weights and external data (never read),
  metadata and provenance (``unframe.``-prefixed ``metadata_props``).
* CoreML (``.mlpackage`` folder, ``.mlmodel`` file): the spec (coremltools' protobuf; the model
  is never compiled or run, which Linux can't do anyway): spec version and the minimum
  deployment target it implies, inputs/outputs from the spec's description, the program's ops,
  user-defined metadata and provenance (bare or ``unframe.``-prefixed user-defined keys).
* TensorRT (``.engine``/``.plan``, with the ``<engine>.json`` sidecar): size, sha256 against the
  sidecar's, and what the sidecar records (flavour, version, GPU, precision, profiles, flags, I/O,
  provenance). TensorRT is never imported: a runtime object without a driver can crash.
* ExecuTorch (``.pte``, with the ``<program>.pte.json`` sidecar): header, sha256 against the
  sidecar's, what the sidecar records (versions, precision, I/O and bounds, XNNPACK's share,
  provenance); ExecuTorch reads only a program without a sidecar, in a child process.

``describe()`` returns, for every kind: ``path``, ``kind`` (``onnx``, ``mlpackage``, ``mlmodel``
or ``engine``), ``file_bytes``, ``inputs`` and ``outputs`` (``{name, shape, dtype}``; dtypes use
ONNX's names, dims are ints, symbol names, ``"lo..hi"`` ranges or ``"?"``), ``provenance`` (a
dict, maybe empty) and ``parity`` (the decoded parity summary or None), plus keys of its own kind.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from unframe.errors import InputError

# short: the terminal error line is cut at about 180 characters, path included
KINDS_TEXT = ".onnx, .mlpackage, .mlmodel and .engine/.plan"
PREFIX = "unframe."  # = unframe.io.PROVENANCE_PREFIX (importing io loads onnx; the CoreML path needn't)
# Provenance keys as unframe writes them (the pipeline's provenance record); bare keys outside
# this set stay metadata (a CoreML package's user-defined metadata is shared with its author's).
PROVENANCE_KEYS = ("version", "created", "source", "source_sha256", "route", "exporter", "export_route",
                   "notes", "tools", "opset_path", "parity")


def describe(path_text: str) -> dict[str, Any]:
    path = Path(path_text)
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        return _describe_onnx(path)
    if suffix in (".mlpackage", ".mlmodel"):
        return _describe_coreml(path, suffix[1:])
    if suffix == ".tflite":
        return _describe_tflite(path)
    if suffix == ".xml":
        return _describe_openvino(path)
    if not path.exists():
        raise InputError(f"{path}: no such file", "check the path")
    if suffix == ".pte":  # before the engines: a .pte has a .json sidecar too
        return _describe_pte(path)
    if path.is_file():
        from unframe.converters.backends.tensorrt.sidecar import is_engine_file

        if is_engine_file(path):
            return _describe_engine(path)
    hint = "convert it first: unframe convert ... --to onnx"
    if suffix == ".json" and path.with_suffix("").suffix.lower() in (".engine", ".plan"):
        hint = f"that is an engine's sidecar: inspect the engine, {path.with_suffix('').name}"
    raise InputError(f"{path}: inspect reads {KINDS_TEXT}", hint)


# ------------------------------------------------------------------------------- provenance --
def provenance_from_metadata(mapping: Mapping[str, Any], bare: Iterable[str] | None = None
                             ) -> dict[str, Any]:
    """unframe's provenance out of an artifact's key/value metadata: ``unframe.``-prefixed keys
    (prefix dropped) and the bare provenance keys (``bare``; by default ``PROVENANCE_KEYS``).
    JSON objects and arrays stored as text are decoded; a prefixed key wins over a bare one."""
    return _split_metadata(mapping, bare)[0]


def _split_metadata(mapping: Mapping[str, Any], bare: Iterable[str] | None = None
                    ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(provenance, the rest of the metadata). With the default ``bare``, bare keys count only
    when the mapping shows unframe wrote it (a prefixed key, or bare ``source_sha256`` and
    ``route``): someone else's ``version`` or ``source`` stays their metadata."""
    keys = {str(k) for k in mapping}
    if bare is None:
        ours = any(k.startswith(PREFIX) for k in keys) or {"source_sha256", "route"} <= keys
        bare_keys = PROVENANCE_KEYS if ours else frozenset()
    else:
        bare_keys = frozenset(bare)
    prov: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for key, value in mapping.items():
        key = str(key)
        if key.startswith(PREFIX) and len(key) > len(PREFIX):
            prov[key[len(PREFIX):]] = _decode(value)
        elif key in bare_keys:
            if PREFIX + key not in keys:  # the prefixed one wins
                prov[key] = _decode(value)
        else:
            rest[key] = value
    order = {k: i for i, k in enumerate(PROVENANCE_KEYS)}  # CoreML's metadata map has no order
    prov = dict(sorted(prov.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))
    return prov, dict(sorted(rest.items()))


def _decode(value: Any) -> Any:
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _parity(prov: Mapping[str, Any]) -> dict[str, Any] | None:
    """The parity summary, if it has the shape unframe writes (metadata is the file's, so its
    author's: anything else is shown as plain provenance text, not as a table)."""
    parity = prov.get("parity")
    if not isinstance(parity, dict):
        return None
    stages = parity.get("stages", [])
    return parity if isinstance(stages, list) and all(isinstance(s, dict) for s in stages) else None


# ------------------------------------------------------------------------------------- onnx --
def _describe_onnx(path: Path) -> dict[str, Any]:
    import onnx_ir as ir

    from unframe import io

    proto = io.load_proto(path)
    model = io.load_model(path)
    ops: Counter[str] = Counter()
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        ops[f"{node.domain}::{node.op_type}" if node.domain else node.op_type] += 1
    props = {p.key: p.value for p in proto.metadata_props}
    prov, rest = _split_metadata(props)
    return {
        "path": str(path),
        "kind": "onnx",
        "file_bytes": path.stat().st_size,
        "ir_version": proto.ir_version,
        "producer": f"{proto.producer_name} {proto.producer_version}".strip(),
        "opset_imports": {(o.domain or "ai.onnx"): o.version for o in proto.opset_import},
        "nodes": sum(ops.values()),
        "ops": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        "inputs": [_onnx_value(v) for v in model.graph.inputs if v.name not in model.graph.initializers],
        "outputs": [_onnx_value(v) for v in model.graph.outputs],
        "initializers": len(model.graph.initializers),
        "initializer_bytes": io.tensor_bytes(model),
        "external_data_files": sorted(io.external_files(proto)),
        "functions": [f"{f.domain}::{f.name}" for f in proto.functions],
        "metadata": rest,
        "provenance": prov,
        "parity": _parity(prov),
    }


def _onnx_value(v: Any) -> dict[str, Any]:
    shape = None if v.shape is None else [d if isinstance(d, int) else (str(d) if d is not None else "?")
                                          for d in v.shape]
    dtype = v.dtype.name.lower() if v.dtype is not None else "?"
    return {"name": v.name, "shape": shape, "dtype": dtype}


# ----------------------------------------------------------------------------------- coreml --
# spec versions before iOS13 (coremltools' ct.target starts at 4)
_OLD_SPEC_TARGETS = {1: "iOS11", 2: "iOS11.2", 3: "iOS12"}
_ARRAY_DTYPES = {"FLOAT32": "float", "DOUBLE": "double", "FLOAT16": "float16", "INT32": "int32",
                 "INT8": "int8"}
_COLOR_CHANNELS = {"GRAYSCALE": 1, "GRAYSCALE_FLOAT16": 1, "RGB": 3, "BGR": 3}


def _describe_coreml(path: Path, kind: str) -> dict[str, Any]:
    from unframe import io

    if not path.exists():
        raise InputError(f"{path}: no such file or folder", "check the path")
    if kind == "mlpackage" and not path.is_dir():
        raise InputError(f"{path}: a .mlpackage is a folder, this is a file",
                         "pass the package folder (a .mlmodel file is inspected as .mlmodel)")
    if kind == "mlmodel":
        io.check_readable_file(path, "CoreML model")
    else:
        from unframe import archives

        archives.check_folder(path, "Core ML package")  # links out, hard links, special files
    from unframe import sandbox
    from unframe.converters.backends.coreml.mil_eval.runner import SANDBOX, preload_coremltools, read_timeout

    # coremltools' package reader is native code a foreign package can crash: the whole reading
    # happens in a child process, which hands back the description (this process never imports
    # coremltools for inspect)
    return sandbox.call(SANDBOX, describe_coreml_in_child, path, kind, what=f"coremltools on {path.name}",
                        timeout=read_timeout(path), preload=preload_coremltools,
                        hint="the package is malformed; convert it again")


def describe_coreml_in_child(path: Path, kind: str) -> dict[str, Any]:
    """(In the child.) The description of a Core ML model or package, from its spec."""
    from unframe.converters.backends.coreml.mil_eval._ct import import_coremltools

    ct = import_coremltools()
    spec = _load_spec(ct, path, kind)
    description = spec.description
    inputs, outputs = description.input, description.output
    functions = [f.name for f in description.functions]
    default_function = description.defaultFunctionName or (functions[0] if functions else "")
    for f in description.functions:  # multi-function models describe I/O per function
        if f.name == default_function and not inputs and not outputs:
            inputs, outputs = f.input, f.output
    meta = description.metadata
    prov, rest = _split_metadata(dict(meta.userDefined))
    ops = _coreml_ops(spec)
    if kind == "mlpackage":
        files = [p for p in path.rglob("*") if p.is_file()]
        size = sum(p.stat().st_size for p in files)
        weights = sum(p.stat().st_size for p in files if "weights" in p.relative_to(path).parts)
    else:
        size, weights = path.stat().st_size, 0
    info: dict[str, Any] = {
        "path": str(path),
        "kind": kind,
        "file_bytes": size,
        "spec_version": spec.specificationVersion,
        "model_type": spec.WhichOneof("Type") or "?",
        "deployment_target": _deployment_target(ct, spec.specificationVersion),
        "inputs": [_feature(f) for f in inputs],
        "outputs": [_feature(f) for f in outputs],
        "nodes": sum(ops.values()),
        "ops": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        "weights_bytes": weights,
        "metadata": rest,
        "provenance": prov,
        "parity": _parity(prov),
    }
    if spec.WhichOneof("Type") == "mlProgram":
        main = spec.mlProgram.functions.get(default_function or "main")
        info["program_opset"] = main.opset if main is not None else "?"
    if functions:
        info["functions"] = functions
        info["default_function"] = default_function
    if description.predictedFeatureName:
        info["predicted_feature"] = description.predictedFeatureName
    if description.predictedProbabilitiesName:
        info["predicted_probabilities"] = description.predictedProbabilitiesName
    labels = _class_labels(spec)
    if labels is not None:
        info["class_labels"] = labels
    about = {"author": meta.author, "license": meta.license, "short_description": meta.shortDescription,
             "version_string": meta.versionString}
    info["description"] = {k: v for k, v in about.items() if v}
    return info


def _load_spec(ct: Any, path: Path, kind: str) -> Any:
    try:
        return ct.utils.load_spec(str(path))
    except Exception as exc:  # noqa: BLE001 - whatever coremltools raises on a bad package
        raise InputError(f"{path}: not a readable CoreML {kind} ({first_line(exc)})",
                         "the package may be incomplete or not CoreML; convert it again") from exc


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def _class_labels(spec: Any) -> list[Any] | None:
    """A classifier's labels, where the spec holds them outside a program."""
    which = spec.WhichOneof("Type") or ""
    if not which.endswith("Classifier") or which == "pipelineClassifier":
        return None
    model = getattr(spec, which)
    kind = model.WhichOneof("ClassLabels") if "ClassLabels" in model.DESCRIPTOR.oneofs_by_name else None
    if kind is None:
        return None
    return list(getattr(model, kind).vector)


def _deployment_target(ct: Any, spec_version: int) -> str:
    if spec_version in _OLD_SPEC_TARGETS:
        return _OLD_SPEC_TARGETS[spec_version]
    names = [n for n, m in ct.target.__members__.items() if m.value == spec_version]
    if not names:
        return f"? (spec version {spec_version} is newer than this coremltools knows)"
    first, *others = names
    return f"{first} ({', '.join(others)})" if others else first


def _feature(f: Any) -> dict[str, Any]:
    t = f.type
    which = t.WhichOneof("Type")
    out: dict[str, Any] = {"name": f.name, "shape": None, "dtype": "?"}
    if which == "multiArrayType":
        out.update(_array(t.multiArrayType))
    elif which == "imageType":
        image = t.imageType
        color = type(image).ColorSpace.Name(image.colorSpace)
        height: Any = image.height
        width: Any = image.width
        if image.HasField("imageSizeRange"):
            height = _range(image.imageSizeRange.heightRange, image.height)
            width = _range(image.imageSizeRange.widthRange, image.width)
        out.update(shape=[1, _COLOR_CHANNELS.get(color, "?"), height, width],
                   dtype=f"image {color}", image={"color_space": color})
        if image.HasField("enumeratedSizes"):
            out["enumerated_sizes"] = [[s.height, s.width] for s in image.enumeratedSizes.sizes]
    elif which == "dictionaryType":
        key = t.dictionaryType.WhichOneof("KeyType")
        out.update(dtype=f"dict {'string' if key == 'stringKeyType' else 'int64'} -> double")
    elif which == "sequenceType":
        elem = t.sequenceType.WhichOneof("Type")
        out.update(dtype=f"sequence of {'string' if elem == 'stringType' else 'int64'}")
    elif which == "stateType":
        out.update(_array(t.stateType.arrayType))
        out["dtype"] = f"state {out['dtype']}"
    elif which in ("int64Type", "doubleType", "stringType"):
        out.update(shape=[], dtype={"int64Type": "int64", "doubleType": "double",
                                    "stringType": "string"}[which])
    if t.isOptional:
        out["optional"] = True
    return out


def _array(array: Any) -> dict[str, Any]:
    dtype = type(array).ArrayDataType.Name(array.dataType)
    shape: list[Any] | None = list(array.shape) or None
    extra: dict[str, Any] = {}
    ranges = list(array.shapeRange.sizeRanges) if array.HasField("shapeRange") else []
    if ranges:  # flexible shape: the spec's shape is the default one
        defaults = shape if shape and len(shape) == len(ranges) else [None] * len(ranges)
        shape = [_range(r, d) for r, d in zip(ranges, defaults, strict=True)]
    if array.HasField("enumeratedShapes") and array.enumeratedShapes.shapes:
        extra["enumerated_shapes"] = [list(s.shape) for s in array.enumeratedShapes.shapes]
    if (ranges or extra) and array.shape:
        extra["default_shape"] = list(array.shape)
    name = _ARRAY_DTYPES.get(dtype, "?" if dtype.startswith("INVALID") else dtype.lower())
    return {"shape": shape, "dtype": name, **extra}


def _range(r: Any, default: Any) -> Any:
    lo, hi = int(r.lowerBound), int(r.upperBound)
    if lo == hi:
        return lo
    if lo == 0 and hi == 0:  # unset range
        return default if default is not None else "?"
    return f"{lo}..{'?' if hi < 0 else hi}"


def _coreml_ops(spec: Any) -> Counter[str]:
    ops: Counter[str] = Counter()
    which = spec.WhichOneof("Type")
    if which == "mlProgram":
        for function in spec.mlProgram.functions.values():
            block = function.block_specializations.get(function.opset)
            if block is not None:
                _count_block(block, ops)
    elif which in ("neuralNetwork", "neuralNetworkClassifier", "neuralNetworkRegressor"):
        for layer in getattr(spec, which).layers:
            ops[layer.WhichOneof("layer") or "?"] += 1
    elif which in ("pipeline", "pipelineClassifier", "pipelineRegressor"):
        pipeline = spec.pipeline if which == "pipeline" else getattr(spec, which).pipeline
        for sub in pipeline.models:
            ops.update(_coreml_ops(sub))
    elif which:
        ops[which] += 1
    return ops


def _count_block(block: Any, ops: Counter[str]) -> None:
    for op in block.operations:
        if op.type != "const":
            ops[op.type] += 1
        for inner in op.blocks:
            _count_block(inner, ops)


# --------------------------------------------------------------------------------- openvino --
def _describe_openvino(path: Path) -> dict[str, Any]:
    """An OpenVINO IR (.xml and its .bin), read by OpenVINO in a child process (its reader is
    native code a foreign file could crash); provenance from the ``unframe`` rt_info."""
    from unframe import sandbox
    from unframe.converters.backends.openvino.describe import READ_TIMEOUT, SANDBOX, describe_ir, preload

    info = sandbox.call(SANDBOX, describe_ir, path, what=f"OpenVINO on {path.name}", timeout=READ_TIMEOUT,
                        preload=preload, hint="the IR is malformed; convert it again")
    prov, rest = _split_metadata(info.pop("rt_info"))
    info.update(metadata=rest, provenance=prov, parity=_parity(prov))
    return info


def _render_openvino(info: dict[str, Any], console: Any) -> None:
    weights = ", ".join(f"{k} {_bytes(v)}" for k, v in (info.get("weights") or {}).items()) or "none"
    console.print(f"IR version {info['ir_version']}, model {info['name']!r}; constants: {weights}", markup=False)


# ----------------------------------------------------------------------------------- litert --
def _describe_tflite(path: Path) -> dict[str, Any]:
    """A LiteRT flatbuffer, read in Python (the interpreter is never built): I/O of the main
    subgraph, ops, signatures, metadata entries and unframe's provenance among them."""
    from unframe.converters.backends.litert import flatbuf

    info = flatbuf.describe(flatbuf.read_file(path), str(path))
    texts = {}
    for name, raw in info.pop("metadata").items():
        text = raw.rstrip(b"\0").decode("utf-8", errors="replace")
        texts[name] = text if text.isprintable() else f"<{len(raw)} bytes>"
    prov, rest = _split_metadata(texts)
    return {"path": str(path), "kind": "tflite", "file_bytes": path.stat().st_size, **info,
            "nodes": sum(info["ops"].values()), "metadata": rest, "provenance": prov, "parity": _parity(prov)}


def _render_tflite(info: dict[str, Any], console: Any) -> None:
    console.print(f"LiteRT (TFLite) model, schema version {info['schema_version']}, {info['subgraphs']} "
                  f"subgraph(s), weights {_bytes(info['weights_bytes'])}"
                  + (f"; {info['description']}" if info.get("description") else ""), markup=False)
    for s in info.get("signatures") or []:
        console.print(f"signature {s['key']!r}: ({', '.join(s['inputs'])}) -> ({', '.join(s['outputs'])})",
                      markup=False)


# ------------------------------------------------------------------------------- executorch --
def _describe_pte(path: Path) -> dict[str, Any]:
    """An ExecuTorch program: header and sha256 read here, the rest from its sidecar
    (``converters.backends.executorch.describe``); ExecuTorch itself only reads a program that
    has no sidecar, in a child process."""
    from unframe.converters.backends.executorch.describe import describe_pte

    info = describe_pte(path)
    raw = info["provenance"]
    info["provenance"] = provenance_from_metadata(raw, bare=raw) if isinstance(raw, dict) else {}
    info["parity"] = _parity(info["provenance"])
    return info


def _render_pte(info: dict[str, Any], console: Any) -> None:
    header = info["header"]
    console.print(f"ExecuTorch program {header['identifier']}: {_bytes(header['program_bytes'])} of program, "
                  f"{_bytes(header['segment_bytes'])} of weight segments; sha256 {info['program_sha256']}",
                  markup=False)
    if info["sidecar_status"] != "ok":
        console.print(f"sidecar {info['sidecar']} is {info['sidecar_status']}: "
                      + (info.get("io_note") or "versions, bounds and provenance are unknown"),
                      markup=False, style="yellow")
        return
    match = info["sha256_match"]
    if match is False:
        console.print("sha256 does NOT match the sidecar's: the program was replaced or corrupted "
                      "after it was written", style="bold red")
    elif match:
        console.print("sha256 matches the sidecar", style="green")
    console.print(f"ExecuTorch {info.get('executorch_version') or '?'}, torch {info.get('torch_version') or '?'}, "
                  f"precision {info.get('precision') or '?'}, method {info.get('method') or '?'}", markup=False)
    d = info.get("delegation") or {}
    if d:
        portable = ", ".join(f"{op} x{n}" for op, n in (d.get("portable_ops") or {}).items()) or "none"
        console.print(f"{d.get('backend', '?')}: {d.get('delegated_nodes', '?')} operator nodes in "
                      f"{d.get('subgraphs', '?')} subgraphs; portable kernels: {portable}", markup=False)


# ----------------------------------------------------------------------------------- engine --
# TensorRT DataType names -> ONNX's, so that every kind's I/O reads the same
_TRT_DTYPES = {"FLOAT": "float", "HALF": "float16", "BF16": "bfloat16", "INT8": "int8", "INT32": "int32",
               "INT64": "int64", "BOOL": "bool", "UINT8": "uint8", "FP8": "float8e4m3fn", "INT4": "int4",
               "FP4": "float4e2m1", "DOUBLE": "double"}
_SIDECAR_COPY = ("format", "flavour", "tensorrt_version", "gpu", "compute_capability", "compute_capabilities",
                 "precision", "strongly_typed", "profiles", "flags", "prepared_onnx_sha256")


def _describe_engine(path: Path) -> dict[str, Any]:
    """From the bytes (size, sha256) and the sidecar; TensorRT is not imported."""
    from unframe import io
    from unframe.converters.backends.tensorrt.sidecar import compat_problems, read_sidecar, sidecar_path

    side_path = sidecar_path(path)
    meta = read_sidecar(path)
    digest = io.sha256_of(path)
    info: dict[str, Any] = {
        "path": str(path),
        "kind": "engine",
        "file_bytes": path.stat().st_size,
        "engine_sha256": digest,
        "sidecar": str(side_path),
        "sidecar_status": "ok" if meta is not None else ("unreadable" if side_path.exists() else "missing"),
        "inputs": [],
        "outputs": [],
        "provenance": {},
        "parity": None,
    }
    if meta is None:
        info["sha256_match"] = None
        return info
    expected = meta.get("engine_sha256")
    info["sidecar_engine_sha256"] = expected
    info["sha256_match"] = None if not expected else expected == digest
    info.update({k: meta.get(k) for k in _SIDECAR_COPY})
    info["profiles"] = meta.get("profiles") or []
    info["flags"] = meta.get("flags") or {}
    network = meta.get("network") if isinstance(meta.get("network"), dict) else {}
    profile = info["profiles"][0] if info["profiles"] and isinstance(info["profiles"][0], dict) else {}
    if network.get("inputs") is not None:
        info["inputs"] = [_trt_value(v, profile.get(v.get("name"))) for v in network["inputs"]]
        info["outputs"] = [_trt_value(v, None) for v in network.get("outputs") or []]
    else:  # an older sidecar: the profile still names every input
        info["inputs"] = [{"name": name, "shape": _profile_shape(p), "dtype": "?"}
                          for name, p in profile.items()]
    if "layers" in network:
        info["layers"] = network["layers"]
    raw_prov = meta.get("provenance")
    info["provenance"] = provenance_from_metadata(raw_prov, bare=raw_prov) if isinstance(raw_prov, dict) else {}
    info["parity"] = _parity(info["provenance"])
    info["compat_here"] = compat_problems(meta)
    return info


def _trt_value(v: Mapping[str, Any], profile: Mapping[str, Any] | None) -> dict[str, Any]:
    shape = v.get("shape")
    ranged = _profile_shape(profile) if profile else None
    if isinstance(shape, list):
        shape = [ranged[i] if d == -1 and ranged and i < len(ranged) else ("?" if d == -1 else d)
                 for i, d in enumerate(shape)]
    dtype = str(v.get("dtype", "?")).split(".")[-1].upper()
    return {"name": v.get("name", "?"), "shape": shape, "dtype": _TRT_DTYPES.get(dtype, dtype.lower())}


def _profile_shape(p: Mapping[str, Any]) -> list[Any] | None:
    lo, hi = p.get("min"), p.get("max")
    if not isinstance(lo, list) or not isinstance(hi, list) or len(lo) != len(hi):
        return None
    return [a if a == b else f"{a}..{b}" for a, b in zip(lo, hi, strict=True)]


# ----------------------------------------------------------------------------------- render --
def render(info: dict[str, Any], console: Any) -> None:
    from rich.markup import escape

    kind = info.get("kind", "onnx")
    label = {"onnx": "ONNX model", "mlpackage": "CoreML package", "mlmodel": "CoreML model",
             "engine": "TensorRT engine", "openvino": "OpenVINO IR"}.get(kind, kind)
    console.print(f"[bold]{escape(info['path'])}[/] ({label}, {_bytes(info['file_bytes'])})")
    if kind == "onnx":
        _render_onnx(info, console)
    elif kind in ("mlpackage", "mlmodel"):
        _render_coreml(info, console)
    elif kind == "engine":
        _render_engine(info, console)
    elif kind == "tflite":
        _render_tflite(info, console)
    elif kind == "openvino":
        _render_openvino(info, console)
    elif kind == "pte":
        _render_pte(info, console)
    _io_tables(info, console)
    if info.get("ops"):
        n = info.get("nodes", sum(info["ops"].values()))
        t = _table(f"ops ({n} nodes)" if kind == "onnx" else f"ops ({n}, constants not counted)",
                   "op", "count")
        for op, n in info["ops"].items():
            t.add_row(_text(op), str(n))
        console.print(t)
    if kind == "onnx":
        console.print(f"initializers: {info['initializers']} ({_bytes(info['initializer_bytes'])})", markup=False)
        if info["external_data_files"]:
            console.print("external data: " + ", ".join(info["external_data_files"]), markup=False)
        if info["functions"]:
            console.print("functions: " + ", ".join(info["functions"]), markup=False)
    for k, v in (info.get("metadata") or {}).items():
        console.print(f"metadata {k}: {v}", markup=False)
    _render_provenance(info, console)


def _render_onnx(info: dict[str, Any], console: Any) -> None:
    console.print(f"IR version {info['ir_version']}, producer {info['producer'] or '?'}, opsets "
                  + ", ".join(f"{d} {v}" for d, v in info["opset_imports"].items()), markup=False)


def _render_coreml(info: dict[str, Any], console: Any) -> None:
    line = f"{info['model_type']}, spec version {info['spec_version']}"
    if info.get("program_opset"):
        line += f", program opset {info['program_opset']}"
    console.print(line, markup=False)
    console.print(f"minimum deployment target: {info['deployment_target']}", markup=False)
    if info.get("weights_bytes"):
        console.print(f"weights: {_bytes(info['weights_bytes'])}", markup=False)
    if info.get("functions"):
        console.print(f"functions: {', '.join(info['functions'])} (default {info['default_function']})",
                      markup=False)
    if info.get("predicted_feature"):
        labels = info.get("class_labels")
        console.print(f"classifier: predicts {info['predicted_feature']}"
                      + (f", probabilities in {info['predicted_probabilities']}"
                         if info.get("predicted_probabilities") else "")
                      + (f"; {len(labels)} labels: " + ", ".join(map(str, labels[:10]))
                         + (", ..." if len(labels) > 10 else "") if labels else ""), markup=False)
    for k, v in (info.get("description") or {}).items():
        console.print(f"{k.replace('_', ' ')}: {v}", markup=False)


def _render_engine(info: dict[str, Any], console: Any) -> None:
    console.print(f"sha256 {info['engine_sha256']}", markup=False)
    status = info["sidecar_status"]
    if status != "ok":
        console.print(f"sidecar {info['sidecar']} is {status}: TensorRT version, GPU, profiles and "
                      "provenance are unknown", markup=False, style="yellow")
        return
    match = info["sha256_match"]
    if match is True:
        console.print("sha256 matches the sidecar", style="green")
    elif match is False:
        console.print(f"sha256 does NOT match the sidecar's ({info['sidecar_engine_sha256']}): the engine "
                      "was replaced or corrupted after it was built", markup=False, style="bold red")
    else:
        console.print("the sidecar records no sha256 to check against", style="yellow")
    console.print(f"built with {info.get('flavour') or '?'} {info.get('tensorrt_version') or '?'}; GPU: "
                  f"{info.get('gpu') or '?'}"
                  + (f" (compute {info['compute_capability']})" if info.get("compute_capability") else "")
                  + (f"; runs on compute {', '.join(info['compute_capabilities'])}"
                     if info.get("compute_capabilities") else ""),
                  markup=False)
    console.print(f"precision {info.get('precision') or '?'}"
                  + (", strongly typed" if info.get("strongly_typed") else "")
                  + (f", {info['layers']} layers" if info.get("layers") is not None else ""), markup=False)
    flags = info.get("flags") or {}
    console.print("flags: " + (", ".join(f"{k}={v}" for k, v in flags.items()) if flags else "none"),
                  markup=False)
    for i, profile in enumerate(info.get("profiles") or []):
        t = _table(f"optimization profile {i}", "input", "min", "opt", "max")
        for name, p in profile.items():
            t.add_row(*(_text(x) for x in (name, _dims(p.get("min")), _dims(p.get("opt")), _dims(p.get("max")))))
        console.print(t)
    problems = info.get("compat_here") or []
    if problems:
        console.print("can't load here: " + "; ".join(problems), markup=False, style="yellow")
    else:
        console.print("loadable here (as far as the sidecar tells)", style="green")


def _io_tables(info: dict[str, Any], console: Any) -> None:
    for title in ("inputs", "outputs"):
        rows = info.get(title) or []
        if not rows:
            continue
        t = _table(title, "name", "shape", "dtype")
        for r in rows:
            t.add_row(_text(r["name"]), _text(_dims(r["shape"])), _text(r["dtype"]))
        console.print(t)


def _render_provenance(info: dict[str, Any], console: Any) -> None:
    prov = info.get("provenance") or {}
    if not prov:
        console.print("no unframe provenance recorded", style="dim")
        return
    t = _table("provenance (unframe)", "key", "value")
    for k, v in prov.items():
        if k == "parity" and isinstance(v, dict):
            continue
        t.add_row(_text(k), _text(v if isinstance(v, str) else _short(v)))
    console.print(t)
    parity = info.get("parity")
    if parity:
        t = _table(f"parity when converted ({'passed' if parity.get('passed') else 'FAILED'})",
                   "stage", "status", "reference -> candidate", "max abs", "max rel", "cases")
        for s in parity.get("stages") or []:
            status = str(s.get("status", "?")) + (f" ({s['reason']})" if s.get("reason") else "")
            t.add_row(*(_text(x) for x in (s.get("stage", "?"), status,
                                           f"{s.get('reference', '?')} -> {s.get('candidate', '?')}",
                                           _num(s.get("max_abs")), _num(s.get("max_rel")),
                                           str(s.get("cases", "")))))
        console.print(t)
        for s in parity.get("stages") or []:
            if isinstance(s.get("accuracy"), dict):
                _render_quantization(s["accuracy"], console)


SHOWN_LAYERS = 40  # rows of the per-layer table; --json lists every layer


def _render_quantization(acc: Mapping[str, Any], console: Any) -> None:
    """The accuracy guard's record of a quantized artifact: figures, size, latency, and the
    scheme each weighted layer holds."""
    t = _table(f"quantization ({acc.get('scheme', '?')})", "measure", "value")
    size, latency = acc.get("size"), acc.get("latency")
    cosine = acc.get("cosine")
    ppl = acc.get("perplexity")
    rows = [("thresholds", acc.get("thresholds")), ("top-1 agreement", _share(acc.get("top1"))),
            ("cosine (lowest)", f"{min(cosine.values()):.5f}" if isinstance(cosine, dict) and cosine else None),
            ("greedy tokens identical", _share(acc.get("tokens"))),
            ("perplexity float -> quantized", f"{ppl[0]:.4g} -> {ppl[1]:.4g}" if isinstance(ppl, list) and len(ppl) == 2 else None),
            ("calibrated on", acc.get("calibration")), ("quantized by", acc.get("quantizer") or None),
            ("failed first", "; ".join(acc.get("quantizers_failed") or []) or None),
            ("kept in float", ", ".join(acc.get("kept_float") or []) or None),
            ("size (bytes float -> quantized)",
             f"{size[0]} -> {size[1]} ({size[1] / max(size[0], 1):.2f}x)" if isinstance(size, list) and len(size) == 2 else None),
            ("latency float -> quantized",
             f"{latency['before_ms']:.3g} -> {latency['after_ms']:.3g} ms ({latency['ratio']:.2f}x; {latency['runtime']}, "
             f"median of {latency['runs']})" if isinstance(latency, dict) else acc.get("latency_note") or None),
            ("judged by", acc.get("predicted") or None)]
    for name, value in rows:
        if value not in (None, "", []):
            t.add_row(_text(name), _text(_num(value) if isinstance(value, float) else value))
    console.print(t)
    layers = acc.get("layers")
    if isinstance(layers, dict) and layers:
        t = _table(f"scheme per layer ({acc.get('layers_source') or '?'})", "layer", "scheme")
        for name, scheme in list(layers.items())[:SHOWN_LAYERS]:
            t.add_row(_text(name), _text(scheme))
        if len(layers) > SHOWN_LAYERS:
            t.add_row(_text(f"+{len(layers) - SHOWN_LAYERS} more"), _text("--json lists every layer"))
        console.print(t)


def _share(v: Any) -> str | None:
    return f"{v:.1%}" if isinstance(v, (int, float)) else None


def _table(title: str, *columns: str) -> Any:
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=escape(title))
    for c in columns:
        t.add_column(escape(c), overflow="fold", justify="right" if c in ("count", "cases") else "left")
    return t


def _text(value: Any) -> Any:
    from rich.text import Text

    return Text(str(value))  # never markup: names like "x[0]" stay as they are


def _dims(shape: Any) -> str:
    if shape is None:
        return "?"
    if not isinstance(shape, list):
        return str(shape)
    return "x".join(map(str, shape)) or "scalar"


def _num(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else ("" if v is None else str(v))


def _short(v: Any) -> str:
    return json.dumps(v, default=str)


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
