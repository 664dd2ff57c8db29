"""A PyTorch Lightning callback that converts the model as it trains.

    from unframe.callbacks.lightning import LightningConvert
    trainer = L.Trainer(callbacks=[LightningConvert(to="onnx", every_n_epochs=1)])

At the end of every ``every_n_epochs``-th training epoch (and/or every ``every_n_steps``
optimizer steps, and at the end of training) the weights are copied to the CPU and converted
in a background process (``unframe.callbacks._core``): ``<dirpath>/epoch=E-step=S.onnx`` beside
the trainer's checkpoints (one folder per conversion with several targets), each stage checked.
Outcomes are logged (logger ``unframe.callbacks``) and their parity figures go to the trainer's
logger (``unframe/<target>/parity_passed``, ``.../parity_max_abs``) at the next hook. Only the
global-zero rank converts. Sample inputs default to the module's ``example_input_array``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback

from unframe.callbacks._core import ConvertOnSchedule, Outcome, torch_recipe, torch_snapshot


class LightningConvert(Callback):
    def __init__(self, to: str | list[str] = "onnx", **options: Any) -> None:
        super().__init__()
        self.schedule = ConvertOnSchedule(to, **options)

    @property
    def outcomes(self) -> list[Outcome]:
        return self.schedule.outcomes

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        samples = self.schedule.convert_options.get("sample_inputs",
                                                    getattr(pl_module, "example_input_array", None))
        self.schedule.convert_options.setdefault("sample_inputs", samples)
        self.schedule.begin(0 if trainer.is_global_zero else 1,
                            lambda: torch_recipe(pl_module, samples), pl_module,
                            _folder(trainer))

    def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        self._log(trainer)
        step = trainer.global_step
        if self.schedule.due(step=step):
            self._convert(trainer, pl_module)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._log(trainer)
        if self.schedule.due(epoch=trainer.current_epoch + 1):
            self._convert(trainer, pl_module)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        if self.schedule.at_end:
            self._convert(trainer, pl_module)
        self._log(trainer, self.schedule.end())

    def _convert(self, trainer: Any, pl_module: Any) -> None:
        tag = f"epoch={trainer.current_epoch}-step={trainer.global_step}"
        self.schedule.convert(tag, trainer.global_step,
                              lambda: torch_snapshot(pl_module, type(pl_module).__name__))

    def _log(self, trainer: Any, outcomes: list[Outcome] | None = None) -> None:
        outcomes = self.schedule.poll() if outcomes is None else outcomes
        for outcome in outcomes:
            for logger in trainer.loggers:
                logger.log_metrics(outcome.metrics(), step=outcome.step)


def _folder(trainer: Any) -> Path:
    """Beside the checkpoints: the ModelCheckpoint's folder, else the trainer's root."""
    checkpoint = getattr(trainer, "checkpoint_callback", None)
    dirpath = getattr(checkpoint, "dirpath", None)
    if dirpath:
        return Path(dirpath)
    return Path(trainer.default_root_dir) / "checkpoints"
