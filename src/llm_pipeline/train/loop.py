"""The training loop itself, as a worker runs it: train, then the final validation loss."""

from __future__ import annotations

import torch
from transformers.trainer_utils import TrainOutput

from llm_pipeline.train.errors import TrainError
from llm_pipeline.train.out_of_memory import out_of_memory_message
from llm_pipeline.train.preemption import Preempted, SaveOnSignal
from llm_pipeline.train.trainer import FinetuneTrainer


def train(trainer: FinetuneTrainer, resume_from: str | None, stopper: SaveOnSignal) -> TrainOutput:
    """Run the loop to its end, or until SIGTERM has been turned into a saved checkpoint
    (then `Preempted`); out-of-memory becomes a message naming the settings to lower."""
    try:
        output = trainer.train(resume_from_checkpoint=resume_from)
    except torch.OutOfMemoryError as err:
        raise TrainError(out_of_memory_message(str(err))) from err
    if stopper.saved_step is not None:
        assert stopper.signum is not None
        raise Preempted(stopper.signum, step=stopper.saved_step)
    return output


def final_eval_loss(trainer: FinetuneTrainer) -> float | None:
    """Loss on the validation split, or None without one."""
    if trainer.eval_dataset is None:
        return None
    last = trainer.state.log_history[-2:] if trainer.state.log_history else []
    for entry in last:
        # The Trainer evaluates by itself when the last step ends an eval period.
        if "eval_loss" in entry and entry.get("step") == trainer.state.global_step:
            return float(entry["eval_loss"])
    return float(trainer.evaluate()["eval_loss"])
