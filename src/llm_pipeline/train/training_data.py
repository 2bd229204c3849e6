"""The tokenized splits a training process reads: copied to local disk once per node, loaded
with the one loader every step uses (`data.saved`), cut to the columns the model takes."""

from __future__ import annotations

import os
from pathlib import Path

import torch.distributed as dist
from datasets import Dataset

from llm_pipeline.data.saved import load_saved_dataset, model_columns
from llm_pipeline.storage import check_output_complete, local_copy
from llm_pipeline.train.errors import TrainError
from llm_pipeline.train.spec import WorkerSpec


def load_splits(spec: WorkerSpec) -> tuple[Dataset, Dataset | None]:
    """The tokenized train and validation splits, reduced to the model's columns."""
    data = load_saved_dataset(_local_dataset(spec), made_by="preprocess", error=TrainError)
    if "train" not in data:
        raise TrainError(f"dataset {spec.dataset_dir!r}: needs a 'train' split, found {list(data)}")
    splits = {name: data[name] for name in ("train", "validation") if name in data}
    for name, split in splits.items():
        missing = [c for c in model_columns(split.column_names) if c not in split.column_names]
        if missing:
            raise TrainError(
                f"dataset {spec.dataset_dir!r}: split {name!r} lacks {missing}; run the "
                "preprocess step on it first"
            )
    # A packed train split (data.packing) has position ids and no attention mask.
    train = splits["train"].select_columns(list(model_columns(splits["train"].column_names)))
    validation = splits.get("validation")
    if validation is None:
        return train, None
    return train, validation.select_columns(list(model_columns(validation.column_names)))


def _local_dataset(spec: WorkerSpec) -> Path:
    """The dataset on local disk: a remote one, or one on the /gcs/ mount, is copied once per
    node, by its first process, so the ranks do not each read it from Cloud Storage."""
    note = Path(spec.work_dir) / "dataset.path"
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        check_output_complete(spec.dataset_dir, made_by="preprocess", error=TrainError)
        try:
            folder = local_copy(spec.dataset_dir, Path(spec.work_dir) / "dataset")
        except FileNotFoundError as err:
            raise TrainError(f"dataset {spec.dataset_dir!r}: {err}") from err
        note.write_text(str(folder), encoding="utf-8")
    dist.barrier()
    return Path(note.read_text(encoding="utf-8"))
