"""Every split of preference rows tokenized into pairs (pairs.py), the refused rows counted.

Output columns, one row per kept pair, not padded (the collator pads):
- `prompt_input_ids`; `chosen_input_ids`, `chosen_attention_mask`, `chosen_labels` and the
  same three for `rejected`: each answer after the prompt, its labels -100 on the prompt;
- `prompt` (rendered, generation prompt included: what evaluation generates from), `chat`
  (the prompt's turns as JSON: what a served request carries), `chosen`, `rejected` (texts);
- `preprocess.json`: the resolved length and template, and per split the rows refused (by
  reason, the first rows named) and the prompts cut (preprocess_report.py).

The check runs inside `Dataset.map` (its workers too), so each row's outcome is a private
column, counted after the pass and dropped: counts add up however the rows were split.
"""

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
from transformers import PreTrainedTokenizerBase

from llm_pipeline.config import DataConfig, ModelConfig
from llm_pipeline.data.chat_format import chat_max_length, chat_template_from, resolve_chat_format
from llm_pipeline.data.preprocess import tokenize_split
from llm_pipeline.errors import DataError
from llm_pipeline.output_files import PREPROCESS_REPORT_FILE
from llm_pipeline.storage import atomic_output_dir
from llm_pipeline.tasks.chat import ChatFormat, ChatTemplateError
from llm_pipeline.tasks.preference_tuning.pairs import (
    REASONS,
    Refused,
    check_row,
    encode_pair,
    prompt_texts,
)
from llm_pipeline.tasks.preference_tuning.preprocess_report import (
    PairPreprocessReport,
    PairStats,
    log_pair_report,
)

#: How many refused rows a split's statistics name per reason.
NAMED_ROWS = 10

_PRIVATE = {
    "_reason": datasets.Value("string"),
    "_problem": datasets.Value("string"),
    "_prompt_dropped": datasets.Value("int32"),
}


def preprocess_pairs(
    dataset: datasets.DatasetDict,
    *,
    tokenizer: PreTrainedTokenizerBase,
    output_dir: str | Path,
    data: DataConfig,
    model: ModelConfig,
) -> PairPreprocessReport:
    """Tokenize every split of preference rows in `dataset` into `output_dir`, with the
    chat template and length instruction tuning resolves (data/chat_format.py), and write
    and log what was refused and cut."""
    chat_format = resolve_chat_format(tokenizer, data)
    max_length, length_from = chat_max_length(data, tokenizer, chat_format)
    with tempfile.TemporaryDirectory(prefix="llm-pipeline-preprocess-") as work:
        kept, stats = encode_pairs(
            dataset,
            chat_format=chat_format,
            max_length=max_length,
            work_dir=work,
            num_proc=data.num_proc if data.num_proc > 1 else None,
        )
        report = PairPreprocessReport(
            max_length=max_length,
            max_length_from=length_from,
            chat_template_from=chat_template_from(tokenizer, data),
            splits=stats,
        )
        with atomic_output_dir(output_dir) as staging:
            kept.save_to_disk(str(staging))
            payload = {"tokenizer": model.tokenizer_source, "chat_template": chat_format.template}
            (staging / PREPROCESS_REPORT_FILE).write_text(
                json.dumps(payload | report.to_dict(), indent=2) + "\n"
            )
    log_pair_report(report)
    return report


def encode_pairs(
    dataset: datasets.DatasetDict,
    *,
    chat_format: ChatFormat,
    max_length: int,
    work_dir: str | Path,
    num_proc: int | None = None,
) -> tuple[datasets.DatasetDict, dict[str, PairStats]]:
    """Each split's usable pairs (cached under `work_dir`, which must outlive them) and its
    statistics. Raises DataError for a split with no usable pair, naming its first problem."""
    encode = _EncodePairs(chat_format, max_length)
    kept, stats = {}, {}
    for split, table in dataset.items():
        encoded = tokenize_split(
            table,
            encode,
            features=_features(),
            cache_file=Path(work_dir) / f"pairs-{split}.arrow",
            num_proc=num_proc,
            desc=f"tokenizing pairs of {split}",
        )
        stats[split] = _split_stats(split, encoded)
        usable = np.flatnonzero(_column(encoded, "_reason") == "")
        kept[split] = encoded.select(usable).remove_columns(list(_PRIVATE))
    return datasets.DatasetDict(kept), stats


@dataclass(frozen=True)
class _EncodePairs:
    """One `Dataset.map` batch; a picklable object, so `num_proc` workers receive it whole."""

    chat_format: ChatFormat
    max_length: int

    def __call__(self, batch: dict[str, list[Any]], indices: list[int]) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {name: [] for name in _features()}
        for position, index in enumerate(indices):
            values = self._encode({column: batch[column][position] for column in batch}, index)
            for name, feature in _features().items():
                out[name].append(values.get(name, _EMPTY.get(getattr(feature, "dtype", ""), [])))
        return out

    def _encode(self, row: dict[str, Any], index: int) -> dict[str, Any]:
        checked = check_row(row)
        if isinstance(checked, Refused):
            return {"_reason": checked.reason, "_problem": checked.problem}
        try:
            pair = encode_pair(self.chat_format, checked, self.max_length)
        except ChatTemplateError as exc:  # the template's fault: no row would do
            raise DataError(f"row {index + 1}: {exc}") from None
        if isinstance(pair, Refused):
            return {"_reason": pair.reason, "_problem": pair.problem}
        texts = prompt_texts(self.chat_format, checked)
        return texts | pair.columns() | {"_prompt_dropped": pair.prompt_dropped}


#: A column's value in a refused row (which is dropped after counting), by Arrow type.
_EMPTY: dict[str, Any] = {"string": "", "int32": 0}


def _features() -> datasets.Features:
    # int32 halves the disk and I/O of the default int64; the collator makes int64 tensors.
    ids = datasets.List(datasets.Value("int32"))
    text = datasets.Value("string")
    columns = {"prompt_input_ids": ids}
    for answer in ("chosen", "rejected"):
        columns |= {f"{answer}_{name}": ids for name in ("input_ids", "attention_mask", "labels")}
    texts = dict.fromkeys(("prompt", "chat", "chosen", "rejected"), text)
    return datasets.Features(columns | texts | _PRIVATE)


def _column(table: datasets.Dataset, name: str) -> np.ndarray:
    # Straight from the Arrow column: no Python objects per row.
    return np.asarray(table.data.column(name).to_numpy(zero_copy_only=False))


def _split_stats(split: str, table: datasets.Dataset) -> PairStats:
    reasons, problems = _column(table, "_reason"), _column(table, "_problem")
    if len(table) and np.all(reasons != ""):
        raise DataError(
            f"split {split!r}: none of its {len(table)} rows is a usable preference pair; "
            f"the first: row 1: {problems[0]}"
        )
    refused, refused_rows, first_problem = {}, {}, {}
    for reason in REASONS:
        rows = np.flatnonzero(reasons == reason)
        refused[reason] = len(rows)
        if len(rows):
            refused_rows[reason] = [int(row) + 1 for row in rows[:NAMED_ROWS]]
            first_problem[reason] = f"row {rows[0] + 1}: {problems[rows[0]]}"
    dropped = _column(table, "_prompt_dropped")
    return PairStats(
        rows_in=len(table),
        refused=refused,
        refused_rows=refused_rows,
        first_problem=first_problem,
        prompts_cut=int(np.count_nonzero(dropped)),
        prompt_tokens_dropped=int(dropped.sum()),
    )


__all__ = ["PairStats", "encode_pairs", "preprocess_pairs"]
