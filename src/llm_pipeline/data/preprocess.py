"""The preprocess step's driver: the downloaded dataset, checked for the task's columns,
and the model's tokenizer, handed to the task (`Task.preprocess`), which writes the
tokenized dataset and its `preprocess.json`; the download step's notes on the evaluation
splits follow the data (`data_notes.json`, `data.overlap`), for evaluate's report.

What every task's preprocessing shares lives here too: its tokenizing map pass and the
batch size of its map passes, the cap on a length the tokenizer gives, token length
statistics and the rows a split kept for its report, and the step's logger, under which
every task's preprocessing logs.
"""

import json
import logging
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
from transformers import PreTrainedTokenizerBase

from llm_pipeline.config import DataConfig, ModelConfig
from llm_pipeline.data.download import CARVE_KEY, DATA_NOTES_KEY, INFO_FILE, source_rows
from llm_pipeline.data.overlap import write_data_notes
from llm_pipeline.data.saved import load_saved_dataset
from llm_pipeline.errors import DataError, json_type, shown_value
from llm_pipeline.models.sources import load_tokenizer
from llm_pipeline.output_files import Step
from llm_pipeline.tasks import Task
from llm_pipeline.tasks.base import PreprocessResult

logger = logging.getLogger(__name__)

#: A null max length uses the tokenizer's limit, but never more than this: many tokenizers
#: report a huge sentinel (1e30) when the checkpoint sets no limit.
LENGTH_LIMIT = 1024
#: Rows per batch of a tokenizing `Dataset.map` pass.
BATCH_SIZE = 1000
#: The rows a data error or a warning names (counted from 1), and the split it names first.
_ROWS = re.compile(r"\b(rows?) (\d+(?:, \d+)*)\b")
_SPLIT = re.compile(r"split '(\w+)':|(\w+): ")


def preprocess_dataset(
    *,
    dataset_dir: str | Path,
    output_dir: str | Path,
    data: DataConfig,
    model: ModelConfig,
    task: Task,
) -> PreprocessResult:
    """Tokenize every split of the dataset at `dataset_dir` into `output_dir`, the task's way.

    Raises DataError for data that cannot be used (missing columns, a split with no usable
    rows, max lengths too short for the tokenizer's special tokens) and ModelSourceError
    when the tokenizer cannot be loaded.
    """
    tokenizer = load_tokenizer(model)
    dataset = _load_dataset(dataset_dir, task)
    info = _download_info(dataset_dir)
    renumber = _SourceRows(info)
    logger.addFilter(renumber)
    try:
        result = task.preprocess(
            dataset, tokenizer=tokenizer, output_dir=output_dir, data=data, model=model
        )
    except DataError as exc:
        raise DataError(rows_as_in_source(str(exc), info, unnamed=True)) from exc
    finally:
        logger.removeFilter(renumber)
    rows = {split: saved.get("rows") for split, saved in (info.get("splits") or {}).items()}
    write_data_notes(output_dir, info.get(DATA_NOTES_KEY) or {}, rows)
    return result


def rows_as_in_source(message: str, info: Mapping[str, Any], *, unnamed: bool = False) -> str:
    """A data error's or warning's `message` with the rows it names ("row 3", "rows 3, 5",
    counted from 1 within a split) numbered as the user's source numbers them, where the
    download step carved validation out of train (`info`: its `download.json`):
    validation's rows are a shuffled draw, and train lacks them, so neither split's row 3
    is the source's. The message names its split first (`split 'validation': ...`, or
    `validation: ...`); with `unnamed`, one that names none keeps its numbers, with a word
    that they count within a carved split."""
    numbered = source_rows(info)
    carve = info.get(CARVE_KEY) or {}
    if not numbered or not _ROWS.search(message):
        return message
    where = f"split {carve.get('split')!r} of {carve.get('of')}"
    named = _SPLIT.match(message)
    split = (named.group(1) or named.group(2)) if named else None
    if split is None and unnamed:
        return (
            f"{message} (rows counted within a split that the download step made from {where}: "
            f"validation is a shuffled draw of its rows, seed {carve.get('seed')}, and train the "
            "rest, so a row's number is not its place there)"
        )
    if split not in numbered:
        return message  # a split of the source's own: its rows are the source's
    rows = numbered[split]

    def renumbered(found: re.Match[str]) -> str:
        numbers = [int(n) for n in found.group(2).split(", ")]
        if not all(0 < n <= len(rows) for n in numbers):
            return found.group(0)
        return f"{found.group(1)} {', '.join(str(rows[n - 1] + 1) for n in numbers)}"

    how = "drawn at random from" if split == "validation" else "what the carve left of"
    return f"{_ROWS.sub(renumbered, message)} (rows numbered as in {where}; {split} is {how} it)"


class _SourceRows(logging.Filter):
    """Renumbers the rows a task's preprocessing log line names (its dropped rows), as
    `rows_as_in_source` does a data error's."""

    def __init__(self, info: Mapping[str, Any]) -> None:
        super().__init__()
        self.info = info

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        renamed = rows_as_in_source(message, self.info)
        if renamed != message:
            record.msg, record.args = renamed, ()
        return True


def _download_info(dataset_dir: str | Path) -> dict[str, Any]:
    """The download step's `download.json`; {} for a folder without one (a dataset saved
    by other means)."""
    try:
        info = json.loads((Path(dataset_dir) / INFO_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def refuse_non_text(dataset: Mapping[str, datasets.Dataset], roles: tuple[str, ...]) -> None:
    """Refuse a text role whose column holds lists or objects, naming the split, column and
    first such row (counted from 1): tokenizing their printed form (`['...']`) would train on
    brackets and quotes. Numbers are text enough (a CSV column of figures reads as int64)."""
    for split, table in dataset.items():
        for role in roles:
            feature = table.features[role]
            if isinstance(feature, datasets.Value):
                continue
            for row, value in enumerate(table[role], 1):
                if isinstance(value, list | dict):
                    raise DataError(
                        f"split {split!r}: column {role!r} (data.columns.{role}) must hold "
                        f"text, but row {row} holds an {json_type(value)}: {shown_value(value)}; "
                        f"map data.columns.{role} to a column of text"
                    )


def tokenizer_length(tokenizer: PreTrainedTokenizerBase) -> int:
    """The longest sequence the tokenizer says its model takes, capped at LENGTH_LIMIT: the
    max length a config leaves null."""
    return min(int(tokenizer.model_max_length), LENGTH_LIMIT)


def tokenize_split(
    table: datasets.Dataset,
    encode: Callable[..., Any],
    *,
    features: datasets.Features,
    cache_file: Path,
    num_proc: int | None,
    desc: str,
) -> datasets.Dataset:
    """One split tokenized by `encode(batch, indices)`, whose columns replace the split's.

    The cache file goes where the caller's work folder says, never beside the input artifact,
    and is never reused: a fresh fingerprint spares hashing the tokenizer `encode` holds."""
    return table.map(
        encode,
        batched=True,
        batch_size=BATCH_SIZE,
        with_indices=True,
        num_proc=num_proc,
        remove_columns=table.column_names,
        features=features,
        cache_file_name=str(cache_file),
        load_from_cache_file=False,
        new_fingerprint=uuid.uuid4().hex,
        desc=desc,
    )


@dataclass(frozen=True)
class LengthStats:
    """Token lengths before truncation, special tokens included."""

    p50: float
    p95: float
    p99: float
    max: int

    @classmethod
    def of(cls, lengths: np.ndarray) -> "LengthStats":
        p50, p95, p99 = np.percentile(lengths, [50, 95, 99])
        return cls(p50=float(p50), p95=float(p95), p99=float(p99), max=int(lengths.max()))


@dataclass(frozen=True)
class SplitRows:
    """A split's rows before preprocessing and the rows it dropped; it kept the rest."""

    rows_in: int
    rows_dropped: int

    @property
    def rows_out(self) -> int:
        return self.rows_in - self.rows_dropped


def with_rows_out(payload: dict[str, Any], splits: Mapping[str, SplitRows]) -> dict[str, Any]:
    """`payload` (a report's `asdict`, its splits under "splits") with each split's rows_out
    added after its own fields: a property, which `asdict` leaves out."""
    for split, stats in splits.items():
        payload["splits"][split]["rows_out"] = stats.rows_out
    return payload


def _load_dataset(dataset_dir: str | Path, task: Task) -> datasets.DatasetDict:
    """The download step's DatasetDict, checked for the task's columns."""
    loaded = load_saved_dataset(dataset_dir, made_by=Step.DOWNLOAD, error=DataError)
    for split, table in loaded.items():
        if task.role_set_among(table.column_names) is None:
            have = set(table.column_names)
            closest = min(task.role_sets, key=lambda roles: len(set(roles) - have))
            missing = [role for role in closest if role not in have]
            raise DataError(
                f"{dataset_dir}: split {split!r} has no column(s) {missing} (it has "
                f"{table.column_names}); the download step names columns by the task's roles, "
                f"{task.describe_role_sets()}"
            )
    return loaded
