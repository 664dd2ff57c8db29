"""HFConvert over a real 3-epoch Trainer run on a tiny BERT classifier: per epoch, a checked
ONNX file (outputs named after the ModelOutput's fields) from that epoch's weights, converted in
a background process; parity in the Trainer's log history; training left as it would have been."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.callbacks.conftest import framework

transformers = framework("transformers")
framework("accelerate")

from unframe.callbacks.hf import HFConvert  # noqa: E402


class Tokens(torch.utils.data.Dataset):
    def __init__(self) -> None:
        gen = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 50, (24, 6), generator=gen)
        self.labels = torch.randint(0, 3, (24,), generator=gen)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def bert() -> Any:
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32, num_labels=3,
                                     max_position_embeddings=16, initializer_range=0.5)
    return transformers.BertForSequenceClassification(config)


class Settle(transformers.TrainerCallback):
    """Real epochs outlast a conversion; these take milliseconds. Waiting for the converter at
    each epoch's end gives every epoch its own job, and keeps the weights each job was given."""

    def __init__(self, convert: HFConvert) -> None:
        self.convert = convert
        self.weights: list[dict[str, torch.Tensor]] = []

    def on_epoch_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
        self.weights.append({k: v.clone() for k, v in model.state_dict().items()})
        converter = self.convert.schedule.converter
        deadline = time.monotonic() + 300
        while not converter.idle and time.monotonic() < deadline:
            time.sleep(0.05)


def train(out: Path, callbacks: list[Any]) -> Any:
    model = bert()
    args = transformers.TrainingArguments(
        output_dir=str(out), num_train_epochs=3, per_device_train_batch_size=8, learning_rate=1e-2,
        save_strategy="no", report_to=[], logging_strategy="no", seed=0, use_cpu=True,
        disable_tqdm=True, dataloader_num_workers=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(),
                                   callbacks=callbacks)
    trainer.train()
    return trainer


@pytest.mark.slow
def test_three_epochs_give_checked_artifacts_and_log_history(tmp_path: Path) -> None:
    import onnxruntime as ort

    convert = HFConvert("onnx")
    settle = Settle(convert)
    trainer = train(tmp_path / "run", [convert, settle])

    names = sorted(p.name for p in (tmp_path / "run").glob("*.onnx"))
    assert names == ["epoch=0-step=3.onnx", "epoch=1-step=6.onnx", "epoch=2-step=9.onnx"]
    assert len(convert.outcomes) == 3 and all(o.ok for o in convert.outcomes)
    ids = trainer.model.dummy_inputs["input_ids"]
    reference = bert().eval()
    for name, weights in zip(names, settle.weights, strict=True):
        session = ort.InferenceSession(str(tmp_path / "run" / name))
        assert [o.name for o in session.get_outputs()] == ["logits"]  # the ModelOutput's field
        reference.load_state_dict(weights)
        expected = reference(input_ids=ids).logits.detach().numpy()
        assert 0.3 < np.abs(expected).max() < 30
        got = session.run(None, {"input_ids": ids.numpy()})[0]
        np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-3)
    logged = [e for e in trainer.state.log_history if "unframe/onnx/parity_passed" in e]
    assert [e["step"] for e in logged] == [3, 6, 9]
    assert all(e["unframe/onnx/parity_passed"] == 1.0 for e in logged)
    # (That training is left exactly as it would have been is checked with the Lightning and
    # Keras callbacks, which share this snapshot and process; a second Trainer run costs here.)
