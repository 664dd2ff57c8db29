"""Structure-aware mutators for the fuzz harnesses.

atheris-libprotobuf-mutator has no wheel on PyPI for this Python (checked with pip for 3.10 to
3.14: none), so protobuf inputs (ONNX models, Core ML specs) are mutated here: a message is
parsed, one to three mutations are applied to its fields, and it is serialized again. Two kinds:

* generic: walk the message's descriptor to a random field and change it (a scalar to an edge
  value, a repeated field grown, shrunk or shuffled, a sub-message recursed into), the way
  libprotobuf-mutator does;
* ONNX-aware: the changes that reach the code paths a byte flip never does (an op renamed to
  another real op, an attribute given another type, a tensor's dims not matching its data,
  external data pointing at links, FIFOs or out of the folder, deep subgraph nesting, recursive
  functions, Loops with astronomical trip counts, sparse initializers, shapes of 2^40).

Zip archives (.pt2, .keras, .skops) are mutated member by member (JSON members structurally),
with archive-level attacks (entries escaping the folder, duplicate names, a member that inflates
a thousandfold). Text (TOML manifests) gets token-level mutations from a dictionary.

Every mutator is ``mutate(data: bytes, max_size: int, seed: int) -> bytes`` (atheris' custom
mutator signature) and deterministic for a seed; ``byte_mutate`` stands in for libFuzzer's own
mutation when atheris is absent (the plain engine of run.py).
"""

from __future__ import annotations

import io
import json
import random
import struct
import zipfile
from collections.abc import Callable
from typing import Any

Mutator = Callable[[bytes, int, int], bytes]

EDGE_INTS = (0, 1, -1, 2, 3, 7, 8, 255, 256, 1 << 15, (1 << 31) - 1, -(1 << 31), 1 << 32, (1 << 40),
             (1 << 62), (1 << 63) - 1, -(1 << 63))
EDGE_FLOATS = (0.0, -0.0, 1.0, -1.0, 0.5, 1e-45, 1e30, -1e30, float("inf"), float("-inf"), float("nan"), 65504.0)
EDGE_STRINGS = ("", "a", "x" * 300, "../x", "/etc/passwd", "..", ".", "\x00", "é", "%s%n", "{}", "[]",
                "null", "0", "-1", "1e999", "a" * 5000)


# ------------------------------------------------------------------------------- bytes ---------
def byte_mutate(data: bytes, max_size: int, rng: random.Random) -> bytes:
    """libFuzzer-like mutations of raw bytes (used without atheris, and inside members)."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.randrange(7)
        if choice == 0 and buf:  # flip bits
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif choice == 1 and buf:  # random byte
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif choice == 2:  # insert bytes
            i = rng.randint(0, len(buf))
            buf[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif choice == 3 and len(buf) > 1:  # erase a range
            i = rng.randrange(len(buf))
            del buf[i:i + rng.randint(1, max(1, len(buf) // 8))]
        elif choice == 4 and buf:  # interesting integer
            i = rng.randrange(len(buf))
            value = rng.choice(EDGE_INTS) & 0xFFFFFFFF
            buf[i:i + 4] = struct.pack("<I", value)
        elif choice == 5 and len(buf) > 2:  # duplicate a chunk
            i = rng.randrange(len(buf))
            chunk = buf[i:i + rng.randint(1, 64)]
            j = rng.randint(0, len(buf))
            buf[j:j] = chunk
        elif buf:  # truncate
            del buf[rng.randint(0, len(buf) - 1):]
    return bytes(buf[:max_size])


def bytes_mutator(data: bytes, max_size: int, seed: int) -> bytes:
    return byte_mutate(data, max_size, random.Random(seed))


# ------------------------------------------------------------------------- protobuf --------
def mutate_message(msg: Any, rng: random.Random, depth: int = 0) -> None:
    """Change one field somewhere in ``msg`` (generic, descriptor-driven)."""
    fields = msg.DESCRIPTOR.fields
    if not fields:
        return
    field = rng.choice(fields)
    repeated = field.label == field.LABEL_REPEATED if hasattr(field, "label") else field.is_repeated
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        container = getattr(msg, field.name)
        if container and rng.random() < 0.5:
            key = rng.choice(list(container.keys()))
            del container[key]
        return
    if field.type == field.TYPE_MESSAGE:
        if repeated:
            items = getattr(msg, field.name)
            if items and rng.random() < 0.7:
                action = rng.randrange(4)
                if action == 0:
                    del items[rng.randrange(len(items))]
                elif action == 1:
                    items.add().CopyFrom(rng.choice(items))
                elif depth < 8:
                    mutate_message(rng.choice(items), rng, depth + 1)
                else:
                    items.add()
            else:
                items.add()
            return
        sub = getattr(msg, field.name)
        if depth < 8 and (sub.ByteSize() or rng.random() < 0.3):
            mutate_message(sub, rng, depth + 1)
        else:
            msg.ClearField(field.name)
        return
    value = _scalar(field, rng)
    if repeated:
        items = getattr(msg, field.name)
        action = rng.randrange(4)
        try:
            if action == 0 and items:
                items[rng.randrange(len(items))] = value
            elif action == 1 and items:
                del items[rng.randrange(len(items))]
            elif action == 2:
                items.extend([value] * rng.choice((1, 2, 16)))
            else:
                items.append(value)
        except (TypeError, ValueError):
            pass
        return
    try:
        setattr(msg, field.name, value)
    except (TypeError, ValueError, AttributeError):
        pass


def _scalar(field: Any, rng: random.Random) -> Any:
    t = field.type
    if t in (field.TYPE_FLOAT, field.TYPE_DOUBLE):
        return rng.choice(EDGE_FLOATS)
    if t == field.TYPE_BOOL:
        return rng.random() < 0.5
    if t == field.TYPE_STRING:
        return rng.choice(EDGE_STRINGS)
    if t == field.TYPE_BYTES:
        return bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 4, 12, 64))))
    if t == field.TYPE_ENUM:
        values = [v.number for v in field.enum_type.values]
        return rng.choice(values + [max(values) + 1])
    bits = 64 if t in (field.TYPE_INT64, field.TYPE_UINT64, field.TYPE_SINT64, field.TYPE_FIXED64,
                       field.TYPE_SFIXED64) else 32
    unsigned = t in (field.TYPE_UINT32, field.TYPE_UINT64, field.TYPE_FIXED32, field.TYPE_FIXED64)
    value = rng.choice(EDGE_INTS)
    low, high = (0, (1 << bits) - 1) if unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    return min(max(value, low), high)


def proto_mutator(message_cls: Any, specific: list[Callable[[Any, random.Random], None]] | None = None,
                  crossover: list[bytes] | None = None) -> Mutator:
    """A custom mutator over ``message_cls`` messages: specific mutations (if any) half the time,
    generic field mutations otherwise, a raw byte mutation one time in ten."""

    def mutate(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        msg = message_cls()
        try:
            msg.ParseFromString(data)
        except Exception:  # noqa: BLE001 - not a message: mutate the bytes
            return byte_mutate(data, max_size, rng)
        if rng.random() < 0.1:
            return byte_mutate(data, max_size, rng)
        for _ in range(rng.randint(1, 3)):
            try:
                if specific and rng.random() < 0.6:
                    rng.choice(specific)(msg, rng)
                else:
                    mutate_message(msg, rng)
            except Exception:  # noqa: BLE001 - a mutation that didn't apply: try another
                continue
        try:
            out = msg.SerializeToString()
        except Exception:  # noqa: BLE001 - e.g. a string field given bad UTF-8
            return byte_mutate(data, max_size, rng)
        return out if len(out) <= max_size else byte_mutate(data, max_size, rng)

    return mutate


# ------------------------------------------------------------------------------ ONNX ---------
def _onnx() -> Any:
    import onnx

    return onnx


_OPS: list[tuple[str, str]] = []


def _ops() -> list[tuple[str, str]]:
    if not _OPS:
        onnx = _onnx()
        _OPS.extend(sorted({(s.domain, s.name) for s in onnx.defs.get_all_schemas_with_history()}))
    return _OPS


def _graphs(model: Any) -> list[Any]:
    out, stack = [], [model.graph]
    while stack:
        g = stack.pop()
        out.append(g)
        for n in g.node:
            for a in n.attribute:
                if a.HasField("g"):
                    stack.append(a.g)
                stack.extend(a.graphs)
    return out


def _nodes(model: Any) -> list[Any]:
    nodes = [n for g in _graphs(model) for n in g.node]
    nodes += [n for f in model.functions for n in f.node]
    return nodes


def _tensors(model: Any) -> list[Any]:
    out = [t for g in _graphs(model) for t in g.initializer]
    for n in _nodes(model):
        for a in n.attribute:
            if a.HasField("t"):
                out.append(a.t)
            out.extend(a.tensors)
    return out


def _names(model: Any) -> list[str]:
    names = {i.name for g in _graphs(model) for i in g.input}
    names |= {t.name for g in _graphs(model) for t in g.initializer}
    names |= {o for n in _nodes(model) for o in n.output}
    return sorted(names) or ["x"]


def m_op_type(model: Any, rng: random.Random) -> None:
    node = rng.choice(_nodes(model))
    domain, name = rng.choice(_ops())
    node.op_type = name if rng.random() < 0.9 else rng.choice(EDGE_STRINGS)
    if rng.random() < 0.3:
        node.domain = domain


def m_domain(model: Any, rng: random.Random) -> None:
    node = rng.choice(_nodes(model))
    node.domain = rng.choice(("", "ai.onnx", "ai.onnx.ml", "com.microsoft", "bogus.domain", "local"))


def m_inputs(model: Any, rng: random.Random) -> None:
    node = rng.choice(_nodes(model))
    names = _names(model)
    action = rng.randrange(4)
    if action == 0 or not node.input:
        node.input.append(rng.choice(names + [""]))
    elif action == 1:
        del node.input[rng.randrange(len(node.input))]
    elif action == 2:
        node.input[rng.randrange(len(node.input))] = rng.choice(names + ["", "ghost"])
    else:
        node.input.extend(node.input)


def m_outputs(model: Any, rng: random.Random) -> None:
    node = rng.choice(_nodes(model))
    action = rng.randrange(4)
    if action == 0 or not node.output:
        node.output.append(rng.choice(_names(model) + ["extra"]))
    elif action == 1:
        del node.output[rng.randrange(len(node.output))]
    elif action == 2:
        node.output[rng.randrange(len(node.output))] = rng.choice(_names(model) + [""])
    else:
        model.graph.output.add().name = rng.choice(_names(model))


def m_nodes(model: Any, rng: random.Random) -> None:
    g = rng.choice(_graphs(model))
    if not g.node:
        return
    action = rng.randrange(3)
    i = rng.randrange(len(g.node))
    if action == 0:
        del g.node[i]
    elif action == 1:
        g.node.add().CopyFrom(g.node[i])
    else:
        nodes = list(g.node)
        rng.shuffle(nodes)
        del g.node[:]
        g.node.extend(nodes)


def _attr_value(a: Any, rng: random.Random) -> None:
    onnx = _onnx()
    A = onnx.AttributeProto
    if a.type == A.INT:
        a.i = rng.choice(EDGE_INTS)
    elif a.type == A.FLOAT:
        a.f = rng.choice(EDGE_FLOATS)
    elif a.type == A.STRING:
        a.s = rng.choice(EDGE_STRINGS).encode("utf-8", "surrogatepass")
    elif a.type == A.INTS:
        del a.ints[:]
        a.ints.extend(rng.choice(EDGE_INTS) for _ in range(rng.choice((0, 1, 2, 3, 4, 9))))
    elif a.type == A.FLOATS:
        del a.floats[:]
        a.floats.extend(rng.choice(EDGE_FLOATS) for _ in range(rng.choice((0, 1, 2, 5))))
    elif a.type == A.TENSOR:
        _mutate_tensor(a.t, rng)
    elif a.type == A.GRAPH and a.g.node:
        del a.g.node[rng.randrange(len(a.g.node))]
    else:
        mutate_message(a, rng)


def m_attr(model: Any, rng: random.Random) -> None:
    onnx = _onnx()
    node = rng.choice(_nodes(model))
    action = rng.randrange(5)
    if node.attribute and action < 2:
        _attr_value(rng.choice(node.attribute), rng)
    elif node.attribute and action == 2:  # another type, same payload
        a = rng.choice(node.attribute)
        a.type = rng.choice(list(onnx.AttributeProto.AttributeType.values()))
    elif node.attribute and action == 3:
        del node.attribute[rng.randrange(len(node.attribute))]
    else:  # an attribute the schema names (or not), with some value
        try:
            schema = onnx.defs.get_schema(node.op_type, 30, node.domain)
            names = list(schema.attributes) or ["bogus"]
        except Exception:  # noqa: BLE001
            names = ["axis", "bogus"]
        a = node.attribute.add()
        a.name = rng.choice(names)
        a.type = rng.choice((onnx.AttributeProto.INT, onnx.AttributeProto.INTS, onnx.AttributeProto.FLOAT,
                             onnx.AttributeProto.STRING, onnx.AttributeProto.TENSOR))
        _attr_value(a, rng)


EXTERNAL_LOCATIONS = ("w.bin", "w.bin", "sub/w2.bin", "../outside.bin", "/etc/passwd", "link.bin",
                      "dirlink/w2.bin", "hard.bin", "fifo.bin", "missing.bin", "sub", "w.bin\x00x",
                      "a" * 300, "./w.bin", "sub/../w.bin", "\\..\\w.bin")


def _mutate_tensor(t: Any, rng: random.Random) -> None:
    onnx = _onnx()
    action = rng.randrange(6)
    if action == 0:  # dims
        if t.dims and rng.random() < 0.5:
            t.dims[rng.randrange(len(t.dims))] = rng.choice((0, 1, 2, 3, -1, 1 << 20, 1 << 40, (1 << 62)))
        elif rng.random() < 0.5:
            t.dims.append(rng.choice((1, 2, 3, 1 << 31)))
        elif t.dims:
            del t.dims[-1]
    elif action == 1:  # data type
        t.data_type = rng.choice(list(onnx.TensorProto.DataType.values()) + [99])
    elif action == 2:  # data
        if t.raw_data:
            t.raw_data = t.raw_data[: rng.randrange(len(t.raw_data) + 1)] if rng.random() < 0.6 \
                else t.raw_data + bytes(rng.choice((1, 4, 8)))
        else:
            t.raw_data = bytes(rng.randrange(256) for _ in range(rng.choice((1, 4, 16, 48))))
    elif action == 3:  # external data
        t.data_location = onnx.TensorProto.EXTERNAL
        del t.external_data[:]
        entries = [("location", rng.choice(EXTERNAL_LOCATIONS))]
        if rng.random() < 0.8:
            entries.append(("offset", rng.choice(("0", "0", "16", "-4", "x", str(1 << 40), "4096"))))
        if rng.random() < 0.8:
            entries.append(("length", rng.choice(("48", "12", "0", "-1", "4096", "1e3", str(1 << 40)))))
        if rng.random() < 0.1:
            entries.append(("location", "w.bin"))
        for k, v in entries:
            e = t.external_data.add()
            e.key, e.value = k, v
        t.ClearField("raw_data")
    elif action == 4:  # typed fields instead of raw data
        t.ClearField("raw_data")
        t.float_data.extend([1.0] * rng.choice((1, 3, 12)))
        t.int64_data.extend([rng.choice(EDGE_INTS)] * rng.choice((0, 1, 4)))
    else:
        mutate_message(t, rng)


def m_tensor(model: Any, rng: random.Random) -> None:
    tensors = _tensors(model)
    if tensors:
        _mutate_tensor(rng.choice(tensors), rng)


def m_value_info(model: Any, rng: random.Random) -> None:
    g = rng.choice(_graphs(model))
    infos = list(g.input) + list(g.output) + list(g.value_info)
    if not infos:
        return
    vi = rng.choice(infos)
    tt = vi.type.tensor_type
    action = rng.randrange(4)
    if action == 0:
        tt.elem_type = rng.choice(list(_onnx().TensorProto.DataType.values()))
    elif action == 1 and tt.shape.dim:
        d = tt.shape.dim[rng.randrange(len(tt.shape.dim))]
        if rng.random() < 0.7:
            d.dim_value = rng.choice((0, 1, -1, -7, 1 << 20, 1 << 40, (1 << 63) - 1))
        else:
            d.dim_param = rng.choice(("N", "", "batch", "?"))
    elif action == 2:
        tt.shape.dim.add().dim_value = rng.choice((1, 2, 1 << 30))
    else:
        vi.type.ClearField("tensor_type") if rng.random() < 0.5 else vi.type.sequence_type.elem_type.tensor_type.SetInParent()


def m_opset(model: Any, rng: random.Random) -> None:
    action = rng.randrange(4)
    if action == 0 and model.opset_import:
        model.opset_import[rng.randrange(len(model.opset_import))].version = rng.choice(
            (-1, 0, 1, 6, 7, 9, 11, 13, 17, 18, 21, 23, 24, 25, 28, 29, 99))
    elif action == 1:
        o = model.opset_import.add()
        o.domain, o.version = rng.choice((("ai.onnx.ml", 3), ("ai.onnx.ml", 99), ("com.microsoft", 1), ("", 13)))
    elif action == 2 and model.opset_import:
        del model.opset_import[rng.randrange(len(model.opset_import))]
    else:
        model.ir_version = rng.choice((0, 1, 3, 4, 7, 8, 9, 10, 11, 12, 99))


def m_subgraph(model: Any, rng: random.Random) -> None:
    """Wrap the graph's nodes in If branches (nesting grows with repeats), or a Loop with a huge
    constant trip count and a pass-through condition."""
    onnx = _onnx()
    from onnx import helper

    g = model.graph
    if not g.node or not g.output:
        return
    out = g.output[0].name
    body_nodes = list(g.node)
    if rng.random() < 0.5:
        branch = helper.make_graph(body_nodes, "then", [], [helper.make_tensor_value_info(out, 0, None)])
        depth = rng.choice((1, 2, 40))
        for _ in range(depth - 1):  # the else branch stays small: nesting, not doubling
            inner = helper.make_node("If", ["cond"], [out], then_branch=branch, else_branch=_empty(out))
            branch = helper.make_graph([inner], "nest", [], [helper.make_tensor_value_info(out, 0, None)])
        node = helper.make_node("If", ["cond"], [out], then_branch=branch, else_branch=_empty(out))
        cond = helper.make_tensor("cond", onnx.TensorProto.BOOL, [], [True])
        del g.node[:]
        g.node.append(node)
        g.initializer.append(cond)
        return
    trips = rng.choice((3, 1 << 31, (1 << 63) - 1))
    body = helper.make_graph([helper.make_node("Identity", ["c_in"], ["c_out"])], "body",
                             [helper.make_tensor_value_info("i", onnx.TensorProto.INT64, []),
                              helper.make_tensor_value_info("c_in", onnx.TensorProto.BOOL, [])],
                             [helper.make_tensor_value_info("c_out", onnx.TensorProto.BOOL, [])])
    g.initializer.append(helper.make_tensor("M", onnx.TensorProto.INT64, [], [trips]))
    g.node.insert(0, helper.make_node("Loop", ["M", ""], [], body=body, name="spin"))


def _empty(out: str) -> Any:
    from onnx import helper

    return helper.make_graph([helper.make_node("Constant", [], [out], value_float=0.0)], "else", [],
                             [helper.make_tensor_value_info(out, 0, None)])


def m_function(model: Any, rng: random.Random) -> None:
    """A model-local function copying a node, called from the graph; sometimes calling itself."""
    from onnx import helper

    if not model.graph.node:
        return
    node = rng.choice(model.graph.node)
    inner = helper.make_node(node.op_type, [f"i{k}" for k in range(len(node.input))],
                             [f"o{k}" for k in range(len(node.output))], domain=node.domain)
    inner.attribute.extend(node.attribute)
    if rng.random() < 0.4:
        inner = helper.make_node("f", inner.input, inner.output, domain="local")
    fn = helper.make_function("local", "f", list(inner.input), list(inner.output), [inner],
                              list(model.opset_import))
    model.functions.append(fn)
    node.op_type, node.domain = "f", "local"
    del node.attribute[:]
    if not any(o.domain == "local" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("local", 1))


def m_sparse(model: Any, rng: random.Random) -> None:
    import numpy as np
    from onnx import helper, numpy_helper

    dims = rng.choice(([4, 3], [1 << 40], [2, 2]))
    values = numpy_helper.from_array(np.array([1.0, 2.0], np.float32), rng.choice(_names(model)))
    indices = numpy_helper.from_array(np.array(rng.choice(([0, 5], [0, 99], [-1, 1])), np.int64), "idx")
    model.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, dims))


ONNX_MUTATIONS = [m_op_type, m_domain, m_inputs, m_outputs, m_nodes, m_attr, m_attr, m_tensor, m_tensor,
                  m_value_info, m_value_info, m_opset, m_subgraph, m_function, m_sparse]


def onnx_mutator() -> Mutator:
    return proto_mutator(_onnx().ModelProto, ONNX_MUTATIONS)


# ------------------------------------------------------------------------------- zip ---------
def _json_mutate(value: Any, rng: random.Random, depth: int = 0) -> Any:
    if isinstance(value, dict) and value:
        key = rng.choice(list(value))
        action = rng.randrange(4)
        if action == 0:
            del value[key]
        elif action == 1 and depth < 12:
            value[key] = _json_mutate(value[key], rng, depth + 1)
        elif action == 2:
            value[key] = rng.choice((None, 0, -1, 1 << 40, "", "x", [], {}, 1e308, True))
        else:
            value[rng.choice(EDGE_STRINGS[:8])] = rng.choice((None, 1, "a"))
        return value
    if isinstance(value, list) and value:
        i = rng.randrange(len(value))
        action = rng.randrange(3)
        if action == 0:
            del value[i]
        elif action == 1 and depth < 12:
            value[i] = _json_mutate(value[i], rng, depth + 1)
        else:
            value.append(value[i])
        return value
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return rng.choice(EDGE_INTS)
    if isinstance(value, float):
        return rng.choice(EDGE_FLOATS[:8])
    if isinstance(value, str):
        return rng.choice(EDGE_STRINGS) if rng.random() < 0.7 else value + value
    return rng.choice((None, 0, "", [], {}))


def _member_mutate(name: str, data: bytes, rng: random.Random, inner: Mutator | None) -> bytes:
    if name.endswith(".json"):
        try:
            obj = json.loads(data)
        except ValueError:
            return byte_mutate(data, 1 << 24, rng)
        # torch's .pt2 JSON holds JSON strings inside JSON: mutate one level in, sometimes
        return json.dumps(_json_mutate(obj, rng)).encode()
    if inner is not None and rng.random() < 0.5:
        return inner(data, 1 << 24, rng.randrange(1 << 30))
    return byte_mutate(data, 1 << 24, rng)


def zip_mutator(inner: dict[str, Mutator] | None = None) -> Mutator:
    """Mutate one member of a zip archive (or the archive itself): members by name suffix with
    ``inner`` mutators, JSON structurally; archive attacks: a member escaping the folder, a
    duplicate name, a member that inflates a thousandfold, a truncated archive."""
    inner = inner or {}

    def mutate(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                members = [(i.filename, zf.read(i)) for i in zf.infolist()]
        except Exception:  # noqa: BLE001 - not a zip (any more): bytes
            return byte_mutate(data, max_size, rng)
        if not members or rng.random() < 0.08:
            return byte_mutate(data, max_size, rng)
        action = rng.randrange(10)
        if action < 6:
            i = rng.randrange(len(members))
            name, body = members[i]
            suffix = next((s for s in inner if name.endswith(s)), None)
            members[i] = (name, _member_mutate(name, body, rng, inner.get(suffix) if suffix else None))
        elif action == 6:
            name, body = rng.choice(members)
            members.append((rng.choice(("../evil.txt", "/abs/evil", "a/../../evil", name)), body))
        elif action == 7:
            name, _ = rng.choice(members)
            members.append((name if rng.random() < 0.5 else f"{name.rsplit('/', 1)[0]}/bomb.bin",
                            bytes(rng.choice((1 << 16, 1 << 22)))))
        elif action == 8:
            del members[rng.randrange(len(members))]
        else:
            rng.shuffle(members)
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, body in members:
                zf.writestr(zipfile.ZipInfo(name), body, compress_type=zipfile.ZIP_DEFLATED)
        result = out.getvalue()
        return result if len(result) <= max_size else byte_mutate(data, max_size, rng)

    return mutate


# ------------------------------------------------------------------------------ text ---------
def text_mutator(tokens: tuple[str, ...]) -> Mutator:
    """Token-level mutation of a text file (a TOML manifest): insert, replace or delete lines
    and tokens from ``tokens``, or mutate the bytes."""

    def mutate(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        if rng.random() < 0.15:
            return byte_mutate(data, max_size, rng)
        lines = data.decode("utf-8", errors="replace").splitlines()
        for _ in range(rng.randint(1, 3)):
            action = rng.randrange(4)
            i = rng.randint(0, len(lines))
            if action == 0:
                lines.insert(i, rng.choice(tokens))
            elif action == 1 and lines:
                lines[min(i, len(lines) - 1)] = rng.choice(tokens)
            elif action == 2 and lines:
                del lines[min(i, len(lines) - 1)]
            elif lines:
                j = min(i, len(lines) - 1)
                key = lines[j].split("=", 1)[0]
                lines[j] = f"{key}= {rng.choice(tokens).split('=', 1)[-1].strip() or '1'}"
        return "\n".join(lines).encode()[:max_size]

    return mutate


# --------------------------------------------------------------------------- Core ML ---------
def _coreml_model_cls() -> Any:
    from coremltools.proto import Model_pb2

    return Model_pb2.Model


def _mil_operations(model: Any) -> list[Any]:
    ops: list[Any] = []
    if model.WhichOneof("Type") != "mlProgram":
        return ops
    stack = [b for f in model.mlProgram.functions.values() for b in f.block_specializations.values()]
    while stack:
        block = stack.pop()
        for op in block.operations:
            ops.append(op)
            stack.extend(op.blocks)
    return ops


def m_mil_blob(model: Any, rng: random.Random) -> None:
    """A const's weight reference moved: offsets past the file, into another blob's header."""
    for op in rng.sample(_mil_operations(model), k=min(8, len(_mil_operations(model)))):
        for attr in op.attributes.values():
            if attr.WhichOneof("value") == "blobFileValue":
                attr.blobFileValue.offset = rng.choice((0, 1, 64, 128, 192, 4096, 1 << 31, (1 << 64) - 1))
                if rng.random() < 0.3:
                    attr.blobFileValue.fileName = rng.choice(("@model_path/weights/weight.bin",
                                                              "@model_path/../../outside.bin", "/etc/passwd", ""))
                return


def m_mil_op(model: Any, rng: random.Random) -> None:
    """An op renamed to another op of the program, or its input bound to another value."""
    ops = _mil_operations(model)
    if not ops:
        return
    op = rng.choice(ops)
    if rng.random() < 0.5:
        op.type = rng.choice(ops).type
    elif op.inputs:
        key = rng.choice(list(op.inputs))
        args = op.inputs[key].arguments
        if args and args[0].WhichOneof("binding") == "name":
            args[0].name = rng.choice([o.name for other in ops for o in other.outputs] or ["ghost"])


def m_mil_type(model: Any, rng: random.Random) -> None:
    """A value's declared tensor type changed: rank, dims or dtype."""
    ops = _mil_operations(model)
    if not ops:
        return
    op = rng.choice(ops)
    if op.outputs:
        tensor = op.outputs[0].type.tensorType
        action = rng.randrange(3)
        if action == 0 and tensor.dimensions:
            tensor.dimensions[rng.randrange(len(tensor.dimensions))].constant.size = rng.choice(
                (0, 1, 3, 1 << 20, 1 << 40))
        elif action == 1:
            tensor.dataType = rng.randrange(30)
        else:
            tensor.rank = rng.choice((0, 1, 5, 1 << 20))


def coreml_mutator() -> Mutator:
    return proto_mutator(_coreml_model_cls(), [m_mil_blob, m_mil_op, m_mil_type])


# --------------------------------------------------------------------------- registry ---------
def tagged(kinds: list[Mutator]) -> Mutator:
    """The first byte picks the kind of the rest (kept, but changed one time in twenty)."""

    def mutate(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        tag = data[0] if data else 0
        if rng.random() < 0.05:
            tag = rng.randrange(256)
        body = kinds[tag % len(kinds)](data[1:], max_size - 1, rng.randrange(1 << 30))
        return bytes([tag]) + body

    return mutate


def engine_mutator(data: bytes, max_size: int, seed: int) -> bytes:
    """An engine + sidecar pair: the sidecar's JSON structurally, or the engine's bytes."""
    rng = random.Random(seed)
    engine, sep, sidecar = data.partition(b"\n--sidecar--\n")
    if sep and rng.random() < 0.7:
        try:
            sidecar = json.dumps(_json_mutate(json.loads(sidecar), rng)).encode()
        except ValueError:
            sidecar = byte_mutate(sidecar, max_size, rng)
    else:
        engine = byte_mutate(engine, max_size, rng)
    return (engine + b"\n--sidecar--\n" + sidecar)[:max_size]


TOML_TOKENS = (
    'root = "built"', 'root = "/"', 'root = "../../.."', 'root = 3', "[[model]]", "[model]",
    'name = "m"', 'name = ""', 'path = "torch/m/model.onnx"', 'path = "../../etc/passwd"',
    'path = "/etc/passwd"', 'path = ""', "path = 7", 'framework = "torch"', "framework = []",
    'opset = "x"', "opset = 1e999", "opset = -1", "opset = 99999999999999999999", "opset = 17",
    'builder = "torch_models.py:resnet_tiny"', "model = 1", "model = []", "[[model.sub]]",
    'about = """', 'x = {a = 1}', "[[", "= =", "\x00", 'name = "\\u0000"', "[[model]]\npath = 'a'",
)


def mutators_for(key: str) -> Mutator:
    if key == "onnx":
        return onnx_mutator()
    if key == "tagged_onnx":
        return tagged([onnx_mutator()])
    if key == "mlpackage":
        return zip_mutator({"model.mlmodel": coreml_mutator()})
    if key == "inspect":
        return tagged([onnx_mutator(), zip_mutator({"model.mlmodel": coreml_mutator()}), engine_mutator])
    if key == "zip":
        return zip_mutator()
    if key == "keras":
        return tagged([zip_mutator(), bytes_mutator])
    if key == "toml":
        return text_mutator(TOML_TOKENS)
    if key == "bytes":
        return bytes_mutator
    raise KeyError(key)
