"""The names a saved dataset's JSON files give (split folders in `dataset_dict.json`, data
files in `state.json`) never point a reader outside the folder; nor do a remote folder's keys."""

import json
import re
import uuid
from pathlib import Path

import datasets
import fsspec
import pytest

from llm_pipeline.config import DataConfig
from llm_pipeline.data.saved import load_saved_dataset
from llm_pipeline.data.sources import load_source
from llm_pipeline.errors import EvaluationError, UnsafePathError
from llm_pipeline.output_files import Step

ROWS = {"document": ["a first document", "a second one"], "summary": ["first", "second"]}


def _saved(folder: Path) -> Path:
    """A DatasetDict with train and validation, as `save_to_disk` writes it."""
    split = datasets.Dataset.from_dict(ROWS)
    datasets.DatasetDict({"train": split, "validation": split}).save_to_disk(str(folder))
    return folder


def _edit(path: Path, change) -> None:
    payload = json.loads(path.read_text())
    change(payload)
    path.write_text(json.dumps(payload))


def test_a_split_name_leaving_the_folder_is_refused_not_read(tmp_path: Path) -> None:
    """Before: the split `../planted` was loaded from beside the folder."""
    source = _saved(tmp_path / "source")
    _saved(tmp_path / "planted")
    _edit(source / "dataset_dict.json", lambda d: d.update(splits=["train", "../planted/train"]))

    with pytest.raises(UnsafePathError) as refused:
        load_source(DataConfig(dataset=str(source)), tmp_path / "scratch")

    assert str(refused.value).startswith(
        f"data.dataset: {source}: split name in dataset_dict.json '../planted/train' has a "
        "'..' part"
    )


def test_a_data_file_name_leaving_its_split_is_refused(tmp_path: Path) -> None:
    source = _saved(tmp_path / "source")
    outside = next((tmp_path / "source" / "train").glob("*.arrow")).rename(tmp_path / "x.arrow")
    state = source / "train" / "state.json"
    _edit(state, lambda s: s["_data_files"][0].update(filename=f"../../{outside.name}"))

    with pytest.raises(
        UnsafePathError, match=re.escape("data file name in state.json '../../x.arrow'")
    ):
        load_saved_dataset(source, made_by=Step.PREPROCESS, error=EvaluationError)


def test_a_remote_saved_dataset_is_copied_with_its_keys_checked(tmp_path: Path) -> None:
    """`datasets.load_from_disk` would copy a remote folder down itself, joining each key to a
    local folder unchecked; the copy goes through `storage.local_copy` instead."""
    local = _saved(tmp_path / "local")
    fs = fsspec.filesystem("memory")
    root = f"/bucket-{uuid.uuid4().hex[:8]}/dataset"
    try:
        fs.put(str(local), root, recursive=True)
        loaded = load_saved_dataset(
            f"memory://{root}", made_by=Step.PREPROCESS, error=EvaluationError
        )
        assert loaded["validation"]["summary"] == ROWS["summary"]

        fs.pipe(f"{root}/train/../../ESCAPED.txt", b"x")  # beside the copy, not in it
        with pytest.raises(UnsafePathError, match=re.escape("object key 'train/../../")):
            load_saved_dataset(f"memory://{root}", made_by=Step.PREPROCESS, error=EvaluationError)
    finally:
        fs.rm(root.rsplit("/", 1)[0], recursive=True)
