"""Summaries for the evaluate step, sharded across torchrun ranks.

Loading and batched generation live in `llm_pipeline.models.generation` (the prediction
server uses them too); they are re-exported here so evaluation code keeps one import. What
is evaluation's own:

* Model folder problems are reported as EvaluationError, so the step prints them.
* Under torchrun with several processes, rank r takes every world_size-th input of the
  length-sorted order, so the ranks get equally heavy shares; rank 0 gathers and reorders.
* Rank 0 alone logs progress (every PROGRESS_EVERY_S), so the log stays readable.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from llm_pipeline.evaluation.errors import EvaluationError
from llm_pipeline.models import generation
from llm_pipeline.models.generation import (
    GENERATION_FIELDS,
    Generated,
    build_generation_config,
    default_device,
    generate_summaries,
    longest_first,
)

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from llm_pipeline.config.evaluate import EvaluateConfig

__all__ = [
    "GENERATION_FIELDS",
    "Generated",
    "build_generation_config",
    "default_device",
    "generate_sharded",
    "generate_summaries",
    "init_distributed",
    "load_seq2seq",
]

logger = logging.getLogger(__name__)

#: Seconds between rank 0's progress lines while it generates.
PROGRESS_EVERY_S = 30.0
# How long a rank may wait in a collective. The ranks meet only twice: to gather the
# summaries, where the first done waits for the slowest (a skew that grows with the split:
# minutes for T5-XXL on CNN/DailyMail), and while rank 0 scores and writes. NCCL's default
# of 10 minutes would fail an evaluation hours in; a rank that dies is caught by torchrun at
# once, so only a hung rank ever waits this long.
COLLECTIVE_TIMEOUT = timedelta(hours=6)


def init_distributed() -> tuple[int, int]:
    """Join torchrun's process group when launched with WORLD_SIZE > 1: (rank, world_size).

    Idempotent; a single process (no torchrun, or one rank) gets (0, 1) and no group.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0, 1
    if not dist.is_initialized():
        if torch.cuda.is_available():
            # NCCL collectives (gather_object too) run on the current device.
            torch.cuda.set_device(default_device())
        dist.init_process_group(
            "nccl" if torch.cuda.is_available() else "gloo", timeout=COLLECTIVE_TIMEOUT
        )
    return dist.get_rank(), dist.get_world_size()


def load_seq2seq(
    model_dir: str | os.PathLike[str], *, device: torch.device | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model (eval mode, on `device`) and tokenizer saved in `model_dir`.

    Raises EvaluationError for a folder that is not a consolidated seq2seq checkpoint.
    """
    return generation.load_seq2seq(model_dir, device=device, error=EvaluationError)


def generate_sharded(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    input_ids: Sequence[Sequence[int]],
    *,
    config: EvaluateConfig,
) -> Generated | None:
    """`generate_summaries` split across the ranks of the process group, if there is one.

    Every rank must call it with the same inputs. Rank 0 gets all summaries in input order,
    and logs its progress; other ranks get None. Without a group (or with one rank) the
    summaries are those of `generate_summaries`.
    """
    grouped = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    rank, world = (dist.get_rank(), dist.get_world_size()) if grouped else (0, 1)
    # Strided over the length-sorted order: every rank gets long and short inputs alike.
    mine = longest_first(input_ids)[rank::world]
    local = _generate_logging_progress(
        model, tokenizer, [input_ids[i] for i in mine], config=config, rank=rank, world=world
    )
    part = list(zip(mine, local.texts, local.token_counts, strict=True))
    parts: list[list[tuple[int, str, int]]] | None = [part]
    if world > 1:
        parts = [[] for _ in range(world)] if rank == 0 else None
        dist.gather_object(part, parts, dst=0)
    if parts is None:
        return None
    texts = [""] * len(input_ids)
    counts = [0] * len(input_ids)
    for index, text, count in (row for rank_part in parts for row in rank_part):
        texts[index] = text
        counts[index] = count
    return Generated(texts=texts, token_counts=counts)


def _generate_logging_progress(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    input_ids: Sequence[Sequence[int]],
    *,
    config: EvaluateConfig,
    rank: int,
    world: int,
) -> Generated:
    """`generate_summaries` a batch at a time, rank 0 saying how far it is: a large model
    takes hours over a test split. `input_ids` come longest first, so the batches are the
    ones `generate_summaries` would make of them all at once."""
    texts: list[str] = []
    counts: list[int] = []
    started = shown = time.perf_counter()
    share = f" (rank 0's share of {world} processes)" if world > 1 else ""
    for start in range(0, len(input_ids), config.batch_size):
        batch = input_ids[start : start + config.batch_size]
        done = generate_summaries(model, tokenizer, batch, config=config)
        texts += done.texts
        counts += done.token_counts
        now = time.perf_counter()
        if rank == 0 and (now - shown >= PROGRESS_EVERY_S or len(texts) == len(input_ids)):
            logger.info(
                "generated %d of %d summaries%s in %.0f s",
                len(texts),
                len(input_ids),
                share,
                now - started,
            )
            shown = now
    return Generated(texts=texts, token_counts=counts)
