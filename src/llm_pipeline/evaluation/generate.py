"""Summaries for the evaluate step, sharded across torchrun ranks.

Loading and batched generation live in `llm_pipeline.models.generation` (the prediction
server uses them too); they are re-exported here so evaluation code keeps one import. What
is evaluation's own:

* Model folder problems are reported as EvaluationError, so the step prints them.
* Under torchrun with several processes, rank r takes every world_size-th input of the
  length-sorted order, so the ranks get equally heavy shares; rank 0 gathers and reorders.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
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
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
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

    Every rank must call it with the same inputs. Rank 0 gets all summaries in input order;
    other ranks get None. Without a group (or with one rank) it is `generate_summaries`.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return generate_summaries(model, tokenizer, input_ids, config=config)
    rank, world = dist.get_rank(), dist.get_world_size()
    # Strided over the length-sorted order: every rank gets long and short inputs alike.
    mine = longest_first(input_ids)[rank::world]
    local = generate_summaries(model, tokenizer, [input_ids[i] for i in mine], config=config)
    part = list(zip(mine, local.texts, local.token_counts, strict=True))
    parts: list[list[tuple[int, str, int]]] | None = (
        [[] for _ in range(world)] if rank == 0 else None
    )
    dist.gather_object(part, parts, dst=0)
    if parts is None:
        return None
    texts = [""] * len(input_ids)
    counts = [0] * len(input_ids)
    for index, text, count in (row for rank_part in parts for row in rank_part):
        texts[index] = text
        counts[index] = count
    return Generated(texts=texts, token_counts=counts)
