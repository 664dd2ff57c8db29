"""torch -> .pte directly (``convert_from_torch``), each program run by ExecuTorch's runtime here
and compared with torch eager by unframe's comparator: a small CNN (fp32 and fp16), a dynamic
batch with its bounds, a forward taking keyword, nested and non-tensor inputs, a Hugging Face
text model built from a config with seeded weights, and the refusals (exit 4, every blocker)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from et_helpers import Prepared, convert, images, output_scale, parity, perturbed, prepare, small_cnn, torch

from unframe.converters.backends.executorch.direct import check_from_torch, convert_from_torch
from unframe.converters.base import InputSpec, Target
from unframe.converters.registry import BACKENDS
from unframe.errors import UnsupportedError, UsageError


@pytest.fixture(scope="module")
def cnn() -> Prepared:
    return prepare(small_cnn(), images(1))


@pytest.fixture(scope="module")
def cnn_fp32(cnn: Prepared, tmp_path_factory: pytest.TempPathFactory):
    return convert(cnn, tmp_path_factory.mktemp("fp32"))


def test_cnn_fp32_matches_torch(cnn: Prepared, cnn_fp32) -> None:
    artifact, target = cnn_fp32
    assert output_scale(cnn) > 0.5  # outputs of order 1: the comparison can fail
    result = parity(cnn, artifact, target)
    assert result.status == "passed", result.reason
    assert result.cases == 2  # the samples (batch 1) and the frontend's probe at batch 3
    (out,) = result.outputs
    assert out.max_abs < 1e-4 * out.scale
    # control: the same program against a model whose weights differ fails the same comparison
    other = perturbed(small_cnn(), 7, scale=0.05)
    other.load_state_dict({k: v * 1.02 for k, v in cnn.model.state_dict().items()})
    assert parity(cnn, artifact, target, model=other.eval()).status == "failed"


def test_cnn_records_delegation_and_bounds(cnn: Prepared, cnn_fp32) -> None:
    artifact, _ = cnn_fp32
    meta = artifact.metadata
    assert artifact.path is not None and artifact.path.read_bytes() == artifact.model
    assert artifact.model[4:8] == b"ET12"
    d = meta["delegation"]
    assert d["backend"] == "XnnpackBackend" and d["delegated_nodes"] >= 2
    # XNNPACK's partitioner leaves the mean over H, W: the portable fallback is named
    assert "aten_mean_dim" in d["portable_ops"]
    assert any("portable kernels run the rest" in n and "aten_mean_dim" in n for n in artifact.notes)
    assert meta["inputs"] == [{"name": "x", "dtype": "float32", "shape": ["batch", 3, 16, 16]}]
    assert meta["bounds"] == {"batch": [1, 8]}  # max(2 * 3 (the probe), 8)
    assert meta["precision"] == "fp32" and meta["leaves"] == [{"input": "x"}]


def test_dynamic_batch_runs_inside_its_bounds(cnn: Prepared, cnn_fp32) -> None:
    artifact, target = cnn_fp32
    feeds = [{"x": images(b, seed=b).numpy()} for b in (1, 5, 8)]
    result = parity(cnn, artifact, target, feeds)
    assert result.status == "passed" and result.cases == 3, result.reason
    runner = BACKENDS.get("executorch").runner(artifact, target)
    with pytest.raises(UsageError, match=r"axis 0 is 9; the program takes 1\.\.8"):
        runner.run({"x": images(9).numpy()})


def test_shapes_option_widens_the_bound(cnn: Prepared, tmp_path: Path) -> None:
    """Every batch inside the recorded bounds runs, the largest included. torch.export keeps this
    CNN's batch below 16 (its ranges say 2..16; the memory plan holds 15): the bound recorded is
    the plan's, with a note, and the runner refuses 16 by name. It used to record 16, and a
    batch of 16 failed inside the runtime (error 0x10)."""
    artifact, target = convert(cnn, tmp_path, shapes=[("x", (1, 3, 16, 16), (4, 3, 16, 16), (16, 3, 16, 16))])
    lo, hi = artifact.metadata["bounds"]["batch"]
    assert lo == 1 and 12 <= hi <= 16
    result = parity(cnn, artifact, target, [{"x": images(12).numpy()}, {"x": images(hi, seed=2).numpy()}])
    assert result.status == "passed" and result.cases == 2, result.reason
    if hi < 16:
        assert any(f"holds batch up to {hi}, not 16" in n for n in artifact.notes), artifact.notes
        runner = BACKENDS.get("executorch").runner(artifact, target)
        with pytest.raises(UsageError, match=rf"the program takes 1\.\.{hi}"):
            runner.run({"x": images(hi + 1).numpy()})


def test_static_option_fixes_the_batch(cnn: Prepared, tmp_path: Path) -> None:
    artifact, target = convert(cnn, tmp_path, static=True)
    assert artifact.metadata["inputs"][0]["shape"] == [1, 3, 16, 16]  # the samples
    assert artifact.metadata["bounds"] == {}


def test_fp16_program_within_16_bit_tolerance(cnn: Prepared, tmp_path: Path) -> None:
    artifact, target = convert(cnn, tmp_path, precision="fp16")
    backend = BACKENDS.get("executorch")
    assert backend.compute_precision(target) == "fp16"
    assert artifact.metadata["precision"] == "fp16"
    # inputs and outputs keep their types; the weights and compute are float16
    assert artifact.metadata["inputs"][0]["dtype"] == "float32"
    assert artifact.metadata["outputs"][0]["dtype"] == "float32"
    result = parity(cnn, artifact, target)
    assert result.status == "passed", result.reason
    (out,) = result.outputs
    assert out.of_scale and 0 < out.max_abs < 0.02 * out.scale
    # float16 really: the error is far above float32's, which the fp32 program stays within
    assert out.max_abs > 1e-5 * out.scale


class KeywordModel(torch.nn.Module):
    """A forward with a keyword input, a dict of tensors and a number (baked into the program
    as a constant input of the method)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(6, 4)
        self.b = torch.nn.Linear(3, 4)

    def forward(self, x: torch.Tensor, extra: dict[str, torch.Tensor], scale: float = 1.0,
                mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        y = torch.tanh(self.a(x)) * scale + self.b(extra["side"])
        if mask is not None:
            y = y * mask
        return {"logits": y, "pooled": y.sum(-1)}


def test_keyword_nested_and_constant_inputs(tmp_path: Path) -> None:
    torch.manual_seed(3)
    model = perturbed(KeywordModel(), 3)
    g = torch.Generator().manual_seed(4)
    samples = {"x": torch.randn(2, 6, generator=g), "extra": {"side": torch.randn(2, 3, generator=g)},
               "scale": 2.5, "mask": (torch.rand(2, 4, generator=g) > 0.3).float()}
    p = prepare(model, samples)
    assert p.outputs == ["logits", "pooled"]
    artifact, target = convert(p, tmp_path)
    leaves = artifact.metadata["leaves"]
    assert {"value": 2.5} in leaves and [x["input"] for x in leaves if "input" in x] == p.inputs.names
    result = parity(p, artifact, target)
    assert result.status == "passed", result.reason
    assert {o.name for o in result.outputs} == {"logits", "pooled"}


def test_hf_text_model(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers", reason="needs transformers for the HF text model")
    config = transformers.BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=48, max_position_embeddings=64)
    torch.manual_seed(5)
    model = perturbed(transformers.BertModel(config), 5, scale=0.2)
    model.config.return_dict = True
    g = torch.Generator().manual_seed(6)
    ids = torch.randint(0, 120, (2, 10), generator=g)
    mask = torch.ones(2, 10, dtype=torch.int64)
    mask[1, 7:] = 0
    spec = InputSpec(samples={"input_ids": ids, "attention_mask": mask},
                     dynamic=[("input_ids", 1, "seq"), ("attention_mask", 1, "seq")])
    p = prepare(model, {"input_ids": ids, "attention_mask": mask}, spec)
    assert output_scale(p) > 0.5
    artifact, target = convert(p, tmp_path)
    shapes = {t["name"]: t["shape"] for t in artifact.metadata["inputs"]}
    assert shapes == {"input_ids": ["batch", "seq"], "attention_mask": ["batch", "seq"]}
    assert artifact.metadata["inputs"][0]["dtype"] == "int64"
    result = parity(p, artifact, target)
    assert result.status == "passed", result.reason
    # another sequence length inside the bounds (seq: 1..20)
    longer = {"input_ids": torch.randint(0, 120, (2, 17), generator=g).numpy(),
              "attention_mask": np.ones((2, 17), dtype=np.int64)}
    assert parity(p, artifact, target, [longer]).status == "passed"


class AntialiasResize(torch.nn.Module):
    """ExecuTorch 1.5's portable kernel for antialiased bilinear resizing doesn't resize its output
    to a dynamic batch: a program dynamic in the batch fails at any other batch than the traced."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.interpolate(x, size=(5, 5), mode="bilinear", antialias=True) * 3


def test_program_that_fails_dynamic_is_built_static_by_the_route(tmp_path: Path) -> None:
    """The dynamic program can't run the samples: the direct function refuses it (exit 4, the
    kernel named; check agrees), and the route builds the frontend's static copy and checks it on
    the samples. It used to be built static inside ``lower``, unseen by the route, whose parity
    then fed the probe's batch to a program that takes one batch only: exit 5 (as Hugging Face
    GPT-2 of the architecture set)."""
    import unframe

    x = images(1, size=12)
    p = prepare(AntialiasResize(), x)
    assert output_scale(p) > 0.5  # parity could fail
    result = unframe.convert(AntialiasResize(), to="executorch", sample_inputs=(x,), output=tmp_path / "m.pte",
                             locate=False)
    assert any("built with the samples' static shapes" in n and "_upsample_bilinear2d_aa" in n
               for n in result.notes), result.notes
    stage = result.report.stages[-1]
    assert stage.status == "passed" and stage.cases == 1, stage.reason
    side = json.loads((tmp_path / "m.pte.json").read_text())
    assert side["bounds"] == {} and side["inputs"][0]["shape"] == [1, 3, 12, 12]

    assert p.inputs.dynamic  # the frontend proved the batch axis: eager torch runs any batch
    blockers = check_from_torch(p.model, p.inputs, Target("executorch"), p.outputs)
    with pytest.raises(UnsupportedError) as info:
        convert(p, tmp_path / "direct")
    assert info.value.exit_code == 4
    assert [b.to_dict() for b in info.value.blockers] == [b.to_dict() for b in blockers]
    assert "_upsample_bilinear2d_aa" in blockers[0].reason


class HalvesChannels(torch.nn.Module):
    """``chunk`` on the channels: the export keeps the batch dynamic, ExecuTorch's edge lowering
    fixes it at the traced size (its memory plan holds that batch only), as in torchvision's
    ShuffleNetV2."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x.chunk(2, dim=1)
        return a * 2 + b


def test_batch_the_lowering_fixes_is_refused_and_built_static_by_the_route(tmp_path: Path) -> None:
    """The program ran the samples and the traced inputs (both of the traced batch), so it was
    accepted as dynamic with bounds 1..8 its memory plan didn't hold; the route's parity then
    fed the probe's batch: exit 5 ("Attempted to resize a bounded tensor")."""
    import unframe

    x = torch.randn(2, 4, 6, 6, generator=torch.Generator().manual_seed(5))
    p = prepare(HalvesChannels(), x)
    assert p.inputs.dynamic and output_scale(p) > 0.5
    result = unframe.convert(HalvesChannels(), to="executorch", sample_inputs=(x,), output=tmp_path / "m.pte",
                             locate=False)
    assert any("built with the samples' static shapes" in n for n in result.notes), result.notes
    stage = result.report.stages[-1]
    assert stage.status == "passed" and stage.cases == 1, stage.reason
    with pytest.raises(UnsupportedError) as info:
        convert(p, tmp_path / "direct")
    assert "fixed input 'x' axis 0 (batch) at 2" in info.value.blockers[0].reason


class Inverse(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.inv(x) + torch.special.i0(x)


def test_ops_without_kernels_are_refused_all_at_once(tmp_path: Path) -> None:
    p = prepare(Inverse(), torch.eye(3) * 2 + 0.1)
    target = Target("executorch")
    blockers = check_from_torch(p.model, p.inputs, target, p.outputs)
    named = " ".join(f"{b.op} {b.reason}" for b in blockers)
    # both ops, found in one check (the lowering is retried with each one excepted)
    assert "linalg_inv" in named and "i0" in named, named
    with pytest.raises(UnsupportedError) as err:
        convert_from_torch(p.model, p.inputs, target, tmp_path, p.outputs)
    assert err.value.exit_code == 4
    assert [b.to_dict() for b in err.value.blockers] == [b.to_dict() for b in blockers]
    assert not list(tmp_path.iterdir())  # no partial output


class DataDependent(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # a branch on values: torch.export can't trace it
            return x * 2
        return x - 1


def test_export_refusal_is_a_blocker(tmp_path: Path) -> None:
    p = prepare(DataDependent(), torch.ones(2, 3))
    with pytest.raises(UnsupportedError) as err:
        convert_from_torch(p.model, p.inputs, Target("executorch"), tmp_path, p.outputs)
    (blocker,) = err.value.blockers
    assert blocker.op == "torch.export" and "\n" not in blocker.reason


def test_bad_precision_is_a_blocker(cnn: Prepared) -> None:
    blockers = check_from_torch(cnn.model, cnn.inputs, Target("executorch", options={"precision": "int3"}))
    assert len(blockers) == 1 and "int3" in blockers[0].reason


def test_check_then_convert_lowers_once(cnn: Prepared, tmp_path: Path) -> None:
    target = Target("executorch", options={"precision": "fp32"})
    assert check_from_torch(cnn.model, cnn.inputs, target, cnn.outputs) == []
    from unframe.converters.backends.executorch import direct

    lowered = direct._LOWERED[cnn.model][1]
    artifact = convert_from_torch(cnn.model, cnn.inputs, target, tmp_path, cnn.outputs)
    assert artifact.model == bytes(lowered.manager.buffer)  # the check's program, taken
    assert cnn.model not in direct._LOWERED


def test_sidecar_written_with_provenance(cnn_fp32, tmp_path: Path) -> None:
    artifact, _ = cnn_fp32
    backend = BACKENDS.get("executorch")
    backend.stamp(artifact, {"source_sha256": "ab" * 32, "route": "torch -> executorch"})
    written = backend.write(artifact, tmp_path / "m.pte")
    assert [w.name for w in written] == ["m.pte", "m.pte.json"]
    side = json.loads(written[1].read_text())
    assert side["provenance"]["route"] == "torch -> executorch"
    assert side["program_sha256"] and side["format"].startswith("unframe ExecuTorch")
    with pytest.raises(UsageError):
        backend.write(artifact, tmp_path / "m.onnx")
