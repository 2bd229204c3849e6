"""The reference model's log-probabilities, without a second model in memory while training.

DPO compares the policy with the frozen model it started from. Holding both costs a second
copy of the weights (and, under ZeRO-3, a second set of shards and gathers), so neither way
the project trains keeps one:
- LoRA: the reference is the policy with its adapters switched off (peft's
  `disable_adapter()`): the base weights are frozen and shared, so one extra forward per
  step, under no_grad, and no extra memory but its activations;
- full fine-tuning: every weight moves, so the reference log-probs are taken once, in a pass
  over the training pairs before the first step (one forward per pair, no backward: about a
  third of one epoch's compute), and stored as dataset columns that the collator hands the
  loss (`ref_chosen_logps`, `ref_rejected_logps`, TRL's names).

The pass runs on every rank in step: under ZeRO-3 each forward gathers every layer's shards
from all ranks, so every rank makes the same number of forwards (ranks past the last batch
repeat one and drop it), each scoring its share of the batches; the shares are then gathered
so every rank holds every pair's columns.
"""

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import datasets
import torch

from llm_pipeline.tasks.preference_tuning.collate import REFERENCE_COLUMNS
from llm_pipeline.tasks.preference_tuning.loss import pair_logps

#: Gathers one picklable object from every rank, in rank order (torch.distributed's
#: `all_gather_object` under several ranks).
Gather = Callable[[Any], list[Any]]


@contextmanager
def adapters_disabled(peft_model: Any) -> Iterator[None]:
    """Within it, the LoRA model is its own base: the reference, frozen (no gradients).

    `peft_model` is the `PeftModel` itself (unwrapped from DeepSpeed's engine, which still
    runs the forward: the switch is on the modules, shared by both).
    """
    with torch.no_grad(), peft_model.disable_adapter():
        yield


def lora_reference_logps(
    model: Any, peft_model: Any, batch: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's reference log-probs (chosen, rejected): `model` run with its adapters off."""
    with adapters_disabled(peft_model):
        logps = pair_logps(model, batch)
    return logps.chosen, logps.rejected


def rank_batches(rows: int, batch_size: int, rank: int, world_size: int) -> list[range]:
    """This rank's share of the pass: batches `rank`, `rank + world_size`, ... of the rows
    in order, as many for every rank (a rank past the end repeats the last batch)."""
    starts = list(range(0, rows, batch_size))
    per_rank = -(-len(starts) // world_size)
    batches = []
    for step in range(per_rank):
        start = starts[min(step * world_size + rank, len(starts) - 1)]
        batches.append(range(start, min(start + batch_size, rows)))
    return batches


def precompute_reference_logps(
    model: Any,
    pairs: datasets.Dataset,
    collate: Callable[[Sequence[dict[str, Any]]], dict[str, torch.Tensor]],
    *,
    batch_size: int,
    device: torch.device | str = "cpu",
    rank: int = 0,
    world_size: int = 1,
    gather: Gather | None = None,
) -> datasets.Dataset:
    """`pairs` with the reference columns: `model`'s log-probs of each pair's answers, taken
    in eval mode (no dropout) before training changes it.

    With several ranks every one calls this with its `rank` and a `gather` (see the module
    doc); each returns the whole dataset with the whole columns.
    """
    if world_size > 1 and gather is None:
        raise ValueError("several ranks need a gather to share their reference log-probs")
    was_training = model.training
    model.eval()
    scored: dict[int, tuple[float, float]] = {}
    try:
        with torch.no_grad():
            for rows in rank_batches(len(pairs), batch_size, rank, world_size):
                batch = collate(list(pairs.select(rows)))
                logps = pair_logps(model, {k: v.to(device) for k, v in batch.items()})
                both = zip(logps.chosen.tolist(), logps.rejected.tolist(), strict=True)
                scored.update(zip(rows, both, strict=True))
    finally:
        model.train(was_training)
    shares = gather(scored) if gather is not None else [scored]
    every = {row: both for share in shares for row, both in share.items()}
    chosen, rejected = zip(*(every[i] for i in range(len(pairs))), strict=True)
    for column, values in zip(REFERENCE_COLUMNS, (chosen, rejected), strict=True):
        pairs = pairs.add_column(column, list(values), feature=datasets.Value("float32"))
    return pairs


__all__ = [
    "Gather",
    "adapters_disabled",
    "lora_reference_logps",
    "precompute_reference_logps",
    "rank_batches",
]
