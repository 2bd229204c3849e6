"""Turn the downloaded documents and summaries into token ids a seq2seq model trains on.

Output (`save_to_disk` folder, one split per input split):
- `input_ids`, `attention_mask`, `labels`: int32 lists, truncated but *not padded*; the
  collator pads each batch to its own longest row, which carries far fewer pad tokens than
  padding every row to the max (see benchmarks/preprocess.py).
- the task's raw text columns (`document`, `summary`), kept in every split: evaluate needs
  the references and documents as written, and they cost about as much as the ids. Training
  should keep only the three id columns (the Trainer drops unused columns by default).
- `preprocess.json`: the resolved max lengths, how each was chosen, and per-split stats.

Rows whose text is missing or blank are dropped and counted. Each text is tokenized once,
in whole batches with the fast tokenizer and without truncation, so the report can give
true lengths and truncation rates; truncation is then list slicing that reproduces the
tokenizer's own `truncation=True` (the closing special token, `[SEP]` or `</s>`, stays).
"""

import json
import math
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
from transformers import PreTrainedTokenizerBase

from llm_pipeline.config import DataConfig, ModelConfig
from llm_pipeline.data.preprocess import (
    BATCH_SIZE,
    LengthStats,
    refuse_non_text,
    tokenizer_length,
)
from llm_pipeline.errors import DataError
from llm_pipeline.output_files import PREPROCESS_REPORT_FILE
from llm_pipeline.storage import atomic_output_dir
from llm_pipeline.tasks import Task
from llm_pipeline.tasks.summarization.preprocess_report import (
    PreprocessReport,
    SplitStats,
    log_report,
)

# Untruncated lengths, carried through the map passes and dropped before saving.
_SOURCE_TOKENS = "_source_tokens"
_TARGET_TOKENS = "_target_tokens"


def preprocess_seq2seq(
    dataset: datasets.DatasetDict,
    *,
    tokenizer: PreTrainedTokenizerBase,
    output_dir: str | Path,
    data: DataConfig,
    model: ModelConfig,
    task: Task,
) -> PreprocessReport:
    """Tokenize every split of `dataset` into `output_dir` (see the module doc)."""
    refuse_non_text(dataset, _roles(task, dataset[next(iter(dataset))].column_names))
    source_layout = _special_layout(tokenizer, target=False)
    target_layout = _special_layout(tokenizer, target=True)
    max_source, source_from = _max_source_length(data, tokenizer)
    cut_source = _cut_rule(tokenizer, max_source, source_layout, "data.max_source_length")
    cut_target = None
    if data.max_target_length is not None:
        cut_target = _cut_rule(
            tokenizer, data.max_target_length, target_layout, "data.max_target_length"
        )

    with tempfile.TemporaryDirectory(prefix="llm-pipeline-preprocess-") as work:
        encode = _EncodeBatch(tokenizer, task, data.prefix, cut_source, cut_target)
        tokenized = _map(dataset, encode, Path(work) / "tokenized", data.num_proc, task)
        _refuse_empty_splits(dataset, tokenized, task)
        target_from = "config"
        if cut_target is None:
            computed = _computed_target_length(tokenized, data, target_layout)
            cut_target = _cut_rule(tokenizer, computed, target_layout, "data.max_target_length_cap")
            target_from = "computed"
            relabel = _CutLabels(cut_target)
            tokenized = _map(tokenized, relabel, Path(work) / "labels", data.num_proc, task)
        max_target = cut_target.max_length

        report = PreprocessReport(
            max_source_length=max_source,
            max_target_length=max_target,
            max_source_length_from=source_from,
            max_target_length_from=target_from,
            splits={
                split: _split_stats(len(dataset[split]), tokenized[split], max_source, max_target)
                for split in dataset
            },
        )
        tokenized = tokenized.remove_columns([_SOURCE_TOKENS, _TARGET_TOKENS])
        with atomic_output_dir(output_dir) as staging:
            tokenized.save_to_disk(str(staging))
            payload = {"tokenizer": model.tokenizer_source, "prefix": data.prefix}
            payload |= report.to_dict()
            (staging / PREPROCESS_REPORT_FILE).write_text(json.dumps(payload, indent=2) + "\n")
    log_report(report)
    return report


def _special_layout(tokenizer: PreTrainedTokenizerBase, *, target: bool) -> tuple[int, int]:
    """How many special tokens the tokenizer puts before and after a text's tokens.

    BERT: 1 and 1 (`[CLS]`, `[SEP]`); T5: 0 and 1 (`</s>`); GPT-2: 0 and 0. Found by
    encoding a probe with and without special tokens, so any post-processor works.
    """
    key = "text_target" if target else "text"
    with_special = tokenizer(**{key: "hello world"}, add_special_tokens=True)["input_ids"]
    bare = tokenizer(**{key: "hello world"}, add_special_tokens=False)["input_ids"]
    for start in range(len(with_special) - len(bare) + 1):
        if with_special[start : start + len(bare)] == bare:
            return start, len(with_special) - start - len(bare)
    raise DataError(
        f"cannot tell where {type(tokenizer).__name__} puts its special tokens: "
        f"{with_special} does not contain {bare}"
    )


def _max_source_length(data: DataConfig, tokenizer: PreTrainedTokenizerBase) -> tuple[int, str]:
    if data.max_source_length is not None:
        return data.max_source_length, "config"
    return tokenizer_length(tokenizer), "tokenizer"


@dataclass(frozen=True)
class _Cut:
    """The tokenizer's own truncation, applied to ids tokenized without it.

    Fast tokenizers cut the text's tokens and then add the special tokens, so a cut
    sequence keeps its opening (`[CLS]`) and closing (`[SEP]`, `</s>`) tokens; with
    `truncation_side="left"` the end of the text is kept instead of its start.
    """

    max_length: int
    prefix: int  # special tokens before the text
    suffix: int  # special tokens after it
    left: bool

    def __call__(self, ids: list[int]) -> list[int]:
        if len(ids) <= self.max_length:
            return ids
        if self.left:
            return ids[: self.prefix] + ids[len(ids) - (self.max_length - self.prefix) :]
        # `len(ids) - suffix`, not `-suffix`: ids[-0:] would be the whole list.
        return ids[: self.max_length - self.suffix] + ids[len(ids) - self.suffix :]


def _cut_rule(
    tokenizer: PreTrainedTokenizerBase, max_length: int, layout: tuple[int, int], key: str
) -> _Cut:
    if max_length <= sum(layout):
        raise DataError(
            f"{key}: {max_length} leaves no room for text; the tokenizer adds {sum(layout)} "
            f"special token(s) to every sequence"
        )
    left = tokenizer.truncation_side == "left"
    return _Cut(max_length=max_length, prefix=layout[0], suffix=layout[1], left=left)


def _roles(task: Task, columns: Any) -> tuple[str, ...]:
    """The task's roles among a batch's or split's columns (checked on load)."""
    roles = task.role_set_among(columns)
    assert roles is not None  # _load_dataset refused splits without them
    return roles


def source_texts(rows: dict[str, list[str]], *, prefix: str) -> list[str]:
    """The model's input text for each row: the document after the prefix. T5 checkpoints
    were pre-trained with task prefixes ("summarize: "); other models take the document as
    it is, so the prefix comes from the config, default empty."""
    return [prefix + text for text in rows["document"]]


def _usable(text: Any) -> bool:
    return text is not None and bool(str(text).strip())


@dataclass(frozen=True)
class _EncodeBatch:
    """One `Dataset.map` batch: drop unusable rows, tokenize, truncate, record lengths.

    A picklable object rather than a closure, so `num_proc` workers receive it whole.
    """

    tokenizer: PreTrainedTokenizerBase
    task: Task
    prefix: str
    cut_source: _Cut
    cut_target: _Cut | None  # None: cut in a second pass, once max_target_length is computed

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        roles = _roles(self.task, batch)
        kept = [i for i in range(len(batch[roles[0]])) if all(_usable(batch[r][i]) for r in roles)]
        rows = {role: [str(batch[role][i]) for i in kept] for role in roles}
        sources = self._encode(source_texts(rows, prefix=self.prefix), target=False)
        targets = self._encode(rows[self.task.target_role], target=True)
        input_ids = [self.cut_source(ids) for ids in sources]
        labels = targets if self.cut_target is None else [self.cut_target(ids) for ids in targets]
        return {
            **rows,
            "input_ids": input_ids,
            "attention_mask": [[1] * len(ids) for ids in input_ids],
            "labels": labels,
            _SOURCE_TOKENS: [len(ids) for ids in sources],
            _TARGET_TOKENS: [len(ids) for ids in targets],
        }

    def _encode(self, texts: list[str], *, target: bool) -> list[list[int]]:
        if not texts:
            return []
        key = "text_target" if target else "text"
        encoded = self.tokenizer(
            **{key: texts},
            return_attention_mask=False,
            return_token_type_ids=False,
            verbose=False,  # lengths past model_max_length are expected: we truncate after
        )
        return list(encoded["input_ids"])


@dataclass(frozen=True)
class _CutLabels:
    """Second pass when max_target_length had to be computed from the tokenized data."""

    cut: _Cut

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        return {"labels": [self.cut(ids) for ids in batch["labels"]]}


def _features(task: Task) -> datasets.Features:
    # int32 halves the disk and I/O of the default int64; vocabularies fit easily and the
    # HF collators turn the padded batches into int64 tensors anyway.
    ids = datasets.List(datasets.Value("int32"))
    return datasets.Features(
        {
            **{role: datasets.Value("string") for role in task.role_sets[0]},
            "input_ids": ids,
            "attention_mask": ids,
            "labels": ids,
            _SOURCE_TOKENS: datasets.Value("int32"),
            _TARGET_TOKENS: datasets.Value("int32"),
        }
    )


def _map(
    dataset: datasets.DatasetDict, function: Any, work: Path, num_proc: int, task: Task
) -> datasets.DatasetDict:
    """Run one batched pass; its cache files go to `work`, never beside the input artifact."""
    work.mkdir(parents=True, exist_ok=True)
    encodes = isinstance(function, _EncodeBatch)
    return datasets.DatasetDict(
        {
            split: table.map(
                function,
                batched=True,
                batch_size=BATCH_SIZE,
                num_proc=num_proc if num_proc > 1 else None,
                # Encoding returns the text columns it keeps; anything else is left behind.
                remove_columns=table.column_names if encodes else None,
                features=_features(task),
                cache_file_name=str(work / f"{split}.arrow"),
                load_from_cache_file=False,
                # Nothing is ever reused from these caches: skip hashing the tokenizer.
                new_fingerprint=uuid.uuid4().hex,
                desc=f"{'tokenizing' if encodes else 'truncating labels of'} {split}",
            )
            for split, table in dataset.items()
        }
    )


def _refuse_empty_splits(
    dataset: datasets.DatasetDict, tokenized: datasets.DatasetDict, task: Task
) -> None:
    for split in dataset:
        if len(tokenized[split]) == 0:
            raise DataError(
                f"split {split!r}: none of its {len(dataset[split])} rows has text in every "
                f"column {list(_roles(task, dataset[split].column_names))} (all empty, blank or "
                "missing)"
            )


def _lengths(split: datasets.Dataset, column: str) -> np.ndarray:
    # Straight from the Arrow column: no Python objects per row.
    return np.asarray(split.data.column(column).to_numpy())


def _computed_target_length(
    tokenized: datasets.DatasetDict, data: DataConfig, layout: tuple[int, int]
) -> int:
    """The configured percentile of training target lengths, rounded up and capped."""
    if "train" not in tokenized:
        raise DataError(
            f"data.max_target_length is null, so it is computed from the train split, but the "
            f"dataset has only {list(tokenized)}; set data.max_target_length"
        )
    lengths = _lengths(tokenized["train"], _TARGET_TOKENS)
    wanted = math.ceil(float(np.percentile(lengths, data.target_length_percentile)))
    # Room for one text token even if most targets were nothing but special tokens.
    return min(max(wanted, sum(layout) + 1), data.max_target_length_cap)


def _split_stats(
    rows_in: int, split: datasets.Dataset, max_source: int, max_target: int
) -> SplitStats:
    sources = _lengths(split, _SOURCE_TOKENS)
    targets = _lengths(split, _TARGET_TOKENS)
    return SplitStats(
        rows_in=rows_in,
        rows_dropped=rows_in - len(split),
        source_tokens=LengthStats.of(sources),
        target_tokens=LengthStats.of(targets),
        source_truncated=float(np.mean(sources > max_source)),
        target_truncated=float(np.mean(targets > max_target)),
    )
