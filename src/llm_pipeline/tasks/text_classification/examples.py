"""The evaluation split of a preprocessed classification dataset, checked for scoring.

The preprocess step writes token ids (`input_ids`, and `token_type_ids` for BERT pairs),
each row's label id (`labels`: an int, or a 0/1 row per label for multi-label), the raw text
(`text`, `text_pair`) and the label set beside the data (`preprocess.json`). Every problem
found here is the user's to fix, so each raises EvaluationError naming the dataset, the
split and the fix.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from llm_pipeline.errors import DataError, EvaluationError
from llm_pipeline.evaluation.examples import PREPROCESS_FIRST, read_split
from llm_pipeline.tasks.text_classification.labels import LabelSet, read_label_set

__all__ = ["ClassifierExamples", "load_classifier_examples"]


@dataclass(frozen=True)
class ClassifierExamples:
    """The rows to score: their texts (and second texts, for pairs), token ids, and the
    reference labels as ids (n) or, multi-label, a 0/1 indicator matrix (n × labels)."""

    split: str
    texts: list[str]
    text_pairs: list[str] | None
    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None
    references: np.ndarray
    labels: LabelSet
    #: The training split's rows per label, counted here when preprocess.json has none.
    train_counts: dict[str, int]


def load_classifier_examples(
    dataset_dir: str | os.PathLike[str], split: str | None, max_samples: int | None
) -> ClassifierExamples:
    """The evaluation rows of the preprocess step's output and the label set beside them."""
    needed = dict.fromkeys(("input_ids", "labels", "text"), PREPROCESS_FIRST)
    name, table, loaded = read_split(dataset_dir, split, max_samples, needed)
    try:
        labels = read_label_set(os.fspath(dataset_dir))
    except DataError as exc:
        raise EvaluationError(str(exc)) from None
    references = _references(table["labels"], labels, f"split {name!r} of {dataset_dir}")
    pairs = "text_pair" in table.column_names
    return ClassifierExamples(
        split=name,
        texts=[str(text or "") for text in table["text"]],
        text_pairs=[str(text or "") for text in table["text_pair"]] if pairs else None,
        input_ids=[list(ids) for ids in table["input_ids"]],
        token_type_ids=(
            [list(ids) for ids in table["token_type_ids"]]
            if "token_type_ids" in table.column_names
            else None
        ),
        references=references,
        labels=labels,
        train_counts=labels.train_counts or _count_train(loaded, labels),
    )


def _references(values: list[Any], labels: LabelSet, where: str) -> np.ndarray:
    """The `labels` column as ids (or an indicator matrix), checked against the label set."""
    k = len(labels.names)
    if labels.multi_label:
        rows = np.asarray(values, dtype=np.float64)
        if rows.ndim != 2 or rows.shape[1] != k or not np.isin(rows, (0.0, 1.0)).all():
            raise EvaluationError(
                f"{where}: multi-label `labels` must be a 0/1 list of {k} per row (one per "
                f"label of {list(labels.names)}); {PREPROCESS_FIRST} again"
            )
        return rows.astype(np.int64)
    ids = np.asarray(values)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise EvaluationError(
            f"{where}: `labels` must hold one label id per row, got {ids.dtype} values of "
            f"shape {ids.shape}; {PREPROCESS_FIRST} again"
        )
    outside = (ids < 0) | (ids >= k)
    if outside.any():
        raise EvaluationError(
            f"{where}: {int(outside.sum())} rows have label ids outside 0..{k - 1} (the "
            f"{k} labels {list(labels.names)}): labels the training split never saw; "
            f"{PREPROCESS_FIRST} again"
        )
    return ids.astype(np.int64)


def _count_train(loaded: Any, labels: LabelSet) -> dict[str, int]:
    """Rows per label in the training split, for a dataset whose label set lacks them."""
    if "train" not in loaded or "labels" not in loaded["train"].column_names:
        return {}
    values = np.asarray(loaded["train"]["labels"])
    counts = (
        values.sum(axis=0)
        if labels.multi_label
        else np.bincount(values, minlength=len(labels.names))
    )
    return {name: int(count) for name, count in zip(labels.names, counts, strict=False)}
