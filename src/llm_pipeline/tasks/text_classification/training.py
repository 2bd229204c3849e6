"""What a classifier's training reads beside the tokenized rows: the label set preprocess
wrote, and whether rows are pairs of texts (the head's config carries both)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llm_pipeline.data.saved import load_saved_dataset
from llm_pipeline.errors import TrainError, UserError
from llm_pipeline.output_files import Step
from llm_pipeline.tasks.base import Task
from llm_pipeline.tasks.text_classification.labels import (
    TEXT_PAIR_ATTRIBUTE,
    LabelSet,
    read_label_set,
)
from llm_pipeline.train import training_data
from llm_pipeline.train.spec import WorkerSpec


def label_set(spec: WorkerSpec) -> LabelSet:
    """The label set preprocess wrote beside the dataset (a classifier's), read from this
    node's copy; call after `load_splits`, which makes it."""
    try:
        return read_label_set(training_data.copied_dataset(spec))
    except UserError as err:
        raise TrainError(f"dataset {spec.dataset_dir!r}: {err}") from err


def reads_text_pairs(spec: WorkerSpec, task: Task) -> bool:
    """Whether a classifier's rows are pairs of texts: preprocess keeps the text columns of
    the task's role set beside the ids (call after `load_splits`, which copies them)."""
    data = load_saved_dataset(
        training_data.copied_dataset(spec), made_by=Step.PREPROCESS, error=TrainError
    )
    columns = data["train"]
    roles = task.role_set_among(columns.column_names) or ()
    return len([role for role in roles if role != task.target_role]) > 1


def head_config(spec: WorkerSpec, label_set: LabelSet, task: Task) -> Mapping[str, Any]:
    """The config fields of the head: its labels, and whether it reads text pairs."""
    return label_set.model_config_fields() | {TEXT_PAIR_ATTRIBUTE: reads_text_pairs(spec, task)}
