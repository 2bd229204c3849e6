"""DPO inside the project's Trainer: the loss the finetune step calls on each batch, and the
reference log-probabilities it compares the policy with.

One forward of the concatenated pairs scores both answers under the policy (loss.py's
`pair_logps`); the reference comes, without a second model (reference.py):
- under LoRA, from the same model with its adapters off, each step, before the policy's
  forward (no activations of the policy held meanwhile);
- in full fine-tuning, from columns taken in one pass before the first step (`start`), and
  kept in the run's checkpoint folder (`REFERENCE_FILE`), so that a resumed run reads them
  instead of scoring the pairs with the weights it resumed (trained ones, not the start).

Dropout is off for the whole run, as TRL's `DPOTrainer` does (`disable_dropout`): with it the
policy's and the reference's log-probs of the same weights would differ by noise, and so
would the chosen and rejected halves of one forward. LoRA's adapter dropout goes too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import torch
import torch.distributed as dist
from fsspec.core import url_to_fs
from peft import PeftModel
from trl.trainer.utils import disable_dropout_in_model

from llm_pipeline.errors import TrainError
from llm_pipeline.storage import is_remote, write_atomic
from llm_pipeline.tasks.base import ModelLoss
from llm_pipeline.tasks.preference_tuning.collate import REFERENCE_COLUMNS
from llm_pipeline.tasks.preference_tuning.loss import dpo_loss, pair_logps
from llm_pipeline.tasks.preference_tuning.reference import (
    lora_reference_logps,
    precompute_reference_logps,
)

#: The reference log-probs of a full run, in its checkpoint folder: {split: {column: [...]}}.
REFERENCE_FILE = "reference_logps.json"


@dataclass(frozen=True)
class DpoLoss(ModelLoss):
    """DPO's loss (`train.dpo`) on a batch of PairCollator's. Its figures are TRL's
    `rewards/*`: the share of pairs whose chosen answer gets the larger implicit reward
    (β × the log-ratio to the reference), the mean margin, each answer's mean reward."""

    beta: float
    loss_type: str

    def __call__(
        self, model: Any, batch: dict[str, Any], *, unwrapped: Any
    ) -> tuple[torch.Tensor, Mapping[str, torch.Tensor]]:
        if REFERENCE_COLUMNS[0] in batch:
            ref_chosen, ref_rejected = (batch[column] for column in REFERENCE_COLUMNS)
        elif isinstance(unwrapped, PeftModel):
            with checkpointing_off(model):
                ref_chosen, ref_rejected = lora_reference_logps(model, unwrapped, batch)
        else:
            raise TrainError(
                "full DPO needs the reference log-probs, taken before the first step "
                "(DpoLoss.start); this batch has none"
            )
        policy = pair_logps(model, batch)
        loss = dpo_loss(policy, ref_chosen, ref_rejected, beta=self.beta, loss_type=self.loss_type)
        chosen = (self.beta * (policy.chosen - ref_chosen)).detach()
        rejected = (self.beta * (policy.rejected - ref_rejected)).detach()
        figures = {
            "reward_accuracy": (chosen > rejected).float().mean(),
            "reward_margin": (chosen - rejected).mean(),
            "reward_chosen": chosen.mean(),
            "reward_rejected": rejected.mean(),
        }
        return loss, figures

    def start(
        self,
        model: Any,
        splits: dict[str, Any],
        *,
        collate: Callable[..., Any],
        batch_size: int,
        device: Any,
        keep_folder: str | None,
        resumed: bool,
    ) -> dict[str, Any]:
        """Dropout off; in full fine-tuning the splits get their reference columns: read
        from `keep_folder` when an earlier attempt of the run took them, else taken now
        (every rank in step, see reference.py) and written there by rank 0."""
        disable_dropout_in_model(model)
        peft = _unwrap(model)
        if isinstance(peft, PeftModel):
            return splits
        kept = _read_kept(keep_folder)
        if kept is not None and _fits(kept, splits):
            return {name: _with_columns(split, kept[name]) for name, split in splits.items()}
        if resumed:
            found = "missing" if kept is None else "for other splits than this run's"
            raise TrainError(
                f"{keep_folder}/{REFERENCE_FILE}: {found}, and the run resumes from a "
                "checkpoint, whose trained weights cannot stand in for the reference; start "
                "the run afresh (another train.checkpoint_dir)"
            )
        rank, world = _rank_and_world()
        gather = _gather if world > 1 else None
        scored = {
            name: precompute_reference_logps(
                model,
                split,
                collate,
                batch_size=batch_size,
                device=device,
                rank=rank,
                world_size=world,
                gather=gather,
            )
            for name, split in splits.items()
        }
        if rank == 0 and keep_folder is not None:
            _write_kept(keep_folder, {name: _columns(split) for name, split in scored.items()})
        return scored


@contextmanager
def checkpointing_off(model: Any) -> Iterator[None]:
    """No activation checkpointing inside: transformers' checkpointed layers recompute only
    in training mode, and a forward without gradients has nothing to recompute (eval mode
    changes nothing else here: dropout is off for the whole run)."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _unwrap(model: Any) -> Any:
    # DeepSpeed's engine and DDP hold the model as `.module`; a PeftModel has no such field.
    return model.module if isinstance(getattr(model, "module", None), torch.nn.Module) else model


def _rank_and_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _gather(share: Any) -> list[Any]:
    shares: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(shares, share)
    return shares


def _columns(split: datasets.Dataset) -> dict[str, list[float]]:
    return {column: list(split[column]) for column in REFERENCE_COLUMNS}


def _with_columns(split: datasets.Dataset, columns: Mapping[str, list[float]]) -> Any:
    for column in REFERENCE_COLUMNS:
        split = split.add_column(column, columns[column], feature=datasets.Value("float32"))
    return split


def _fits(kept: Mapping[str, Any], splits: Mapping[str, Any]) -> bool:
    return set(kept) == set(splits) and all(
        len(kept[name][column]) == len(split)
        for name, split in splits.items()
        for column in REFERENCE_COLUMNS
    )


def _read_kept(folder: str | None) -> dict[str, Any] | None:
    """The kept reference columns, read by rank 0 and shared with every rank: only the
    first node may see the folder (node-local checkpoints)."""
    rank, world = _rank_and_world()
    kept = None
    if rank == 0 and folder is not None:
        fs, path = url_to_fs(f"{folder.rstrip('/')}/{REFERENCE_FILE}")
        if fs.exists(path):
            kept = json.loads(fs.cat_file(path))
    if world > 1:
        shared = [kept]
        dist.broadcast_object_list(shared, src=0)
        kept = shared[0]
    return kept


def _write_kept(folder: str, kept: Mapping[str, Any]) -> None:
    """Whole or not at all: a local file is replaced atomically, and an object store's
    upload is atomic by itself. Float32 values survive JSON exactly (as doubles)."""
    text = json.dumps(kept)
    target = f"{folder.rstrip('/')}/{REFERENCE_FILE}"
    if is_remote(folder):
        fs, path = url_to_fs(target)
        fs.pipe_file(path, text.encode())
    else:
        Path(folder).mkdir(parents=True, exist_ok=True)
        write_atomic(target, text)


__all__ = ["REFERENCE_FILE", "DpoLoss", "checkpointing_off"]
