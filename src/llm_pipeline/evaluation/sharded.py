"""The evaluate step's model runs, sharded across ranks: summaries, completions, and any
task's own pass over the rows (`sharded`: a classifier's label scores, a causal LM's
response losses).

Loading and batched generation live in `llm_pipeline.models.generation` (seq2seq) and
`llm_pipeline.models.completion` (causal LMs), which the prediction server uses too; a
task's scorer loads its model there, with `error=EvaluationError` so the step reports a
folder's problem. What is evaluation's own is here:

* Under torchrun with several processes, rank r takes every world_size-th input of the
  length-sorted order, so the ranks get equally heavy shares; rank 0 gathers and reorders.
* Rank 0 alone logs progress (every PROGRESS_EVERY_S), so the log stays readable.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

import torch
import torch.distributed as dist

from llm_pipeline.models.completion import (
    CompletionSettings,
    complete,
    completion_config,
    encode_prompts,
)
from llm_pipeline.models.generation import Generated, default_device, generate_summaries

if TYPE_CHECKING:
    from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

    from llm_pipeline.config.evaluate import EvaluateConfig

__all__ = [
    "complete_sharded",
    "complete_split",
    "completion_settings",
    "generate_sharded",
    "init_distributed",
    "log_generation",
    "sharded",
]

T = TypeVar("T")

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


def generate_sharded(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    input_ids: Sequence[Sequence[int]],
    *,
    config: EvaluateConfig,
    engine: Any = None,
) -> Generated | None:
    """`generate_summaries` split across the ranks of the process group, if there is one.

    Every rank must call it with the same inputs. Rank 0 gets all summaries in input order,
    and logs its progress; other ranks get None. Without a group (or with one rank) the
    summaries are those of `generate_summaries`. With `engine` (the model's CTranslate2
    form, `engines.load_generator`) the engine writes them, as the endpoint will.
    """

    def produce(rows: list[int]) -> list[tuple[str, int]]:
        ids = [input_ids[i] for i in rows]
        if engine is not None:
            done = engine.generate(ids, config=config)
        else:
            done = generate_summaries(model, tokenizer, ids, config=config)
        return list(zip(done.texts, done.token_counts, strict=True))

    with weights_on_host_while(model, engine is not None):
        rows = sharded([len(ids) for ids in input_ids], produce, config.batch_size, "summaries")
    return _as_generated(rows)


def complete_sharded(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    *,
    settings: CompletionSettings,
    engine: Any = None,
) -> Generated | None:
    """`models.completion.complete` split across the ranks as `generate_sharded` is (and
    through `engine` as it does)."""
    lengths = [len(ids) for ids in encode_prompts(tokenizer, prompts)]

    def produce(rows: list[int]) -> list[tuple[str, int]]:
        chosen = [prompts[i] for i in rows]
        if engine is not None:
            done = engine.complete(chosen, settings=settings)
        else:
            done = complete(model, tokenizer, chosen, settings=settings)
        return list(zip(done.texts, done.token_counts, strict=True))

    with weights_on_host_while(model, engine is not None):
        return _as_generated(sharded(lengths, produce, settings.batch_size, "responses"))


@contextlib.contextmanager
def weights_on_host_while(model: PreTrainedModel, engine_generates: bool) -> Iterator[None]:
    """While an engine generates on the GPU, transformers' copy of the model waits in host
    memory: the GPU holds one copy of the weights, not two (the evaluate step keeps the
    model for what only it computes: losses, perplexity, pair scores). Back on its GPU after,
    for those."""
    device = next(model.parameters()).device
    if not engine_generates or device.type != "cuda":
        yield
        return
    cast(Any, model).to("cpu")
    torch.cuda.empty_cache()
    try:
        yield
    finally:
        cast(Any, model).to(device)


def completion_settings(config: EvaluateConfig) -> CompletionSettings:
    """The `evaluate` settings a causal LM's completions take."""
    return CompletionSettings(
        batch_size=config.batch_size,
        max_new_tokens=config.max_new_tokens,
        min_new_tokens=config.min_new_tokens,
        num_beams=config.num_beams,
        length_penalty=config.length_penalty,
        no_repeat_ngram_size=config.no_repeat_ngram_size,
        do_sample=bool(config.do_sample),
        temperature=config.temperature,
        top_p=config.top_p,
        stop=tuple(config.stop or ()),
    )


def complete_split(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    *,
    split: str,
    config: EvaluateConfig,
    task: str,
    engine: Any = None,
) -> Generated | None:
    """A causal LM's completions of `prompts`, the rows of `split`, under `config`'s
    settings and across the ranks (None but on rank 0), once the settings that run are
    said, sampling ones included: every scorer that completes prompts runs them so."""
    settings = completion_settings(config)
    generation = completion_config(model, tokenizer, settings)
    log_generation(len(prompts), split, generation, config, task, sampling=True)
    return complete_sharded(model, tokenizer, prompts, settings=settings, engine=engine)


def log_generation(
    rows: int,
    split: str,
    generation: GenerationConfig,
    config: EvaluateConfig,
    task: str,
    *,
    sampling: bool = False,
) -> None:
    """Say the generation settings that actually run on `rows` rows of `split`, after the
    task's defaults and the model's own config (and, with `sampling`, the sampling ones)."""
    logger.info(
        "generating for %d examples of split %r (%s): batch %d, max_new_tokens %s (max_length %s), "
        "min_new_tokens %s, num_beams %s, length_penalty %s, no_repeat_ngram_size %s%s",
        rows,
        split,
        task,
        config.batch_size,
        generation.max_new_tokens,
        generation.max_length,
        generation.min_new_tokens,
        generation.num_beams,
        generation.length_penalty,
        generation.no_repeat_ngram_size,
        (
            f", do_sample {generation.do_sample}, temperature {generation.temperature}, "
            f"top_p {generation.top_p}, stop {generation.stop_strings}"
            if sampling
            else ""
        ),
    )


def _as_generated(rows: list[tuple[str, int]] | None) -> Generated | None:
    if rows is None:
        return None
    return Generated(texts=[text for text, _ in rows], token_counts=[n for _, n in rows])


def sharded(
    lengths: Sequence[int],
    produce: Callable[[list[int]], list[T]],
    batch_size: int,
    what: str,
) -> list[T] | None:
    """`produce` over every index, split across the ranks of the process group, if any.

    Every rank must call it with the same inputs. Rank r takes every world_size-th index of
    the longest-first order, so the ranks get equally heavy shares; rank 0 gathers every
    result, in input order, and logs its progress; other ranks get None.
    """
    grouped = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    rank, world = (dist.get_rank(), dist.get_world_size()) if grouped else (0, 1)
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    mine = order[rank::world]
    local = _logging_progress(mine, produce, batch_size, what, rank=rank, world=world)
    part = list(zip(mine, local, strict=True))
    parts: list[list[tuple[int, Any]]] | None = [part]
    if world > 1:
        parts = [[] for _ in range(world)] if rank == 0 else None
        dist.gather_object(part, parts, dst=0)
    if parts is None:
        return None
    results: list[Any] = [None] * len(lengths)
    for index, value in (row for rank_part in parts for row in rank_part):
        results[index] = value
    return results


def _logging_progress(
    rows: list[int],
    produce: Callable[[list[int]], list[T]],
    batch_size: int,
    what: str,
    *,
    rank: int,
    world: int,
) -> list[T]:
    """`produce` a batch at a time, rank 0 saying how far it is: a large model takes hours
    over a test split. `rows` come longest first, so the batches are the ones `produce`
    would make of them all at once."""
    results: list[T] = []
    started = shown = time.perf_counter()
    share = f" (rank 0's share of {world} processes)" if world > 1 else ""
    for start in range(0, len(rows), batch_size):
        results += produce(rows[start : start + batch_size])
        now = time.perf_counter()
        if rank == 0 and (now - shown >= PROGRESS_EVERY_S or len(results) == len(rows)):
            logger.info(
                "generated %d of %d %s%s in %.0f s",
                len(results),
                len(rows),
                what,
                share,
                now - started,
            )
            shown = now
    return results
