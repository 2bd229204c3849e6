"""The order training examples come in: grouped by length, reproducible per epoch.

Hugging Face's LengthGroupedSampler draws from the global RNG when an epoch starts. A resumed
run restores the RNG as it was at the checkpoint, mid-epoch, so it would draw another order
and then skip the wrong batches: some examples twice, others never. Seeding each epoch from
(seed, epoch) makes the order a function of the epoch alone, so skipping the batches already
trained lands exactly where the killed run stopped.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices


class EpochSeededLengthGroupedSampler(LengthGroupedSampler):
    """Length-grouped order that depends only on `seed` and the epoch number."""

    def __init__(self, *, lengths: Sequence[int], batch_size: int, seed: int) -> None:
        super().__init__(batch_size, lengths=list(lengths))
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Called by the Trainer at the start of every epoch, resumed ones included."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator()
        generator.manual_seed(self.seed + self.epoch)
        return iter(get_length_grouped_indices(self.lengths, self.batch_size, generator=generator))
