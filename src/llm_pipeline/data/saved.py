"""Reading a DatasetDict that an earlier step saved: the one way every step does it."""

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import datasets
from datasets.fingerprint import get_temporary_cache_files_directory

from llm_pipeline.errors import UserError
from llm_pipeline.output_files import Step
from llm_pipeline.safe_paths import path_inside
from llm_pipeline.storage import check_output_complete, is_remote, local_copy, to_uri

#: The columns of preprocess's output that a model consumes, and all that training reads;
#: the rest is raw text for people and for evaluation.
MODEL_COLUMNS = ("input_ids", "attention_mask", "labels")
#: A packed split's (`data.packing`): no attention mask, which would stop transformers from
#: keeping the packed examples apart (tasks/instruction_tuning/packing.py).
PACKED_COLUMNS = ("input_ids", "labels", "position_ids")


def is_packed(column_names: Iterable[str]) -> bool:
    """Whether a split with these columns is packed (`data.packing`): rows of one length,
    whose `position_ids` keep their examples apart."""
    return "position_ids" in column_names


def model_columns(column_names: list[str]) -> tuple[str, ...]:
    """The columns a model takes from a split with these columns: packed or not."""
    return PACKED_COLUMNS if is_packed(column_names) else MODEL_COLUMNS


def load_saved_dataset(
    dataset_dir: str | os.PathLike[str], *, made_by: Step, error: type[UserError]
) -> datasets.DatasetDict:
    """The DatasetDict in `dataset_dir`, or `error` saying why it cannot be used.

    `made_by` names the step that should have written it, for the message. A folder on the
    `/gcs/` mount without its completion marker is refused (`storage.check_output_complete`).
    A remote folder is read from a local copy, and the names its JSON files give are checked
    (`saved_split_names`): `datasets` would join them to paths unchecked.
    """
    check_output_complete(dataset_dir, made_by=made_by, error=error)
    try:
        folder = _local_folder(dataset_dir)
        saved_split_names(folder, where=str(dataset_dir))
        loaded = datasets.load_from_disk(str(folder))
    except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise error(
            f"{dataset_dir}: not a dataset saved by the {made_by.display_name} step ({exc})"
        ) from None
    except IndexError:
        # `datasets` saves a split without rows as zero data files, then cannot load it.
        empty = _saved_without_rows(folder)
        if not empty:
            raise
        raise error(f"split {empty[0]!r} of {dataset_dir} is empty") from None
    if not isinstance(loaded, datasets.DatasetDict):
        raise error(
            f"{dataset_dir}: holds a single Dataset; expected the {made_by.display_name} step's "
            "DatasetDict (splits train, validation and optionally test)"
        )
    return loaded


def saved_split_names(folder: Path, *, where: str) -> list[str] | None:
    """The splits a `save_to_disk` folder's `dataset_dict.json` lists (None for a folder of one
    Dataset), each checked to name a folder inside it, and so every data file each split's
    `state.json` names (`safe_paths.path_inside`): a tampered bucket cannot point the reader
    at files elsewhere. `where` names the folder for messages. Malformed JSON raises
    ValueError, KeyError or TypeError for the caller to report.
    """
    index = folder / "dataset_dict.json"
    names: list[str] | None = None
    splits = [folder]
    if index.is_file():
        listed = json.loads(index.read_text(encoding="utf-8"))["splits"]
        if not isinstance(listed, list):
            raise TypeError(f"dataset_dict.json: splits must be a list, got {listed!r}")
        what = "split name in dataset_dict.json"
        splits = [path_inside(folder, name, where=where, what=what) for name in listed]
        names = [str(name) for name in listed]
    for split in splits:
        state = split / "state.json"
        if not state.is_file():
            continue
        saved = json.loads(state.read_text(encoding="utf-8"))
        if not isinstance(saved, dict):
            raise TypeError(f"{state.name}: expected an object, got {saved!r}"[:300])
        for entry in saved.get("_data_files") or []:
            name = entry.get("filename") if isinstance(entry, dict) else entry
            path_inside(split, name, where=where, what="data file name in state.json")
    return names


def _local_folder(dataset_dir: str | os.PathLike[str]) -> Path:
    """`dataset_dir` on local disk: a remote folder is copied down (its object names checked
    by `local_copy`; `datasets` would copy it without checking them), into `datasets`' own
    temporary folder, removed when the process ends."""
    uri = to_uri(str(dataset_dir))
    if not is_remote(uri):
        return Path(uri)
    return local_copy(uri, tempfile.mkdtemp(dir=get_temporary_cache_files_directory()))


def _saved_without_rows(folder: Path) -> list[str]:
    """Splits of a saved DatasetDict whose state lists no data files."""
    return [
        state.parent.name
        for state in sorted(folder.glob("*/state.json"))
        if not json.loads(state.read_text()).get("_data_files")
    ]
