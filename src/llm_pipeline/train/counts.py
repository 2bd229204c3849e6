"""What a run did, counted across ranks: its wall time, parameters, samples and tokens.

`metrics` turns these into throughput and MFU; this module does the measuring, which needs
the model, the Trainer and the process group.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
from transformers import TrainerCallback

from llm_pipeline.train.metrics import RunCounts
from llm_pipeline.train.trainer import FinetuneTrainer


class Clock(TrainerCallback):
    """Wall time of the training loop itself: after engine setup, before the final save."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.ended: float | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.started = time.perf_counter()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.ended = time.perf_counter()

    @property
    def seconds(self) -> float:
        if self.started is None or self.ended is None:
            return 0.0
        return self.ended - self.started


def count_parameters(model: torch.nn.Module, *, embeddings: bool = True) -> int:
    """Parameters of the model; under ZeRO-3 each holds its full size in `ds_numel`.

    `embeddings=False` leaves out embedding tables and the output projection: the
    "non-embedding" count of Kaplan et al. (2020) that the 6·N·tokens FLOP estimate is
    defined over. A lookup costs no matmul, and for small models with 30k-token vocabularies
    counting them overstates the work several times over.
    """
    skipped: set[int] = set()
    if not embeddings:
        for module in model.modules():
            if isinstance(module, torch.nn.Embedding):
                skipped.update(id(p) for p in module.parameters())
        get_output = getattr(model, "get_output_embeddings", None)
        output = get_output() if callable(get_output) else None
        if isinstance(output, torch.nn.Module):
            skipped.update(id(p) for p in output.parameters())
    return sum(
        int(getattr(p, "ds_numel", p.numel())) for p in model.parameters() if id(p) not in skipped
    )


def gather_counts(trainer: FinetuneTrainer, clock: Clock) -> RunCounts:
    """Samples and tokens summed over every rank; the slowest rank's time is the run's."""
    samples, tokens = trainer.trained_counts()
    device = trainer.args.device
    totals = torch.tensor([samples, tokens], dtype=torch.long, device=device)
    dist.all_reduce(totals)
    slowest = torch.tensor([clock.seconds], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    model = trainer.model  # the bare model; the DeepSpeed engine is `model_wrapped`
    assert isinstance(model, torch.nn.Module)
    return RunCounts(
        samples=int(totals[0]),
        tokens=int(totals[1]),
        seconds=float(slowest[0]),
        parameters=count_parameters(model),
        world_size=dist.get_world_size(),
        non_embedding_parameters=count_parameters(model, embeddings=False),
        device_name=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    )
