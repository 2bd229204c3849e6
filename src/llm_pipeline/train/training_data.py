"""The tokenized splits a training process reads: copied to local disk once per node, loaded
with the one loader every step uses (`data.saved`), cut to the columns the model takes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch.distributed as dist
from datasets import Dataset

from llm_pipeline.data.saved import load_saved_dataset, model_columns
from llm_pipeline.errors import TrainError
from llm_pipeline.output_files import PREPROCESS_REPORT_FILE, Step
from llm_pipeline.storage import check_output_complete, local_copy
from llm_pipeline.tasks import get_task
from llm_pipeline.train.spec import WorkerSpec

#: The file in the run's work folder that says where this node's copy of the dataset is.
_NOTE = "dataset.path"


#: What a tokenizer makes for text pairs beside the ids (BERT's segment ids), kept for the
#: models that read it.
TOKEN_TYPES = "token_type_ids"


def load_splits(spec: WorkerSpec) -> tuple[Dataset, Dataset | None]:
    """The tokenized train and validation splits, reduced to the model's columns (with
    token type ids where preprocess made them), or to the task's `training_columns`."""
    data = load_saved_dataset(_local_dataset(spec), made_by=Step.PREPROCESS, error=TrainError)
    if "train" not in data:
        raise TrainError(f"dataset {spec.dataset_dir!r}: needs a 'train' split, found {list(data)}")
    splits = {name: data[name] for name in ("train", "validation") if name in data}
    columns = get_task(spec.task).training_columns
    for name, split in splits.items():
        needed = columns or model_columns(split.column_names)
        missing = [c for c in needed if c not in split.column_names]
        if missing:
            raise TrainError(
                f"dataset {spec.dataset_dir!r}: split {name!r} lacks {missing}; run the "
                "preprocess step on it first"
            )
    if columns is not None:
        kept = {name: split.select_columns(list(columns)) for name, split in splits.items()}
        return kept["train"], kept.get("validation")
    # A packed train split (data.packing) has position ids and no attention mask.
    train = _model_inputs(splits["train"])
    validation = splits.get("validation")
    if validation is None:
        return train, None
    return train, _model_inputs(validation)


def chat_template(spec: WorkerSpec) -> str | None:
    """The chat template preprocess rendered the chats with (a causal LM's dataset), or None
    (call after `load_splits`, which copies the dataset)."""
    report = copied_dataset(spec) / PREPROCESS_REPORT_FILE
    try:
        template = json.loads(report.read_text(encoding="utf-8")).get("chat_template")
    except (OSError, ValueError, AttributeError):
        return None
    return template if isinstance(template, str) else None


def _model_inputs(split: Dataset) -> Dataset:
    names = list(model_columns(split.column_names))
    if TOKEN_TYPES in split.column_names:
        names.append(TOKEN_TYPES)
    return split.select_columns(names)


def copied_dataset(spec: WorkerSpec) -> Path:
    """This node's copy of the tokenized dataset (made by `load_splits`)."""
    return Path((Path(spec.work_dir) / _NOTE).read_text(encoding="utf-8"))


def _local_dataset(spec: WorkerSpec) -> Path:
    """The dataset on local disk: a remote one, or one on the /gcs/ mount, is copied once per
    node, by its first process, so the ranks do not each read it from Cloud Storage."""
    note = Path(spec.work_dir) / _NOTE
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        check_output_complete(spec.dataset_dir, made_by=Step.PREPROCESS, error=TrainError)
        try:
            folder = local_copy(spec.dataset_dir, Path(spec.work_dir) / "dataset")
        except FileNotFoundError as err:
            raise TrainError(f"dataset {spec.dataset_dir!r}: {err}") from err
        note.write_text(str(folder), encoding="utf-8")
    dist.barrier()
    return copied_dataset(spec)
