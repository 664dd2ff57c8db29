"""A Keras callback that converts the model as it trains.

    from unframe.callbacks.keras import KerasConvert
    model.fit(x, y, epochs=10, callbacks=[KerasConvert("checkpoints/", to="onnx")])

At the end of every ``every_n_epochs``-th epoch (and/or every ``every_n_steps`` batches, and at
the end of training) the weights are copied (``get_weights``) and converted in a background
process (``unframe.callbacks._core``), which rebuilt the model once from a ``.keras`` file
saved at the start of training: ``<dirpath>/epoch=E-step=S.onnx`` (a folder per conversion
with several targets), each stage checked. Outcomes are logged (logger ``unframe.callbacks``)
and their parity figures join the epoch's ``logs`` (so ``History`` and later callbacks see
``unframe/<target>/parity_passed`` and ``.../parity_max_abs``) as they arrive.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import keras

from unframe.callbacks._core import ConvertOnSchedule, Outcome, Recipe
from unframe.distributed import process_rank


@dataclass
class KerasRecipe(Recipe):
    path: str  # a .keras file of the model saved when training began

    def build(self) -> Any:
        return keras.saving.load_model(self.path, compile=False, safe_mode=False)  # our own file

    def load(self, model: Any, weights: Any) -> None:
        model.set_weights(weights)


class KerasConvert(keras.callbacks.Callback):
    def __init__(self, dirpath: str | os.PathLike[str], to: str | list[str] = "onnx",
                 **options: Any) -> None:
        super().__init__()
        self.schedule = ConvertOnSchedule(to, dirpath=dirpath, **options)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._epoch = 0
        self._step = 0

    @property
    def outcomes(self) -> list[Outcome]:
        return self.schedule.outcomes

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._step = 0
        self.schedule.begin(process_rank(), self._recipe, self.model, Path(self.schedule.dirpath))

    def _recipe(self) -> KerasRecipe:
        from unframe.preserve import check_copy_fits

        check_copy_fits(sum(int(w.nbytes) for w in self.model.get_weights()),
                        f"the live {type(self.model).__name__}",
                        purpose="hand them to the background conversion")
        self._tmp = tempfile.TemporaryDirectory(prefix="unframe-keras-")
        path = os.path.join(self._tmp.name, "model.keras")
        self.model.save(path)
        return KerasRecipe(path)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._step += 1
        if self.schedule.due(step=self._step):
            self._convert()

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch = epoch
        if self.schedule.due(epoch=epoch + 1):
            self._convert()
        self._record(logs, self.schedule.poll())

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        if self.schedule.at_end:
            self._convert()
        outcomes = self.schedule.end()
        self._record(logs, outcomes)
        history = getattr(self.model, "history", None)
        if history is not None and outcomes:  # the last figures, after fit's last epoch
            for key, value in _metrics(outcomes).items():
                history.history.setdefault(key, []).append(value)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def _convert(self) -> None:
        self.schedule.convert(f"epoch={self._epoch}-step={self._step}", self._step,
                              lambda: [w.copy() for w in self.model.get_weights()])

    def _record(self, logs: dict[str, Any] | None, outcomes: list[Outcome]) -> None:
        if logs is not None:
            logs.update(_metrics(outcomes))


def _metrics(outcomes: list[Outcome]) -> dict[str, float]:
    merged: dict[str, float] = {}
    for outcome in outcomes:
        merged.update(outcome.metrics())
    return merged
