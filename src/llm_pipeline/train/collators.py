"""How a causal LM's training rows become a batch.

The preprocess step saves unpadded rows: `input_ids`, `attention_mask`, and `labels` (the
input ids with -100 on prompt tokens), and with `data.packing` fixed-length rows of several
examples whose `position_ids` restart at 0 for each. transformers has no collator for exactly
this: `DataCollatorForLanguageModeling` rebuilds the labels from the inputs (unmasking the
prompt), and `DataCollatorForSeq2Seq` pads through the tokenizer, which knows nothing of
`position_ids`. So:

* every row is padded on the right to the batch's longest (or a multiple of 8 on GPUs):
  input ids with the pad id, the attention mask with 0, labels with -100, positions with 0;
* the first label of every row is set to -100: no token precedes it, so nothing is trained
  to predict it, and every count of label tokens (the Trainer's, the run's) agrees;
* a batch with `position_ids` leaves the attention mask out. Given positions and no mask,
  transformers builds attention that stays inside each packed example (`masking_utils`'
  packed-sequence detection, under SDPA: the task's packing.py); with a mask it would not look
  for the example boundaries. It also says `use_cache=False`: a model that makes itself a
  KV cache (use_cache defaults to True in most configs) skips that detection too, and
  attention leaks across the examples (measured on Llama, GPT-2 and Qwen2:
  tests/data/test_packing.py).

`WithoutCache` says `use_cache=False` in every batch of an encoder-decoder (`build_trainer`).
transformers' Trainer turns the cache off in the model's config, which a T5's decoder never
reads: it keeps a copy of the config, so each training forward filled an `EncoderDecoderCache`
that nothing read. For T5-large's 48 layers that was 336 of the 15,183 operations of a forward
and backward under bf16 autocast (`benchmarks/step_ops.py`), and 7.5% of the host's time for
them (tiny widths, fp32, alternated over 60 steps: 54.9 -> 50.8 and 52.2 -> 48.1 ms), on GPUs
where T5-large's steps ran at the host's pace.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

#: The loss ignores label positions holding this value; padding labels with it keeps padded
#: positions out of the loss and out of the token counts.
LABEL_PAD = -100

__all__ = ["LABEL_PAD", "CausalLMCollator", "WithoutCache"]


@dataclass(frozen=True)
class CausalLMCollator:
    """Pads a list of causal-LM rows into a batch of tensors (see the module's docstring)."""

    pad_id: int
    pad_to_multiple_of: int | None = None

    def __call__(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        width = max(len(row["input_ids"]) for row in rows)
        if self.pad_to_multiple_of:
            width = -(-width // self.pad_to_multiple_of) * self.pad_to_multiple_of
        packed = "position_ids" in rows[0]
        fill = {"input_ids": self.pad_id, "attention_mask": 0, "labels": LABEL_PAD}
        if packed:
            fill = {"input_ids": self.pad_id, "labels": LABEL_PAD, "position_ids": 0}
        batch = {
            name: torch.full((len(rows), width), value, dtype=torch.long)
            for name, value in fill.items()
        }
        for i, row in enumerate(rows):
            length = len(row["input_ids"])
            for name in fill:
                values = row[name] if name in row else [1] * length
                batch[name][i, :length] = torch.as_tensor(values, dtype=torch.long)
        batch["labels"][:, 0] = LABEL_PAD
        if packed:
            return {**batch, "use_cache": False}
        return batch


@dataclass(frozen=True)
class WithoutCache:
    """`collate`'s batches, each saying `use_cache=False` (the module's docstring says why)."""

    collate: Callable[[list[dict[str, Any]]], Mapping[str, Any]]

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {**self.collate(rows), "use_cache": False}
