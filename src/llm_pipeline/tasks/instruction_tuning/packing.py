"""Packing: several short training examples share one fixed-length row.

A packed row is examples laid end to end, then padding, `max_length` tokens in all, with
`position_ids` restarting at 0 for each example (transformers' `DataCollatorWithFlattening`
convention) and no `attention_mask`. From those position ids, transformers 5 builds a
block-diagonal causal mask (`masking_utils.find_packed_sequence_indices`) for the sdpa,
eager and flex implementations, so no token attends to another example. That holds only
where the model hands its position ids to `create_causal_mask`, with no 2-D attention mask
and no KV cache (`use_cache=False`): Llama, Qwen2, Mistral, Gemma, GPT-2 do; OPT and
BERT-style decoders do not. Which one a model is, `keeps_examples_apart` finds out by
running a tiny copy of its architecture.

Packed rows train under SDPA, transformers' default attention on GPU and CPU alike (the
worker asks for no other), which is what the probe runs. Not flash-attention: it reads
example boundaries from position ids only when a batch is one flattened row
(`modeling_flash_attention_utils._is_packed_sequence` wants batch size 1), and these
batches hold several rows, across which it would attend; nor is flash-attn installed.

Labels never cross an example: the model predicts token t+1 from token t (the loss shifts
labels left by one), so each example's first label is -100, and the last token of one
example is never trained to predict the first of the next.

The training layer reads the rows it writes by their columns (`data/saved.py::PACKED_COLUMNS`).
"""

from __future__ import annotations

import bisect
import copy
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import datasets
import pyarrow.compute as pc
import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerBase

from llm_pipeline.config import ModelConfig
from llm_pipeline.data.saved import PACKED_COLUMNS
from llm_pipeline.models.sources import resolve_model_path

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100
#: The probe's model: small enough to build and run in well under a second on a CPU.
_PROBE_SIZES = {
    "hidden_size": 32,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 64,
    "ffn_dim": 64,
    "n_inner": 64,
    "word_embed_proj_dim": 32,
    "num_hidden_layers": 2,
    "rotary_dim": 8,
}


@dataclass(frozen=True)
class PackingStats:
    """What `data.packing` did to the train split."""

    packed: bool
    #: Why the split stayed unpacked (the model's attention would cross examples).
    reason: str | None = None
    examples: int = 0
    rows: int = 0
    #: Share of the packed rows' tokens that are examples' tokens, not padding.
    fill: float = 0.0


def pack_bins(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Example indices grouped into rows of at most `capacity` tokens: best-fit decreasing.

    Longest first, each into the fullest row it still fits, which leaves little padding
    and is the same for the same lengths. Within a row, examples keep the dataset's order.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    bins: list[list[int]] = []
    # (room left, bin number), sorted: the first entry with room >= length is the best fit.
    rooms: list[tuple[int, int]] = []
    for index in order:
        length = lengths[index]
        if length > capacity:
            raise ValueError(f"example {index} has {length} tokens, more than a row's {capacity}")
        at = bisect.bisect_left(rooms, (length, -1))
        if at == len(rooms):
            bins.append([index])
            room, number = capacity - length, len(bins) - 1
        else:
            room, number = rooms.pop(at)
            bins[number].append(index)
            room -= length
        if room > 0:
            bisect.insort(rooms, (room, number))
    return [sorted(members) for members in bins]


def example_lengths(split: datasets.Dataset) -> list[int]:
    """Tokens in each example of a tokenized split, read from Arrow without the ids."""
    column = split.with_format("arrow")["input_ids"]
    return [int(n) for n in pc.list_value_length(column).to_pylist()]


def pack_split(
    split: datasets.Dataset, *, lengths: Sequence[int], capacity: int, pad_id: int, cache_file: str
) -> datasets.Dataset:
    """The split's examples (of `lengths` tokens) packed into rows of exactly `capacity`.

    Rows are built a batch of bins at a time, each batch's examples read in one go, and
    written to `cache_file` (never the `datasets` cache in the home folder).
    """
    bins = datasets.Dataset.from_dict({"members": pack_bins(lengths, capacity)})
    source = split.select_columns(["input_ids", "labels"])
    ids = datasets.List(datasets.Value("int32"))

    def build(batch: dict[str, list[list[int]]]) -> dict[str, list[list[int]]]:
        flat = [index for members in batch["members"] for index in members]
        examples = source[flat]
        rows: dict[str, list[list[int]]] = {column: [] for column in PACKED_COLUMNS}
        start = 0
        for members in batch["members"]:
            end = start + len(members)
            row = packed_row(
                examples["input_ids"][start:end], examples["labels"][start:end], capacity, pad_id
            )
            for column in PACKED_COLUMNS:
                rows[column].append(row[column])
            start = end
        return rows

    return bins.map(
        build,
        batched=True,
        batch_size=256,
        remove_columns=["members"],
        features=datasets.Features({column: ids for column in PACKED_COLUMNS}),
        cache_file_name=cache_file,
        load_from_cache_file=False,
        new_fingerprint=uuid.uuid4().hex,  # never reused: skip hashing the closure
        desc="packing train",
    )


def packed_row(
    input_ids: Sequence[Sequence[int]], labels: Sequence[Sequence[int]], capacity: int, pad_id: int
) -> dict[str, list[int]]:
    """One packed row: the examples in order, each first label -100, padding at the end."""
    row: dict[str, list[int]] = {column: [] for column in PACKED_COLUMNS}
    for ids, marks in zip(input_ids, labels, strict=True):
        row["input_ids"] += ids
        row["labels"] += [IGNORE_INDEX, *marks[1:]]
        row["position_ids"] += range(len(ids))
    pad = capacity - len(row["input_ids"])
    # The padding is one more "example" of its own: its positions restart too, so nothing
    # before it sees it (causal), and it sees nothing before it.
    row["input_ids"] += [pad_id] * pad
    row["labels"] += [IGNORE_INDEX] * pad
    row["position_ids"] += range(pad)
    return row


def keeps_examples_apart(model: ModelConfig, tokenizer: PreTrainedTokenizerBase) -> str | None:
    """None when the model's attention keeps packed examples apart; else why not, in words.

    Runs a tiny model of the same architecture (`model_type` and options from the model's
    config, small widths) on two examples packed into one row and on the second one alone:
    the second one's logits must be the same both ways. A probe that cannot run (an
    architecture that does not shrink this way, remote code) counts as "not apart": the
    data then stays unpacked, which is always correct.
    """
    try:
        config = _probe_config(model, tokenizer)
        probe = AutoModelForCausalLM.from_config(config).eval()
        vocab = min(int(getattr(config, "vocab_size", 64) or 64), 64)
        generator = torch.Generator().manual_seed(0)
        first = torch.randint(vocab, (5,), generator=generator)
        second = torch.randint(vocab, (7,), generator=generator)
        packed = torch.cat([first, second]).repeat(2, 1)
        positions = torch.cat([torch.arange(5), torch.arange(7)]).repeat(2, 1)
        with torch.no_grad():
            alone = probe(input_ids=second[None], use_cache=False).logits[0]
            together = probe(input_ids=packed, position_ids=positions, use_cache=False).logits
    except Exception as exc:
        return (
            f"cannot run a small model of its architecture to check ({type(exc).__name__}: {exc})"
        )
    if torch.allclose(together[:, 5:], alone.expand_as(together[:, 5:]), atol=1e-4):
        return None
    return (
        f"{config.model_type} with {probe.config._attn_implementation} attention lets packed "
        "examples attend to each other (its causal mask does not follow the position ids)"
    )


def _probe_config(model: ModelConfig, tokenizer: PreTrainedTokenizerBase) -> Any:
    """The model's architecture config, shrunk: the same model type and options."""
    if model.architecture is not None:
        settings = dict(model.architecture)
        model_type = settings.pop("model_type")
        config = AutoConfig.for_model(model_type, **{"vocab_size": len(tokenizer), **settings})
    elif model.source is not None:
        config = AutoConfig.from_pretrained(
            resolve_model_path(model.source),
            revision=model.revision,
            trust_remote_code=model.trust_remote_code,
        )
    elif model.warm_start_decoder is not None:
        # An encoder checkpoint, made a decoder below as training makes it (`revision` pins
        # `source` only).
        config = AutoConfig.from_pretrained(
            resolve_model_path(model.warm_start_decoder),
            trust_remote_code=model.trust_remote_code,
        )
    else:
        raise ValueError("an encoder-decoder pair is not a causal LM")
    config = copy.deepcopy(config)
    for name, value in _PROBE_SIZES.items():
        if hasattr(config, name):
            try:
                setattr(config, name, value)
            except AttributeError:  # a derived value (Falcon's head_dim)
                continue
    vocab = getattr(config, "vocab_size", None) or len(tokenizer)
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        if isinstance(getattr(config, name, None), int) and getattr(config, name) >= vocab:
            setattr(config, name, None)  # an id outside the vocabulary the probe is built with
    if getattr(config, "layer_types", None):
        config.layer_types = list(config.layer_types)[: _PROBE_SIZES["num_hidden_layers"]]
    if hasattr(config, "is_decoder"):
        config.is_decoder = True  # a BERT-style model is a causal LM only as a decoder
    for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "dropout"):
        if isinstance(getattr(config, name, None), float):
            setattr(config, name, 0.0)
    return config
