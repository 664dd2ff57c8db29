"""LightningConvert over a real 3-epoch fit: per epoch, a checked ONNX file beside the
checkpoints, converted in a background process from that epoch's weights, parity in the
trainer's logs; a target that can't take the model is warned about once and dropped; training
itself is left exactly as it would have been."""

from __future__ import annotations

import csv
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.callbacks.conftest import framework
from tests.callbacks.models import TinyNet, perturbed

L = framework("lightning.pytorch")

from tests.callbacks.lightning_models import Regressor  # noqa: E402
from unframe.callbacks.lightning import LightningConvert  # noqa: E402


class Settle(L.Callback):
    """Epochs here take milliseconds; real ones take longer than a conversion. Waiting for the
    converter at each epoch's end gives every epoch its own job instead of superseding it, and
    keeps a copy of the weights each job was given."""

    def __init__(self, convert: LightningConvert) -> None:
        self.convert = convert
        self.weights: dict[int, dict[str, torch.Tensor]] = {}

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.weights[trainer.global_step] = {k: v.clone() for k, v in pl_module.state_dict().items()}
        wait_idle(self.convert.schedule.converter)


def wait_idle(converter: Any) -> None:
    with converter._cv:
        while not (converter._pending is None and not converter._busy):
            converter._cv.wait(0.1)


def fit(root: Path, callbacks: list[Any], make_net: Callable[[], torch.nn.Module]) -> Any:
    torch.manual_seed(0)
    module = Regressor(make_net())
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 4))
    trainer = L.Trainer(max_epochs=3, default_root_dir=root, callbacks=callbacks,
                        logger=L.loggers.CSVLogger(root), enable_progress_bar=False,
                        enable_model_summary=False, deterministic=True)
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=8))
    return module


@pytest.mark.slow
def test_three_epochs_give_checked_artifacts_from_their_weights(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import onnxruntime as ort

    framework("coremltools")
    convert = LightningConvert("onnx,coreml")
    settle = Settle(convert)
    caplog.set_level(logging.INFO, logger="unframe.callbacks")
    with pytest.warns(UserWarning, match=r"coreml target can't take this model.*Det") as caught:
        module = fit(tmp_path / "run", [convert, settle], lambda: perturbed(TinyNet()))

    # CoreML can't take Det: one warning for the run, no CoreML file, the ONNX ones go on.
    assert sum("coreml target" in str(w.message) for w in caught) == 1
    first, *later = convert.outcomes
    assert first.targets["coreml"].exit_code == 4 and len(later) == 2
    assert all(set(o.targets) == {"onnx"} for o in later)
    folder = tmp_path / "run" / "lightning_logs" / "version_0" / "checkpoints"
    assert not list(folder.glob("*/*.mlpackage"))
    tags = sorted(p.parent.name for p in folder.glob("*/model.onnx"))
    assert tags == ["epoch=0-step=8", "epoch=1-step=16", "epoch=2-step=24"]
    assert [o.tag for o in convert.outcomes] == tags
    assert all(o.targets["onnx"].passed for o in convert.outcomes)
    # Each file computes what the model computed with that epoch's weights.
    x = module.example_input_array
    reference = TinyNet().eval()
    for tag, (step, weights) in zip(tags, sorted(settle.weights.items()), strict=True):
        assert tag.endswith(f"step={step}")
        reference.load_state_dict({k.removeprefix("net."): v for k, v in weights.items()})
        expected = reference(x)[0].detach().numpy()
        assert 0.3 < np.abs(expected).max() < 30
        got = ort.InferenceSession(str(folder / tag / "model.onnx")).run(None, {"x": x.numpy()})[0]
        np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-3)
    assert not torch.equal(settle.weights[8]["net.l1.weight"], settle.weights[24]["net.l1.weight"])
    # Parity in the trainer's logger and in the log lines.
    with open(tmp_path / "run" / "lightning_logs" / "version_0" / "metrics.csv") as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("unframe/onnx/parity_passed")]
    assert [int(r["step"]) for r in rows] == [8, 16, 24]
    assert all(float(r["unframe/onnx/parity_passed"]) == 1.0 for r in rows)
    assert all(0 < float(r["unframe/onnx/parity_max_abs"]) < 1e-4 for r in rows)
    assert sum("onnx -> " in r.getMessage() and "parity passed" in r.getMessage()
               for r in caplog.records) == 3
    # Training is exactly what it is without the callback.
    plain = fit(tmp_path / "plain", [], lambda: perturbed(TinyNet()))
    for (k, a), b in zip(module.state_dict().items(), plain.state_dict().values(), strict=True):
        assert torch.equal(a, b), k
