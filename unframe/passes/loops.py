"""Loops whose trip count hides in their condition, given that count as ``M``.

tf2onnx writes ``for t in tf.range(12)`` as a while loop: no trip count (``M`` empty, or
INT64_MAX), the body carries a counter and computes the condition ``Less(t + delta, limit)``
from it, every input of that computation a constant. A backend that sizes a loop's scan outputs
(or unrolls it, or maps it to a for-loop) from its trip count can't take that: TensorRT's parser
refuses "TensorRT cannot infer the shape of scan output ... since no trip limit was set", and the
same Loop blocks Core ML.

``ConstantTripCountPass`` finds the part of the body the condition depends on (the *control
slice*: nodes, carried values and their updates), checks that it reads nothing but constants,
the iteration number and itself, and runs it, one iteration at a time, from the constant initial
values until the condition turns false. The count it reaches is the loop's trip count for every
input of the model. It is written as ``M``; when the body's incoming condition is unused the loop
condition is dropped (a plain for-loop: the body's condition output becomes a constant true),
otherwise it is kept beside ``M``, which then never stops the loop earlier than it stopped.

Any backend opts in by running the pass in its graph preparation, after its constant folding if
it has one (the pass evaluates constant subexpressions of the initial values itself)::

    ir.passes.PassManager([..., ConstantTripCountPass(), ...])(model)

Loops whose control slice reads a graph input or any value computed from one, runs past
``max_trips`` iterations, holds large carried values or custom-domain / random ops are left as
they are.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_ir as ir

from unframe.opset import DEFAULT_DOMAINS, FALLBACK_OPSET, main_opset

logger = logging.getLogger(__name__)

# The simulation runs the control slice once per iteration in onnx's reference evaluator
# (~0.1 ms each for a counter and a comparison): this bounds the pass to about a second.
MAX_TRIPS = 10_000
MAX_SLICE_NODES = 64
MAX_CONTROL_ELEMENTS = 1024  # a carried control value larger than this is not a counter
NO_TRIP_LIMIT = np.iinfo(np.int32).max  # TensorRT reads an M this large as "no trip limit"
RANDOM_OPS = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
              "Multinomial", "Bernoulli", "Dropout"}


def has_trip_limit(node: ir.Node) -> bool:
    """The Loop has an ``M`` that a runtime reads as a trip count: present, and (when constant)
    below INT32_MAX (measured: tensorrt_rtx 1.7 treats M >= 2**31 - 1 as no limit)."""
    trip = node.inputs[0] if node.inputs else None
    if trip is None:
        return False
    known = constant_value(trip)
    return known is None or int(known.reshape(-1)[0]) < NO_TRIP_LIMIT


class ConstantTripCountPass(ir.passes.InPlacePass):
    """Write a condition-only Loop's constant trip count as its ``M``.

    Before::

        Loop(M="", cond=true, t=0, y=x, limit=12, delta=1)
          body(i, c, t, y, limit, delta):  t' = t + delta;  y' = f(y, t)
                                           c' = Less(Cast(t'), Cast(limit))
                                           -> c', t', y', limit, delta, [scan: y']
    After::

        Loop(M=12, cond="", t=0, y=x, limit=12, delta=1)
          body: the same, but -> true, t', y', limit, delta, [scan: y']
    """

    def __init__(self, max_trips: int = MAX_TRIPS) -> None:
        super().__init__()
        self.max_trips = max_trips

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        opset = main_opset(model, default=FALLBACK_OPSET)
        count = 0
        for node in list(ir.traversal.RecursiveGraphIterator(model.graph)):
            if node.op_type != "Loop" or node.domain not in DEFAULT_DOMAINS:
                continue
            trips = trip_count(node, opset, self.max_trips)
            if trips is None:
                continue
            _write_trip_count(model, node, trips)
            count += 1
        return ir.passes.PassResult(model, modified=bool(count))


def trip_count(node: ir.Node, opset: int = FALLBACK_OPSET, max_trips: int = MAX_TRIPS) -> int | None:
    """The number of iterations ``node`` (a Loop with no usable ``M``) runs for any model input,
    or None when its condition depends on more than constants or it runs past ``max_trips``."""
    if has_trip_limit(node) or len(node.inputs) < 2 or node.inputs[1] is None:
        return None
    body_attr = node.attributes.get("body")
    if body_attr is None or body_attr.type != ir.AttributeType.GRAPH:
        return None
    control = _control_slice(node, body_attr.value, opset)
    if control is None:
        return None
    given = constant_value(node.inputs[0], opset)  # an M runtimes read as no limit still bounds it
    try:
        return control.run(opset, None if given is None else int(given.reshape(-1)[0]), max_trips)
    except Exception as exc:  # an op the reference evaluator lacks: leave the loop alone
        logger.debug("trip count of %s not evaluated: %s", node.name, exc)
        return None


@dataclass
class _Control:
    """The body's condition and the carried values it depends on, with their start values."""

    body: ir.Graph
    nodes: list[ir.Node]
    carried: list[int]  # indices (into the loop-carried values) the condition depends on
    start: list[np.ndarray]
    cond: np.ndarray
    constants: dict[int, np.ndarray] = field(default_factory=dict)  # id(value) -> array

    def run(self, opset: int, given: int | None, max_trips: int) -> int | None:
        """Iterations until the condition is false (or ``given``, the loop's own M, is reached);
        None past ``max_trips``."""
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(self._model(opset))
        state, cond, trips = list(self.start), bool(self.cond.reshape(-1)[0]), 0
        while cond:
            if given is not None and trips >= given:
                return trips
            if trips >= max_trips:
                return None
            feeds = {"iteration": np.array(trips, np.int64), "cond_in": np.array(cond)}
            feeds.update({f"carried_{k}": value for k, value in zip(self.carried, state, strict=True)})
            results = evaluator.run(None, feeds)
            cond, state = bool(np.asarray(results[0]).reshape(-1)[0]), [np.asarray(r) for r in results[1:]]
            trips += 1
        return trips

    def _model(self, opset: int) -> onnx.ModelProto:
        names: dict[int, str] = {id(self.body.inputs[0]): "iteration", id(self.body.inputs[1]): "cond_in"}
        names.update({id(self.body.inputs[2 + k]): f"carried_{k}" for k in self.carried})

        def name(value: ir.Value) -> str:
            return names.setdefault(id(value), f"v{len(names)}")

        inputs = [onnx.helper.make_tensor_value_info("iteration", onnx.TensorProto.INT64, []),
                  onnx.helper.make_tensor_value_info("cond_in", onnx.TensorProto.BOOL, [])]
        inputs += [_info(f"carried_{k}", a) for k, a in zip(self.carried, self.start, strict=True)]
        nodes = []
        for node in self.nodes:
            proto = ir.serde.serialize_node(node)
            proto.ClearField("input")
            proto.input.extend(name(v) if v is not None else "" for v in node.inputs)
            proto.ClearField("output")
            proto.output.extend(name(v) for v in node.outputs)
            nodes.append(proto)
        wanted = [self.body.outputs[0], *(self.body.outputs[1 + k] for k in self.carried)]
        outputs = []
        for index, value in enumerate(wanted):  # through Identity: outputs may repeat an input
            nodes.append(onnx.helper.make_node("Identity", [name(value)], [f"out_{index}"]))
            outputs.append(onnx.helper.make_empty_tensor_value_info(f"out_{index}"))
        inits = [onnx.numpy_helper.from_array(array, names[key]) for key, array in self.constants.items()
                 if key in names]
        graph = onnx.helper.make_graph(nodes, "loop_control", inputs, outputs, inits)
        return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])


def _info(name: str, array: np.ndarray) -> onnx.ValueInfoProto:
    return onnx.helper.make_tensor_value_info(name, onnx.helper.np_dtype_to_tensor_dtype(array.dtype),
                                              array.shape)


def _control_slice(loop: ir.Node, body: ir.Graph, opset: int) -> _Control | None:
    """Walk back from the body's condition output; None when it reaches anything not constant."""
    if len(body.inputs) < 2 or not body.outputs:
        return None
    positions = {id(v): i for i, v in enumerate(body.inputs)}
    cond0 = constant_value(loop.inputs[1], opset)
    if cond0 is None or cond0.size != 1:
        return None
    carried: set[int] = set()
    in_slice: dict[int, ir.Node] = {}
    constants: dict[int, np.ndarray] = {}
    pending = [body.outputs[0]]
    while pending:
        value = pending.pop()
        position = positions.get(id(value))
        if position is not None:
            k = position - 2
            if k >= 0 and k not in carried:
                if 1 + k >= len(body.outputs) or 2 + k >= len(loop.inputs):
                    return None
                carried.add(k)
                pending.append(body.outputs[1 + k])
            continue
        producer = value.producer()
        if producer is not None and producer.graph is body:
            if id(producer) in in_slice:
                continue
            if not _evaluable(producer) or len(in_slice) >= MAX_SLICE_NODES:
                return None
            in_slice[id(producer)] = producer
            pending.extend(v for v in producer.inputs if v is not None)
            continue
        known = constant_value(value, opset)  # a body initializer or a constant of an outer scope
        if known is None:
            return None
        constants[id(value)] = known
    start = []
    for k in sorted(carried):
        initial = constant_value(loop.inputs[2 + k], opset)
        if initial is None or initial.size > MAX_CONTROL_ELEMENTS:
            return None
        start.append(initial)
    nodes = [n for n in body if id(n) in in_slice]  # the body's order is topological
    return _Control(body, nodes, sorted(carried), start, cond0, constants)


def _evaluable(node: ir.Node) -> bool:
    return (node.domain in DEFAULT_DOMAINS and node.op_type not in RANDOM_OPS
            and not any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
                        for a in node.attributes.values()))


def constant_value(value: ir.Value | None, opset: int = FALLBACK_OPSET, depth: int = 0) -> np.ndarray | None:
    """``value``'s array when every input to it is a constant: an initializer that is not a graph
    input, a Constant node, or a small deterministic node over those (evaluated here)."""
    if value is None or depth > 16:
        return None
    if value.const_value is not None and not value.is_graph_input():
        return value.const_value.numpy()
    node = value.producer()
    if node is None or not _evaluable(node):
        return None
    if node.op_type == "Constant":
        return _constant_attr(node)
    arrays = [constant_value(v, opset, depth + 1) if v is not None else None for v in node.inputs]
    if any(a is None and v is not None for a, v in zip(arrays, node.inputs, strict=True)):
        return None
    if sum(a.size for a in arrays if a is not None) > MAX_CONTROL_ELEMENTS:
        return None
    return _evaluate(node, arrays, value, opset)


def _constant_attr(node: ir.Node) -> np.ndarray | None:
    attr = node.attributes.get("value")
    if attr is not None and attr.type == ir.AttributeType.TENSOR:
        return attr.value.numpy()
    for name, dtype in (("value_int", np.int64), ("value_ints", np.int64),
                        ("value_float", np.float32), ("value_floats", np.float32)):
        if name in node.attributes:
            return np.asarray(node.attributes[name].value, dtype)
    return None


def _evaluate(node: ir.Node, arrays: list[np.ndarray | None], wanted: ir.Value,
              opset: int) -> np.ndarray | None:
    from onnx.reference import ReferenceEvaluator

    proto = ir.serde.serialize_node(node)
    proto.ClearField("input")
    proto.input.extend(f"in_{i}" if a is not None else "" for i, a in enumerate(arrays))
    proto.ClearField("output")
    proto.output.extend(f"out_{i}" for i in range(len(node.outputs)))
    inputs = [_info(f"in_{i}", a) for i, a in enumerate(arrays) if a is not None]
    outputs = [onnx.helper.make_empty_tensor_value_info(n) for n in proto.output]
    version = node.version or opset
    graph = onnx.helper.make_graph([proto], "fold", inputs, outputs)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", version)])
    try:
        results = ReferenceEvaluator(model).run(None, {f"in_{i}": a for i, a in enumerate(arrays)
                                                      if a is not None})
    except Exception as exc:  # an op the evaluator lacks: not a known constant
        logger.debug("not evaluating %s: %s", node.op_type, exc)
        return None
    return np.asarray(results[list(node.outputs).index(wanted)])


def _write_trip_count(model: ir.Model, loop: ir.Node, trips: int) -> None:
    graph = loop.graph
    assert graph is not None
    name = f"{loop.name or 'Loop'}_trip_count"
    tensor = ir.Tensor(np.array(trips, np.int64), name=name)
    if graph is model.graph:
        trip = ir.Value(name=name, const_value=tensor, shape=ir.Shape([]),
                        type=ir.TensorType(ir.DataType.INT64))
        graph.register_initializer(trip)
    else:  # a loop inside a subgraph: a Constant node beside it
        constant = ir.node("Constant", [], {"value": tensor}, name=name)
        constant.outputs[0].name = name
        constant.outputs[0].type, constant.outputs[0].shape = ir.TensorType(ir.DataType.INT64), ir.Shape([])
        graph.insert_before(loop, constant)
        trip = constant.outputs[0]
    loop.replace_input_with(0, trip)
    body = loop.attributes["body"].value
    if body.inputs[1].uses():
        return  # the body reads its incoming condition: keep the loop's condition beside M
    loop.replace_input_with(1, None)
    true = ir.node("Constant", [], {"value": ir.Tensor(np.array(True), name=f"{name}_true")},
                   name=f"{name}_true")
    true.outputs[0].name = f"{name}_true"
    true.outputs[0].type, true.outputs[0].shape = ir.TensorType(ir.DataType.BOOL), ir.Shape([])
    body.append(true)
    body.outputs[0] = true.outputs[0]
