"""Training's status line: step, loss and time left, printed by the primary process.

The Trainer's tqdm bar redraws one terminal line with carriage returns, which a pipeline's
log (KFP's, Vertex's) turns into one endless line; a status line per logging period reads
the same on a terminal and in a log.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from transformers import TrainerCallback

from llm_pipeline.progress import format_duration, status
from llm_pipeline.train.step_health import lost_steps_warning


class TrainingStatus(TrainerCallback):
    """`step 40/200 · loss 3.21 · eval loss 3.05 · 1.3 steps/s · 2 min 05 s left`, and a
    warning line after a period that lost steps (skipped, or with non-finite gradients:
    the counts `FinetuneTrainer.log` adds to a period's entry). The last step is always
    logged."""

    def __init__(self, figures: Mapping[str, str] | None = None) -> None:
        #: Figures a task's loss logs (logged name -> words), shown after the loss.
        self.figures = dict(figures or {})
        self._started = 0.0
        self._first_step = 0
        # (step, skipped, non-finite) at the previous period's end
        self._lost = (0, 0, 0)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._started = time.monotonic()
        self._first_step = state.global_step
        self._lost = (state.global_step, 0, 0)
        if state.is_world_process_zero:
            where = f" (resumed at step {state.global_step})" if state.global_step else ""
            status(f"training for {state.max_steps} steps{where}")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # The last step is always logged (on every rank: the Trainer gathers the loss), so a
        # run shorter than train.logging_steps still shows its training loss, here and in
        # the report's loss curve.
        if state.global_step >= state.max_steps:
            control.should_log = True

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if not state.is_world_process_zero or not logs:
            return
        parts = [f"step {state.global_step}/{state.max_steps}"]
        if "loss" in logs:
            parts.append(f"loss {logs['loss']:.3f}")
            parts += [
                f"{words} {logs[name]:.3f}" for name, words in self.figures.items() if name in logs
            ]
        if "eval_loss" in logs:
            parts.append(f"eval loss {logs['eval_loss']:.3f}")
            parts += [
                f"eval {words} {logs[f'eval_{name}']:.3f}"
                for name, words in self.figures.items()
                if f"eval_{name}" in logs
            ]
        if len(parts) == 1:
            return  # the run's closing summary, not a period
        done = state.global_step - self._first_step
        elapsed = time.monotonic() - self._started
        if done > 0 and elapsed > 0:
            rate = done / elapsed
            left = (state.max_steps - state.global_step) / rate
            parts.append(f"{rate:.2f} steps/s")
            parts.append(f"{format_duration(left)} left")
        status(" · ".join(parts))
        self._warn_of_lost_steps(state.global_step, logs)

    def _warn_of_lost_steps(self, step: int, logs: dict[str, Any]) -> None:
        if "skipped_steps" not in logs:
            return
        skipped, nonfinite = int(logs["skipped_steps"]), int(logs.get("nonfinite_steps", 0))
        last_step, last_skipped, last_nonfinite = self._lost
        self._lost = (step, skipped, nonfinite)
        warning = lost_steps_warning(
            steps=step - last_step,
            skipped=skipped - last_skipped,
            nonfinite=nonfinite - last_nonfinite,
            skipped_total=skipped,
            nonfinite_total=nonfinite,
        )
        if warning:
            status(warning)
