"""Pairs (preprocess.py's columns) batched for DPO's one concatenated forward.

A batch of n pairs becomes 2n rows: the n prompt+chosen sequences, then the n
prompt+rejected ones, right-padded to the longest of all 2n, so that one forward scores both
answers (loss.py's `pair_logps` splits the result in two halves). Labels pad with -100, so
padding is never scored; precomputed reference log-probabilities (reference.py) ride along.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.utils.rnn import pad_sequence

from llm_pipeline.tasks.preference_tuning.pairs import IGNORE_INDEX

#: Reference log-probability columns a batch carries when they were precomputed.
REFERENCE_COLUMNS = ("ref_chosen_logps", "ref_rejected_logps")


@dataclass(frozen=True)
class PairCollator:
    """Collate pairs for a causal LM; `pad_id` fills the ids (masked out of attention)."""

    pad_id: int
    #: Pad the length to a multiple of this (tensor cores like multiples of 8); None: no.
    pad_to_multiple_of: int | None = None

    def __call__(self, rows: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        answers = ("chosen", "rejected")
        batch = {
            name: self._pad([row[f"{answer}_{name}"] for answer in answers for row in rows], fill)
            for name, fill in (
                ("input_ids", self.pad_id),
                ("attention_mask", 0),
                ("labels", IGNORE_INDEX),
            )
        }
        for column in REFERENCE_COLUMNS:
            if column in rows[0]:
                batch[column] = torch.tensor([row[column] for row in rows], dtype=torch.float32)
        return batch

    def _pad(self, sequences: list[Sequence[int]], fill: int) -> torch.Tensor:
        padded = pad_sequence(
            [torch.as_tensor(seq, dtype=torch.long) for seq in sequences],
            batch_first=True,
            padding_value=fill,
        )
        extra = -padded.shape[1] % (self.pad_to_multiple_of or 1)
        return torch.nn.functional.pad(padded, (0, extra), value=fill)


__all__ = ["REFERENCE_COLUMNS", "PairCollator"]
