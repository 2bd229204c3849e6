"""Save and stop at the next step boundary when the machine is being taken away.

Vertex AI gives a Spot VM, or one evicted for maintenance, a SIGTERM and about 30 seconds
before it stops it. torchrun passes the signal to every rank and kills them 30 s later
(its `--shutdown_timeout`), so a rank has that long to save. What happens on SIGTERM:
- before the first training step (start-up: loading, joining, building the engine) there is
  nothing worth saving: the process stops at once with `Preempted`, unwinding `finally`
  blocks (so no build lock or partial file is left behind);
- during training the handler only sets a flag. At each step's end the ranks agree on it (one
  all-reduce of a single integer; a signal seen by any rank stops all of them on the same
  step), save a checkpoint through the Trainer's usual path, which `CompleteCheckpoints` marks
  complete once every rank's files are in, and leave the loop.
Then the worker exits with `PREEMPTED_EXIT_CODE`, and a restarted job resumes from that
checkpoint. If the kill comes before the save is complete, its folder has no marker and the
previous complete checkpoint stays the newest one (see `checkpoints`).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from llm_pipeline.train.errors import PREEMPTED_EXIT_CODE

__all__ = ["PREEMPTED_EXIT_CODE", "Preempted", "SaveOnSignal"]

SIGNALS = (signal.SIGTERM,)


class Preempted(BaseException):
    """Raised in the main thread by SIGTERM before training starts.

    A BaseException, like KeyboardInterrupt, so that library code catching `Exception` while
    loading does not swallow it.
    """

    def __init__(self, signum: int, step: int | None = None) -> None:
        self.signum = signum
        self.step = step
        super().__init__(signal.Signals(signum).name)


class SaveOnSignal(TrainerCallback):
    """Turn SIGTERM into "save now, then stop" at the next step boundary, on every rank."""

    def __init__(self) -> None:
        self.signum: int | None = None  # the signal received, once one was
        self.saved_step: int | None = None  # the step saved because of it
        self._training = False
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        """Handle SIGTERM from now on; before training starts it raises `Preempted`."""
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set there; tests run workers in threads
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        first = self.signum is None
        self.signum = signum
        if not self._training and first:
            raise Preempted(signum)

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._training = True

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if state.max_steps and state.global_step >= state.max_steps:
            return  # the last step: the run finishes and saves its model anyway
        if not self._any_rank_signalled(args.device):
            return
        control.should_save = True
        control.should_evaluate = False
        control.should_training_stop = True
        self.saved_step = state.global_step
        if self.signum is None:
            self.signum = int(signal.SIGTERM)  # another rank got it; stop all the same

    def _any_rank_signalled(self, device: torch.device) -> bool:
        flag = torch.tensor([0 if self.signum is None else 1], dtype=torch.int32, device=device)
        if dist.is_initialized():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())
