"""The evaluation split of the preprocess step's output, checked for what scoring needs:
`read_split` for every task, and the rows of a task whose model writes text.

Every problem found here is the user's to fix (a missing split or column, no rows, no
references), so each raises EvaluationError naming the dataset, the split and the fix.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llm_pipeline.errors import EvaluationError
from llm_pipeline.output_files import Step
from llm_pipeline.tasks import DEFAULT_TASK, Task, get_task

__all__ = [
    "PREPROCESS_FIRST",
    "EvaluationExamples",
    "evaluation_split",
    "load_examples",
    "load_serving_examples",
    "read_split",
]

logger = logging.getLogger(__name__)

#: The hint for a column only the preprocess step writes.
PREPROCESS_FIRST = "run the preprocess step first"


@dataclass(frozen=True)
class EvaluationExamples:
    """The rows to score: the model's raw input texts (documents, prompts) and references,
    its input ids, and, for a perplexity, the labels (-100 on prompt tokens)."""

    split: str
    documents: list[str]
    references: list[str]
    input_ids: list[list[int]]
    labels: list[list[int]] | None = None


def evaluation_split(splits: list[str], split: str | None) -> str:
    """The split to score: the one asked for, else `test` when there is one, else
    `validation`."""
    return split or ("test" if "test" in splits else "validation")


def load_serving_examples(dataset_dir: str | os.PathLike[str], count: int, task: Task) -> list[Any]:
    """The first `count` evaluation rows as prediction instances a client would send
    (`Task.serving_column`, `Task.serving_example`): what the deploy step probes with."""
    from llm_pipeline.data.saved import load_saved_dataset

    loaded = load_saved_dataset(dataset_dir, made_by=Step.PREPROCESS, error=EvaluationError)
    table = loaded[evaluation_split(list(loaded), None)]
    if task.serving_column not in table.column_names:
        raise EvaluationError(
            f"{dataset_dir}: no {task.serving_column!r} column to probe a server with (it has "
            f"{table.column_names}); run the preprocess step on it again"
        )
    return [task.serving_example_of(row) for row in table.select(range(min(count, len(table))))]


def read_split(
    dataset_dir: str | os.PathLike[str],
    split: str | None,
    max_samples: int | None,
    needed: Mapping[str, str],
    *,
    references: str | None = None,
) -> tuple[str, Any, Any]:
    """The evaluation split of the preprocess step's output: its name, its first
    `max_samples` rows, and the whole saved dataset (its other splits). `needed` maps each
    column the task scores with to the hint its absence gets ("" for none); every problem
    raises EvaluationError naming the dataset and the split (`references`, the column the
    references are in, is said missing as such)."""
    from llm_pipeline.data.saved import load_saved_dataset

    loaded = load_saved_dataset(dataset_dir, made_by=Step.PREPROCESS, error=EvaluationError)
    name = evaluation_split(list(loaded), split)
    if name not in loaded:
        raise EvaluationError(
            f"{dataset_dir}: no split {name!r} to evaluate (it has {list(loaded)})"
        )
    table = loaded[name]
    for column, hint in needed.items():
        if column not in table.column_names:
            what = "references missing: " if column == references else ""
            raise EvaluationError(
                f"{what}split {name!r} of {dataset_dir} has no {column!r} column (it has "
                f"{table.column_names}){'; ' + hint if hint else ''}"
            )
    if max_samples is not None and max_samples < len(table):
        table = table.select(range(max_samples))
    if len(table) == 0:
        raise EvaluationError(f"split {name!r} of {dataset_dir} is empty: nothing to evaluate")
    return name, table, loaded


def load_examples(
    dataset_dir: str | os.PathLike[str],
    split: str | None,
    max_samples: int | None,
    task: Task | None = None,
    *,
    labels: bool = False,
) -> EvaluationExamples:
    """The evaluation rows of the preprocess step's output, checked for what scoring needs:
    the task's source and reference columns (`Task.source_column`, `reference_column`) and,
    with `labels`, the token labels a perplexity is taken on."""
    task = task or get_task(DEFAULT_TASK)
    source, reference = task.source_column, task.reference_column
    needed = {"input_ids": PREPROCESS_FIRST, source: "", reference: ""}
    if labels:
        needed["labels"] = PREPROCESS_FIRST
    name, table, _ = read_split(dataset_dir, split, max_samples, needed, references=reference)
    references = [str(text or "").strip() for text in table[reference]]
    blank = sum(not text for text in references)
    if blank == len(references):
        raise EvaluationError(
            f"references missing: every {reference!r} in split {name!r} of {dataset_dir} is empty"
        )
    if blank:
        logger.warning("%d of %d references are empty; they score 0", blank, len(references))
    return EvaluationExamples(
        split=name,
        documents=[str(text or "") for text in table[source]],
        references=references,
        input_ids=[list(ids) for ids in table["input_ids"]],
        labels=[list(ids) for ids in table["labels"]] if labels else None,
    )
