"""Reading a DatasetDict that an earlier step saved: the one way every step does it."""

import json
import os
from pathlib import Path

import datasets

from llm_pipeline.errors import UserError
from llm_pipeline.output_files import Step
from llm_pipeline.storage import check_output_complete, to_uri

#: The columns of preprocess's output that a model consumes, and all that training reads;
#: the rest is raw text for people and for evaluation.
MODEL_COLUMNS = ("input_ids", "attention_mask", "labels")
#: A packed split's (`data.packing`): no attention mask, which would stop transformers from
#: keeping the packed examples apart (data/packing.py).
PACKED_COLUMNS = ("input_ids", "labels", "position_ids")


def model_columns(column_names: list[str]) -> tuple[str, ...]:
    """The columns a model takes from a split with these columns: packed or not."""
    return PACKED_COLUMNS if "position_ids" in column_names else MODEL_COLUMNS


def load_saved_dataset(
    dataset_dir: str | os.PathLike[str], *, made_by: Step, error: type[UserError]
) -> datasets.DatasetDict:
    """The DatasetDict in `dataset_dir`, or `error` saying why it cannot be used.

    `made_by` names the step that should have written it, for the message. A folder on the
    `/gcs/` mount without its completion marker is refused (`storage.check_output_complete`).
    """
    check_output_complete(dataset_dir, made_by=made_by, error=error)
    folder = to_uri(str(dataset_dir))
    try:
        loaded = datasets.load_from_disk(folder)
    except FileNotFoundError as exc:
        raise error(
            f"{dataset_dir}: not a dataset saved by the {made_by.display_name} step ({exc})"
        ) from None
    except IndexError:
        # `datasets` saves a split without rows as zero data files, then cannot load it.
        empty = _saved_without_rows(Path(folder))
        if not empty:
            raise
        raise error(f"split {empty[0]!r} of {dataset_dir} is empty") from None
    if not isinstance(loaded, datasets.DatasetDict):
        raise error(
            f"{dataset_dir}: holds a single Dataset; expected the {made_by.display_name} step's "
            "DatasetDict (splits train, validation and optionally test)"
        )
    return loaded


def _saved_without_rows(folder: Path) -> list[str]:
    """Splits of a saved DatasetDict whose state lists no data files."""
    return [
        state.parent.name
        for state in sorted(folder.glob("*/state.json"))
        if not json.loads(state.read_text()).get("_data_files")
    ]
