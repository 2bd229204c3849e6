"""Training's status line: step, loss and time left, printed by the primary process.

The Trainer's tqdm bar redraws one terminal line with carriage returns, which a pipeline's
log (KFP's, Vertex's) turns into one endless line; a status line per logging period reads
the same on a terminal and in a log.
"""

from __future__ import annotations

import time
from typing import Any

from transformers import TrainerCallback

from llm_pipeline.progress import format_duration, status


class TrainingStatus(TrainerCallback):
    """`step 40/200 · loss 3.21 · eval loss 3.05 · 1.3 steps/s · 2 min 05 s left`."""

    def __init__(self) -> None:
        self._started = 0.0
        self._first_step = 0

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._started = time.monotonic()
        self._first_step = state.global_step
        if state.is_world_process_zero:
            where = f" (resumed at step {state.global_step})" if state.global_step else ""
            status(f"training for {state.max_steps} steps{where}")

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if not state.is_world_process_zero or not logs:
            return
        parts = [f"step {state.global_step}/{state.max_steps}"]
        if "loss" in logs:
            parts.append(f"loss {logs['loss']:.3f}")
        if "eval_loss" in logs:
            parts.append(f"eval loss {logs['eval_loss']:.3f}")
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
