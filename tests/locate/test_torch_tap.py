"""TorchTap against onnxruntime with every intermediate as an output, on real torch models
exported by the torch frontend (dynamo): the shared intermediates agree, a perturbed initializer
is found at exactly the node that reads it, and the node is traced back to the user's code."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (torch)")
pytest.importorskip("onnxscript", reason="needs the torch extra (onnxscript)")

import onnx  # noqa: E402
import onnx_ir as ir  # noqa: E402
import onnxruntime as ort  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "converters" / "frontends"))  # torch_models
import torch_models  # noqa: E402

from unframe.converters.base import ConvertOptions, InputSpec  # noqa: E402
from unframe.converters.registry import FRONTENDS  # noqa: E402
from unframe.locate.torch_tap import TorchTap, source_line, source_location  # noqa: E402

REL_TOL = 1e-4


class MLP(torch.nn.Module):
    """Linear-GELU-Linear-tanh-Linear: no rewrite folds its nodes together."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 16)
        self.fc2 = torch.nn.Linear(16, 16)
        self.out = torch.nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.gelu(self.fc1(x))
        h = torch.tanh(self.fc2(h))
        return self.out(h)


def _perturbed(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Seeded weights, scaled and shifted so activations and outputs are of order 1."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.mul_(1.5).add_(0.2 * torch.randn(param.shape, generator=gen))
    return model.eval()


def _cnn() -> tuple[torch.nn.Module, torch.Tensor]:
    return _perturbed(torch_models.make_cnn(), 3), torch_models.cnn_sample()


def _mlp() -> tuple[torch.nn.Module, torch.Tensor]:
    return _perturbed(torch_models.seeded(MLP), 4), torch.randn(
        4, 6, generator=torch.Generator().manual_seed(5))


def _export(model: torch.nn.Module, sample: torch.Tensor, **options: str):
    return FRONTENDS.get("torch").to_onnx(model, InputSpec(samples=sample),
                                          ConvertOptions(options=dict(options)))


@pytest.fixture(scope="module")
def cnn():
    model, sample = _cnn()
    return model, _export(model, sample)


@pytest.fixture(scope="module")
def mlp():
    model, sample = _mlp()
    return model, _export(model, sample)


def ort_intermediates(model: ir.Model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """onnxruntime on a copy of ``model`` with every node output added as a graph output."""
    proto = ir.serde.serialize_model(model)
    have = {o.name for o in proto.graph.output}
    for node in proto.graph.node:
        proto.graph.output.extend(onnx.ValueInfoProto(name=n) for n in node.output
                                  if n and n not in have)
        have.update(node.output)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def _copy(model: ir.Model) -> ir.Model:
    return ir.serde.deserialize_model(ir.serde.serialize_model(model))


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    scale = max(float(np.abs(want).max()), 1e-6)
    return float(np.abs(got.astype(np.float64) - want).max()) / scale


def _topological_names(model: ir.Model, among: set[str]) -> list[str]:
    return [v.name for node in model.graph for v in node.outputs if v.name in among]


def _check_order_one(export) -> None:
    outs = ort_intermediates(export.model, export.feeds[0])
    for value in export.model.graph.outputs:
        out = outs[value.name]
        assert 0.2 < float(np.abs(out).max()) < 50, (value.name, float(np.abs(out).max()))
        assert float(out.std()) > 0.05, value.name


# ------------------------------------------------------------------------------------ tests --
@pytest.mark.parametrize("which", ["cnn", "mlp"])
def test_intermediates_agree_with_onnxruntime(which: str, request: pytest.FixtureRequest) -> None:
    model, export = request.getfixturevalue(which)
    assert export.route == "dynamo", export.notes
    _check_order_one(export)
    tap = TorchTap(model, export)
    for feeds in export.feeds:  # two batch sizes: the tap follows the dynamic batch
        ours = tap.values(feeds)
        theirs = ort_intermediates(export.model, feeds)
        shared = set(ours) & set(theirs)
        assert len(shared) >= 5, sorted(ours)
        assert {v.name for v in export.model.graph.outputs} <= shared
        for name in shared:
            assert ours[name].shape == theirs[name].shape, name
            assert _rel_err(ours[name], theirs[name]) < REL_TOL, name
        # Not just outputs: most intermediates the graph computes are tapped.
        assert len(shared - {v.name for v in export.model.graph.outputs}) >= 4
    assert tap.limitations == []


@pytest.mark.parametrize(("which", "initializer", "module"),
                         [("cnn", "conv2.weight", "conv2"), ("mlp", "fc2.weight", "fc2")])
def test_perturbed_initializer_is_found_at_its_node(which: str, initializer: str, module: str,
                                                    request: pytest.FixtureRequest) -> None:
    model, export = request.getfixturevalue(which)
    feeds = export.feeds[0]
    tap = TorchTap(model, export)
    ours = tap.values(feeds)

    broken = _copy(export.model)
    weight = broken.graph.initializers[initializer]
    array = weight.const_value.numpy()
    noise = np.random.default_rng(0).normal(0.0, 0.5, array.shape).astype(array.dtype)
    weight.const_value = ir.tensor(array + noise * np.abs(array).mean(), name=initializer)
    theirs = ort_intermediates(broken, feeds)

    order = _topological_names(broken, set(ours) & set(theirs))
    verdicts = [(name, _rel_err(ours[name], theirs[name]) < REL_TOL) for name in order]
    first_bad = next(name for name, ok in verdicts if not ok)
    agreeing_before = [name for name, _ in verdicts[:order.index(first_bad)]]
    assert len(agreeing_before) >= 2, verdicts  # the search had to walk past good values

    readers = [n for n in broken.graph if any(i is not None and i.name == initializer
                                                   for i in n.inputs)]
    assert len(readers) == 1
    culprit = readers[0]
    assert first_bad in [v.name for v in culprit.outputs]

    # The unperturbed graph agrees at that same name: the tap, not the name, is right.
    clean = ort_intermediates(export.model, feeds)
    assert _rel_err(ours[first_bad], clean[first_bad]) < REL_TOL

    # The culprit is traced back to the module and the line of the user's code.
    location = source_location(culprit)
    assert module in location
    source = Path(torch_models.__file__ if which == "cnn" else __file__)
    pattern = re.compile(rf"self\.{module}\(")
    line = next(i for i, text in enumerate(source.read_text().splitlines(), 1)
                if pattern.search(text))
    assert f"{source.name}:{line}" in location, location
    assert f"self.{module}(" in source_line(culprit)


def test_source_location_names_module_and_class(mlp) -> None:
    _model, export = mlp
    linear = next(n for n in export.model.graph
                  if any(i is not None and i.name == "fc1.weight" for i in n.inputs))
    assert source_location(linear).startswith("fc1 (Linear) at test_torch_tap.py:")
    assert "[" not in source_location(linear)  # its own weights: nothing to add
    bare = ir.Node("", "Relu", [ir.Value(name="x")])
    assert source_location(bare) == ""
    assert source_line(bare) == ""


def test_names_restricts_what_is_returned(cnn) -> None:
    model, export = cnn
    tap = TorchTap(model, export)
    everything = tap.values(export.feeds[0])
    some = sorted(everything)[:3]
    subset = tap.values(export.feeds[0], names=[*some, "no_such_value"])
    assert sorted(subset) == some
    for name in some:
        np.testing.assert_array_equal(subset[name], everything[name])


def test_exported_program_and_plain_onnx_model(cnn) -> None:
    """An ExportedProgram source, and an ONNX model given without the ExportResult (feeds go to
    the program's inputs in order; a second batch size makes it capture again)."""
    model, export = cnn
    program = torch.export.export(model, (torch_models.cnn_sample(),))
    from_program = _export(program, None)  # its own example inputs
    for tap, result in ((TorchTap(program, from_program), from_program),
                        (TorchTap(model, export.model), export)):
        for feeds in result.feeds:
            ours = tap.values(feeds)
            theirs = ort_intermediates(result.model, feeds)
            shared = set(ours) & set(theirs)
            assert len(shared) >= 5
            assert all(_rel_err(ours[n], theirs[n]) < REL_TOL for n in shared)
        assert tap.limitations == []


def test_torchscript_route_taps_outputs_only() -> None:
    model, sample = _cnn()
    export = _export(model, sample, exporter="torchscript")
    assert export.route == "torchscript"
    tap = TorchTap(model, export)
    assert tap.limitations and "TorchScript" in tap.limitations[0]
    ours = tap.values(export.feeds[0])
    outputs = [v.name for v in export.model.graph.outputs]
    assert sorted(ours) == sorted(outputs)
    theirs = ort_intermediates(export.model, export.feeds[0])
    assert all(_rel_err(ours[n], theirs[n]) < REL_TOL for n in outputs)
