"""A Hugging Face ``TrainerCallback`` that converts the model as it trains.

    from unframe.callbacks.hf import HFConvert
    trainer = Trainer(model, args, train_dataset=ds, callbacks=[HFConvert(to="onnx")])

At the end of every ``every_n_epochs``-th epoch (and/or every ``every_n_steps`` optimizer
steps, and at the end of training) the weights are copied to the CPU and converted in a
background process (``unframe.callbacks._core``): ``<output_dir>/epoch=E-step=S.onnx`` beside the
Trainer's ``checkpoint-*`` folders (a folder per conversion with several targets), each stage
checked. ``ModelOutput`` returns give the ONNX output names (``logits``); the KV cache is left
out unless the samples pass ``use_cache``. Outcomes are logged (logger ``unframe.callbacks``)
and appended to ``state.log_history`` (saved with every checkpoint's trainer_state.json). Only
the world-zero process converts. Sample inputs default to the model's ``dummy_inputs``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from unframe.callbacks._core import ConvertOnSchedule, Outcome, torch_recipe, torch_snapshot


class HFConvert(TrainerCallback):
    def __init__(self, to: str | list[str] = "onnx", **options: Any) -> None:
        self.schedule = ConvertOnSchedule(to, **options)

    @property
    def outcomes(self) -> list[Outcome]:
        return self.schedule.outcomes

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       **kwargs: Any) -> None:
        options = self.schedule.convert_options
        samples = options.get("sample_inputs")
        if samples is None:
            samples = dict(getattr(model, "dummy_inputs", None) or {}) or None
            options["sample_inputs"] = samples
        self.schedule.begin(0 if state.is_world_process_zero else 1,
                            lambda: torch_recipe(model, samples), model, Path(args.output_dir))

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None,
                    **kwargs: Any) -> None:
        self._log(state)
        if self.schedule.due(step=state.global_step):
            self._convert(state, model)

    def on_epoch_end(self, args: Any, state: Any, control: Any, model: Any = None,
                     **kwargs: Any) -> None:
        self._log(state)
        if self.schedule.due(epoch=round(state.epoch or 0)):
            self._convert(state, model)

    def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None,
                     **kwargs: Any) -> None:
        if self.schedule.at_end:
            self._convert(state, model)
        self._log(state, self.schedule.end())

    def _convert(self, state: Any, model: Any) -> None:
        epoch = max(round(state.epoch or 0) - 1, 0)  # 0-based, as Lightning and Keras name it
        self.schedule.convert(f"epoch={epoch}-step={state.global_step}", state.global_step,
                              lambda: torch_snapshot(model, type(model).__name__))

    def _log(self, state: Any, outcomes: list[Outcome] | None = None) -> None:
        outcomes = self.schedule.poll() if outcomes is None else outcomes
        for outcome in outcomes:
            state.log_history.append({**outcome.metrics(), "step": outcome.step,
                                      "unframe_tag": outcome.tag})
