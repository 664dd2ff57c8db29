"""The .tflite flatbuffer, read and written in Python (ai-edge-litert's generated schema).

* ``stamp``: unframe's records (provenance, the I/O map) as TFLite ``metadata`` entries named
  ``unframe.<key>`` holding UTF-8 text, and the main signature's keys renamed to the source's
  input and output names (a model without a signature gets one). The weights are copied into
  the new flatbuffer 16-byte aligned, as TFLite's converter writes them::

      before:  metadata [min_runtime_version, CONVERSION_METADATA]  signature {args_0 -> out_0}
      after:   metadata [..., unframe.io, unframe.source_sha256, ...]  signature {x -> logits}

* ``read``: what ``unframe inspect`` shows, from a file unframe may not have written. Nothing
  here runs the model; a malformed file is an ``InputError`` (every vector length is checked
  against the file's size before it is walked, so a forged count can't loop for hours).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from unframe.errors import ConversionError, InputError, MissingExtraError

MAGIC = b"TFL3"
PREFIX = "unframe."
IO_KEY = "unframe.io"
SIGNATURE = "serving_default"
ALIGNMENT = 16  # TFLite's converter aligns each buffer's data so (the schema's force_align)


def schema() -> Any:
    try:
        from ai_edge_litert import schema_py_generated
    except ImportError as exc:
        raise MissingExtraError("reading a .tflite flatbuffer", "litert", "ai-edge-litert") from exc
    return schema_py_generated


def is_tflite(data: bytes) -> bool:
    return len(data) >= 8 and data[4:8] == MAGIC


# ------------------------------------------------------------------------------------ write --
def stamp(content: bytes, entries: Mapping[str, str], io: Mapping[str, Any] | None = None) -> bytes:
    """``content`` with ``entries`` (keys ``unframe.*``) as its unframe metadata, replacing what
    an earlier stamp wrote, and with ``io`` the main signature keyed by the source's names."""
    import flatbuffers

    fb = schema()
    model = fb.ModelT.InitFromPackedBuf(bytearray(content), 0)
    if any(b.offset > 1 for b in model.buffers or []):
        # weights past 2 GB live after the flatbuffer at absolute offsets a repack would move
        raise ConversionError("the .tflite keeps its weights outside the flatbuffer (over 2 GB): unframe "
                              "can't add its metadata to it", "convert a smaller model, or use --to onnx")
    _drop_unframe_metadata(model)
    for key, text in entries.items():
        buffer = _AlignedBuffer()
        buffer.data = np.frombuffer(str(text).encode("utf-8"), dtype=np.uint8)
        model.buffers.append(buffer)
        meta = fb.MetadataT()
        meta.name, meta.buffer = key, len(model.buffers) - 1
        model.metadata.append(meta)
    if io is not None:
        _name_signature(model, io)
    model.buffers = [_aligned(b) for b in model.buffers]
    builder = flatbuffers.Builder(len(content) + 4096)
    builder.Finish(model.Pack(builder), file_identifier=MAGIC)
    return bytes(builder.Output())


def _drop_unframe_metadata(model: Any) -> None:
    """Earlier unframe entries go; their buffers stay as empty ones (indices must not move)."""
    model.metadata = list(model.metadata or [])
    kept = []
    for meta in model.metadata:
        name = meta.name.decode() if isinstance(meta.name, bytes) else str(meta.name or "")
        if name.startswith(PREFIX):
            model.buffers[meta.buffer].data = None
        else:
            kept.append(meta)
    model.metadata = kept


def _name_signature(model: Any, io: Mapping[str, Any]) -> None:
    """Signature keys = the source's names, matched to the subgraph's tensors by tensor name."""
    fb = schema()
    graph = model.subgraphs[0]
    index = {_text(t.name): i for i, t in enumerate(graph.tensors)}
    sig = next((s for s in model.signatureDefs or [] if s.subgraphIndex == 0), None)
    if sig is None:
        sig = fb.SignatureDefT()
        sig.signatureKey, sig.subgraphIndex = SIGNATURE, 0
        model.signatureDefs = [*(model.signatureDefs or []), sig]

    def maps(entries: list[dict[str, Any]]) -> list[Any]:
        out = []
        for e in entries:
            m = fb.TensorMapT()
            m.name, m.tensorIndex = e["name"], index[e["tensor"]]
            out.append(m)
        return out

    sig.inputs, sig.outputs = maps(io["inputs"]), maps(io["outputs"])


def _text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value or "")


class _AlignedBuffer:
    """A ``BufferT`` whose data is written 16-byte aligned (the generated Pack aligns to 1)."""

    data: Any = None
    offset: int = 0
    size: int = 0

    def Pack(self, builder: Any) -> int:  # noqa: N802 - the flatbuffers object API's name
        fb = schema()
        vector = None
        if self.data is not None:
            payload = np.ascontiguousarray(self.data, dtype=np.uint8).tobytes()
            builder.StartVector(1, len(payload), ALIGNMENT)
            builder.head -= len(payload)
            builder.Bytes[builder.head:builder.head + len(payload)] = payload
            vector = builder.EndVector(len(payload))
        fb.BufferStart(builder)
        if vector is not None:
            fb.BufferAddData(builder, vector)
        fb.BufferAddOffset(builder, self.offset)
        fb.BufferAddSize(builder, self.size)
        return int(fb.BufferEnd(builder))


def _aligned(buffer: Any) -> _AlignedBuffer:
    out = _AlignedBuffer()
    out.data, out.offset, out.size = buffer.data, buffer.offset, buffer.size
    return out


# ------------------------------------------------------------------------------------- read --
def read_file(path: Path) -> bytes:
    from unframe import io, limits

    io.check_readable_file(path, "TFLite model")
    limits.check_alloc(path.stat().st_size, f"reading {path.name}")  # read whole, as the interpreter does
    data = path.read_bytes()
    if not is_tflite(data):
        raise InputError(f"{path}: not a TFLite flatbuffer (no TFL3 identifier)",
                         "pass a .tflite file written by a TFLite converter")
    return data


def metadata(content: bytes, where: str = "the model") -> dict[str, bytes]:
    """Every metadata entry, name -> its buffer's bytes."""
    return _guarded(lambda: _Reader(content).metadata(), where)


def io_record(content: bytes) -> dict[str, Any] | None:
    """The I/O map unframe wrote (``unframe.io``), or None (a file from elsewhere)."""
    raw = metadata(content).get(IO_KEY)
    if raw is None:
        return None
    try:
        record = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    ok = isinstance(record, dict) and all(
        isinstance(record.get(k), list) and all(isinstance(e, dict) and isinstance(e.get("name"), str)
                                                and isinstance(e.get("tensor"), str) for e in record[k])
        for k in ("inputs", "outputs"))
    return record if ok else None


def describe(content: bytes, where: str) -> dict[str, Any]:
    """What inspect shows: I/O of the main subgraph, ops, signatures, sizes, metadata."""
    return _guarded(lambda: _Reader(content).describe(), where)


def _guarded(fn: Any, where: str) -> Any:
    try:
        return fn()
    except InputError as exc:
        raise InputError(f"{where}: {exc.message}", exc.hint) from None
    except Exception as exc:  # noqa: BLE001 - offsets of a malformed file fail in many ways
        raise InputError(f"{where}: not a readable TFLite flatbuffer ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:160] if str(exc) else ''})",
                         "the file is damaged or truncated; convert the model again") from None


class _Reader:
    """The read-only flatbuffer API with each vector length checked first."""

    def __init__(self, content: bytes) -> None:
        if not is_tflite(content):
            raise InputError("not a TFLite flatbuffer (no TFL3 identifier)",
                             "pass a .tflite file written by a TFLite converter")
        self.fb = schema()
        self.buf = bytearray(content)
        self.model = self.fb.Model.GetRootAs(self.buf, 0)
        self.size = len(content)

    def count(self, n: int, what: str, itemsize: int = 4) -> int:
        """``n`` if a vector of it fits in the file (its elements, or their offsets, take
        ``itemsize`` bytes each)."""
        if n < 0 or n * itemsize > self.size:
            raise InputError(f"its {what} count ({n}) does not fit in the file", "the file is damaged")
        return n

    def metadata(self) -> dict[str, bytes]:
        m = self.model
        out = {}
        buffers = self.count(m.BuffersLength(), "buffer")
        for i in range(self.count(m.MetadataLength(), "metadata")):
            entry = m.Metadata(i)
            name = _text(entry.Name())
            index = entry.Buffer()
            if not 0 <= index < buffers:
                raise InputError(f"metadata {name!r} points at buffer {index} of {buffers}", "the file is damaged")
            data = m.Buffers(index).DataAsNumpy()
            out[name] = b"" if isinstance(data, int) else bytes(data)
        return out

    def describe(self) -> dict[str, Any]:
        m = self.model
        graphs = self.count(m.SubgraphsLength(), "subgraph")
        if graphs == 0:
            raise InputError("it has no subgraph", "the file is damaged")
        main = m.Subgraphs(0)
        weights = 0
        for i in range(self.count(m.BuffersLength(), "buffer")):
            b = m.Buffers(i)
            weights += b.Size() if b.Offset() > 1 else self.count(b.DataLength(), "byte", 1)
        signatures = self.signatures()
        inputs = [self.tensor(main, main.Inputs(i)) for i in range(self.count(main.InputsLength(), "input"))]
        outputs = [self.tensor(main, main.Outputs(i)) for i in range(self.count(main.OutputsLength(), "output"))]
        keys = {tensor: key for s in signatures if s["subgraph"] == 0 for key, tensor in s["tensors"].items()}
        for t in inputs + outputs:  # named as its signature names it (the source's names, in unframe's)
            t["tensor"] = t["name"]
            t["name"] = keys.get(t["name"], t["name"])
        return {
            "schema_version": m.Version(),
            "description": _text(m.Description()),
            "subgraphs": graphs,
            "inputs": inputs,
            "outputs": outputs,
            "ops": self.ops(graphs),
            "signatures": signatures,
            "weights_bytes": weights,
            "metadata": self.metadata(),
        }

    def tensor(self, graph: Any, index: int) -> dict[str, Any]:
        if not 0 <= index < self.count(graph.TensorsLength(), "tensor"):
            raise InputError(f"an input or output names tensor {index}, which does not exist", "the file is damaged")
        t = graph.Tensors(index)
        dims = t.ShapeSignatureAsNumpy() if t.ShapeSignatureLength() else t.ShapeAsNumpy()
        shape = [] if isinstance(dims, int) else ["?" if int(d) < 0 else int(d) for d in dims]
        return {"name": _text(t.Name()), "shape": shape, "dtype": dtype_name(t.Type())}

    def ops(self, graphs: int) -> dict[str, int]:
        m = self.model
        codes = []
        for i in range(self.count(m.OperatorCodesLength(), "operator code")):
            code = m.OperatorCodes(i)
            builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
            name = builtin_name(builtin)
            codes.append(f"CUSTOM:{_text(code.CustomCode())}" if name == "CUSTOM" else name)
        ops: Counter[str] = Counter()
        for g in range(graphs):
            graph = m.Subgraphs(g)
            for i in range(self.count(graph.OperatorsLength(), "operator")):
                index = graph.Operators(i).OpcodeIndex()
                ops[codes[index] if 0 <= index < len(codes) else f"?{index}"] += 1
        return dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])))

    def signatures(self) -> list[dict[str, Any]]:
        m = self.model
        out = []
        for i in range(self.count(m.SignatureDefsLength(), "signature")):
            s = m.SignatureDefs(i)
            graph = s.SubgraphIndex()
            ins = [self.mapped(graph, s.Inputs(j)) for j in range(self.count(s.InputsLength(), "input"))]
            outs = [self.mapped(graph, s.Outputs(j)) for j in range(self.count(s.OutputsLength(), "output"))]
            out.append({"key": _text(s.SignatureKey()), "subgraph": graph,
                        "inputs": [k for k, _ in ins], "outputs": [k for k, _ in outs],
                        "tensors": dict(ins + outs)})
        return out

    def mapped(self, graph: int, entry: Any) -> tuple[str, str]:
        """(signature key, tensor name) of one TensorMap."""
        m = self.model
        if not 0 <= graph < self.count(m.SubgraphsLength(), "subgraph"):
            raise InputError(f"a signature names subgraph {graph}, which does not exist", "the file is damaged")
        sub = m.Subgraphs(graph)
        index = entry.TensorIndex()
        if not 0 <= index < self.count(sub.TensorsLength(), "tensor"):
            raise InputError(f"a signature names tensor {index}, which does not exist", "the file is damaged")
        return _text(entry.Name()), _text(sub.Tensors(index).Name())


# TFLite TensorType names -> ONNX's (inspect shows every kind's dtypes alike)
_ONNX_NAMES = {"FLOAT32": "float", "FLOAT64": "double", "FLOAT16": "float16", "BFLOAT16": "bfloat16",
               "STRING": "string"}


def dtype_name(code: int) -> str:
    names = {v: k for k, v in vars(schema().TensorType).items() if not k.startswith("_") and isinstance(v, int)}
    name = names.get(code, f"?{code}")
    return _ONNX_NAMES.get(name, name.lower())


def builtin_name(code: int) -> str:
    names = {v: k for k, v in vars(schema().BuiltinOperator).items() if not k.startswith("_") and isinstance(v, int)}
    return names.get(code, f"BUILTIN_{code}")
