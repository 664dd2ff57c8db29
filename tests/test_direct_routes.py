"""Direct routes as users meet them: the planner sends a target that no ONNX graph reaches here
(LiteRT, ExecuTorch) or one asked ``--via direct`` (OpenVINO) to the backend's converter on the
source model itself, checks the artifact against the source framework, and ``--to all`` covers
only the targets some route reaches from the source. Real runtimes throughout: torch, Keras,
ai-edge-litert's interpreter, ExecuTorch's runtime, OpenVINO's CPU plugin, onnxruntime."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import unframe
from unframe import api
from unframe.converters.registry import BACKENDS
from unframe.errors import UnsupportedError, UsageError

torch = pytest.importorskip("torch", reason="needs torch")

UNFRAME = Path(sys.executable).with_name("unframe")


def _needs(*backends: str) -> None:
    for name in backends:
        if not BACKENDS.get(name).available():
            pytest.skip(f"needs the {name} extra (unframe[{name}])")


def small_cnn(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))
    with torch.no_grad():  # random init gives small outputs: nudge the weights to order 1
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return model.eval()


def images(batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, 16, 16, generator=torch.Generator().manual_seed(1))


def _tflite_run(path: Path, x: np.ndarray) -> np.ndarray:
    """ai-edge-litert's own interpreter on the written file: an independent check."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(path))
    (inp,) = interp.get_input_details()
    interp.resize_tensor_input(inp["index"], list(x.shape))
    interp.allocate_tensors()
    interp.set_tensor(inp["index"], x)
    interp.invoke()
    return interp.get_tensor(interp.get_output_details()[0]["index"])


def test_torch_to_every_runtime_in_one_call(tmp_path: Path) -> None:
    """onnx and coreml/openvino through ONNX, litert and executorch directly: each branch is
    checked against its own reference (torch for the direct ones), and the files it wrote run
    in their runtimes with torch's numbers."""
    _needs("litert", "executorch", "openvino")
    model, x = small_cnn(), images()
    ref = model(x).detach().numpy()
    assert 0.1 < np.abs(ref).max() < 20
    result = unframe.convert(model, to=["onnx", "litert", "executorch", "openvino"], sample_inputs=x,
                             output=tmp_path / "out")
    assert isinstance(result, api.MultiResult) and result
    branches = result.route.to_dict()["branches"]
    assert {n: b["via"] for n, b in branches.items()} == {
        "onnx": "onnx", "litert": "direct", "executorch": "direct", "openvino": "onnx"}
    for name in ("litert", "executorch"):
        stages = result[name].report.stages
        assert [s.stage for s in stages] == ["backend"], name  # no export parity: no ONNX on this route
        assert stages[0].status == "passed" and stages[0].reference.startswith("torch"), stages[0]
        # the samples and the batch probe; or, where the converter refused the dynamic batch
        # (litert-torch here), the static build checked on the samples, and a note says so
        static = any("static shapes" in n for n in result[name].notes)
        assert stages[0].cases == (1 if static else 2), (name, result[name].notes)
        prov = result[name].provenance
        assert "export" not in " ".join(json.loads(prov["route"]))
        assert json.loads(prov["parity"])["passed"] is True
    ov_stages = [s.stage for s in result["openvino"].report.stages]
    assert ov_stages[0] == "export" and ov_stages[-1] == "backend"
    tflite = tmp_path / "out" / "model.tflite"
    np.testing.assert_allclose(_tflite_run(tflite, x.numpy()), ref, atol=1e-4, rtol=1e-4)
    assert (tmp_path / "out" / "model.pte").is_file() and (tmp_path / "out" / "model.xml").is_file()


def test_openvino_via_direct_is_checked_against_torch(tmp_path: Path) -> None:
    _needs("openvino")
    import openvino as ov

    model, x = small_cnn(seed=2), images(3)
    plan = unframe.convert(model, to="openvino", sample_inputs=x, explain=True).route
    assert any("--via direct" in n for n in plan.notes)  # the alternative is shown
    result = unframe.convert(model, to="openvino", sample_inputs=x, via="direct",
                             output=tmp_path / "m.xml", precision="fp32")
    assert result.route.branches[0].direct
    (stage,) = result.report.stages
    assert stage.status == "passed" and stage.reference.startswith("torch") and "OpenVINO" in stage.candidate
    compiled = ov.Core().compile_model(str(tmp_path / "m.xml"), "CPU",
                                       {"INFERENCE_PRECISION_HINT": "f32"})
    got = compiled(x.numpy())[0]
    np.testing.assert_allclose(got, model(x).detach().numpy(), atol=1e-4, rtol=1e-4)


def test_keras_lstm_to_litert_falls_back_to_static_and_check_agrees(tmp_path: Path) -> None:
    """TFLite's converter refuses a Keras LSTM with a dynamic batch (TensorListReserve needs a
    static element shape): the conversion is made again at the samples' shapes, says so, and
    ``check`` gives the same verdict."""
    _needs("litert")
    keras = pytest.importorskip("keras", reason="needs keras")
    keras.utils.set_random_seed(0)
    inp = keras.Input((10, 6), name="series")
    out = keras.layers.Dense(3)(keras.layers.LSTM(8)(inp))
    model = keras.Model(inp, out)
    x = np.random.default_rng(0).normal(size=(2, 10, 6)).astype(np.float32)
    assert unframe.check(model, to="litert", sample_inputs=x)
    result = unframe.convert(model, to="litert", sample_inputs=x, output=tmp_path / "lstm.tflite")
    assert any("built with the samples' static shapes" in n and "TensorListReserve" in n for n in result.notes)
    assert result.report.stages[-1].status == "passed"
    np.testing.assert_allclose(_tflite_run(tmp_path / "lstm.tflite", x), np.asarray(model(x)), atol=1e-5)


class Inverse(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.inv(x) + torch.special.i0(x)


def test_direct_refusal_is_exit_4_with_the_blockers_check_lists(tmp_path: Path) -> None:
    _needs("executorch")
    x = torch.eye(3) * 2 + 0.1
    checked = unframe.check(Inverse(), to="executorch", sample_inputs=x)
    assert not checked and any("linalg_inv" in f"{b.op} {b.reason}" for b in checked.blockers)
    with pytest.raises(UnsupportedError) as err:
        unframe.convert(Inverse(), to="executorch", sample_inputs=x, output=tmp_path / "inv.pte")
    assert err.value.exit_code == 4
    assert [b.to_dict() for b in err.value.blockers] == [b.to_dict() for b in checked.blockers]
    assert not list(tmp_path.iterdir())


def test_to_all_covers_the_targets_a_route_reaches(tmp_path: Path) -> None:
    """From scikit-learn no route reaches LiteRT or ExecuTorch: `all` leaves them out with a
    note instead of failing; named explicitly, the target is refused with the reason."""
    _needs("litert", "executorch")
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4)).astype(np.float32)
    est = LogisticRegression().fit(X, (X[:, 0] > 0).astype(int))
    route = unframe.convert(est, to="all", sample_inputs=X[:4], explain=True).route
    names = [b.name for b in route.branches]
    assert "litert" not in names and "executorch" not in names and "onnx" in names
    assert any(n.startswith("all: ") and "litert" in n and "executorch" in n for n in route.notes)
    with pytest.raises(UnsupportedError):
        unframe.convert(est, to="executorch", sample_inputs=X[:4])


def test_via_asks_for_a_route_that_exists(tmp_path: Path) -> None:
    model, x = small_cnn(), images()
    with pytest.raises(UsageError, match="no direct route"):
        unframe.convert(model, to="coreml", sample_inputs=x, via="direct", explain=True)
    if BACKENDS.get("litert").available():
        with pytest.raises(UsageError, match="no ONNX route"):
            unframe.convert(model, to="litert", sample_inputs=x, via="onnx", explain=True)
    with pytest.raises(UsageError, match="unknown route"):
        unframe.convert(model, to="onnx", sample_inputs=x, via="sideways", explain=True)


@pytest.mark.slow
def test_cli_torch_file_to_litert_and_executorch(tmp_path: Path) -> None:
    """The installed command on a .pt2 file: direct targets written beside each other, the
    route printed, nothing on stderr but the result."""
    _needs("litert", "executorch")
    model, x = small_cnn(seed=4), images()
    src = tmp_path / "cnn.pt2"
    torch.export.save(torch.export.export(model, (x,)), src)
    np.savez(tmp_path / "x.npz", x=x.numpy())
    run = subprocess.run([str(UNFRAME), "convert", str(src), "--to", "litert,executorch", "-o",
                          str(tmp_path / "out")], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "(direct, no ONNX)" in run.stdout and "artifact vs source" in run.stdout
    assert "Failed to load" not in run.stderr and "Traceback" not in run.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["cnn.pte", "cnn.pte.json", "cnn.tflite"]
    np.testing.assert_allclose(_tflite_run(tmp_path / "out" / "cnn.tflite", x.numpy()),
                               model(x).detach().numpy(), atol=1e-4, rtol=1e-4)


def test_export_only_options_are_noted_not_refused_on_a_direct_route(tmp_path: Path) -> None:
    """--kv-cache shapes the ONNX export; in a call whose target converts the module itself it
    is said to apply elsewhere, and the conversion goes on (it used to be exit 2)."""
    _needs("executorch")
    model, x = small_cnn(seed=5), images()
    result = unframe.convert(model, to="executorch", sample_inputs=x, kv_cache=True,
                             output=tmp_path / "m.pte")
    assert any("--kv-cache shapes the ONNX export" in n for n in result.notes)
    assert result.report.stages[-1].status == "passed"


class Cancel(torch.nn.Module):
    """Two wide dot products of large terms whose difference is much smaller: the float32 result
    depends on the summation order (XNNPACK's and torch's differ)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4096, 8, bias=False)
        self.b = torch.nn.Linear(4096, 8, bias=False)
        with torch.no_grad():
            self.a.weight.normal_(0, 40.0, generator=torch.Generator().manual_seed(0))
            self.b.weight.copy_(self.a.weight + torch.randn(self.a.weight.shape, generator=torch.Generator().manual_seed(1)) * 0.05)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) - self.b(x)


def test_a_float32_artifact_is_held_to_the_sources_own_float32_error() -> None:
    """The runtime sums in another order than torch: beyond the default tolerance, within what
    float32 alone moves the source by (torch in float64), as the export's parity allows; the
    report says where the atol came from (without the floor this fails: exit 5)."""
    _needs("executorch")
    x = torch.randn(2, 4096, generator=torch.Generator().manual_seed(2)) * 10
    result = unframe.convert(Cancel().eval(), to="executorch", sample_inputs=x, locate=False)
    stage = result.report.stages[-1]
    assert stage.status == "passed" and "source's own float32 error" in stage.summary(), stage.summary()
    assert stage.rel_to_scale < 0.01


def test_direct_targets_run_when_the_onnx_export_fails(tmp_path: Path) -> None:
    """One call, onnx and litert: torch.onnx has no translation for aten.cummax (exit 4 for the
    onnx target), and LiteRT converts the module itself and is written, checked against torch."""
    _needs("litert")

    class CumMax(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cummax(x, 1).values * 2 + 1

    x = torch.randn(2, 5, generator=torch.Generator().manual_seed(0))
    with pytest.raises(api.PartialFailure) as err:
        unframe.convert(CumMax(), to=["onnx", "litert"], sample_inputs=x, output=tmp_path / "out")
    result = err.value.result
    assert result.errors["onnx"].exit_code == 4
    if "litert" in result.errors:  # litert-torch refusing the op too is an honest exit 4
        assert result.errors["litert"].exit_code == 4
        assert "torch.onnx" not in result.errors["litert"].message  # its own reason, not the export's
    else:
        assert result["litert"].report.stages[-1].status == "passed"
        assert (tmp_path / "out" / "model.tflite").is_file()
