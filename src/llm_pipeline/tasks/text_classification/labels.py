"""A classifier's label set, as preprocess resolves it and training, evaluation and the
model's config read it.

A label is a string or an integer, its name the string or the integer's decimal form; with
multi-label data a row's label is a list of them (`label_names` reads one row's). Preprocess
writes it into `preprocess.json` (key `label_set`) beside the tokenized data;
training turns it into the model's `id2label`/`label2id`/`problem_type`, so a trained
model folder carries it too (`LabelSet.from_model_config`).
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llm_pipeline.errors import DataError, shown_value
from llm_pipeline.output_files import LABEL_SET_KEY, PREPROCESS_REPORT_FILE

#: preprocess.json's key for the label set.
#: Where a trained model's config.json keeps the multi-label threshold (transformers keeps
#: unknown config attributes through save and load).
THRESHOLD_ATTRIBUTE = "classification_threshold"
#: Where a trained classifier's config.json says whether it read pairs of texts (a text and
#: a `text_pair`): its page offers a second text box only then. Absent (a folder saved
#: before it was recorded): not known, and the box is offered.
TEXT_PAIR_ATTRIBUTE = "classification_text_pair"


@dataclass(frozen=True)
class LabelSet:
    """The labels a classifier scores, in the order of its ids."""

    names: tuple[str, ...]
    multi_label: bool = False
    #: multi_label: a label is predicted when its sigmoid score reaches this.
    threshold: float = 0.5
    #: Rows of each label in the training split (for class weights and the majority
    #: baseline); empty when unknown (a model folder does not carry them).
    train_counts: dict[str, int] = field(default_factory=dict)

    @property
    def id2label(self) -> dict[int, str]:
        return dict(enumerate(self.names))

    @property
    def label2id(self) -> dict[str, int]:
        return {name: index for index, name in enumerate(self.names)}

    @property
    def problem_type(self) -> str:
        """transformers' name for the loss the head takes (cross-entropy or per-label BCE)."""
        return "multi_label_classification" if self.multi_label else "single_label_classification"

    def to_dict(self) -> dict[str, Any]:
        return {
            "names": list(self.names),
            "multi_label": self.multi_label,
            "threshold": self.threshold,
            "train_counts": self.train_counts,
        }

    @classmethod
    def from_dict(cls, payload: dict[str, Any]) -> "LabelSet":
        return cls(
            names=tuple(str(name) for name in payload["names"]),
            multi_label=bool(payload.get("multi_label", False)),
            threshold=float(payload.get("threshold", 0.5)),
            train_counts={str(k): int(v) for k, v in payload.get("train_counts", {}).items()},
        )

    def model_config_fields(self) -> dict[str, Any]:
        """What a classifier's `PretrainedConfig` gets from the label set."""
        return {
            "num_labels": len(self.names),
            "id2label": self.id2label,
            "label2id": self.label2id,
            "problem_type": self.problem_type,
            THRESHOLD_ATTRIBUTE: self.threshold,
        }

    @classmethod
    def from_model_config(cls, config: Any) -> "LabelSet":
        """The label set a loaded classifier's config carries (its `id2label` in id order)."""
        id2label = {int(k): str(v) for k, v in config.id2label.items()}
        return cls(
            names=tuple(id2label[i] for i in range(len(id2label))),
            multi_label=getattr(config, "problem_type", None) == "multi_label_classification",
            threshold=float(getattr(config, THRESHOLD_ATTRIBUTE, 0.5)),
        )


def read_label_set(dataset_dir: str | Path, report_file: str = PREPROCESS_REPORT_FILE) -> LabelSet:
    """The label set preprocess wrote beside a tokenized classification dataset."""
    path = Path(dataset_dir) / report_file
    try:
        payload = json.loads(path.read_text())
        return LabelSet.from_dict(payload[LABEL_SET_KEY])
    except FileNotFoundError:
        raise DataError(f"{path}: missing; the preprocess step writes it") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(
            f"{path}: no usable {LABEL_SET_KEY!r} ({exc}); it was not preprocessed for "
            "text classification"
        ) from None


def label_names(value: Any, multi_label: bool) -> tuple[list[str], str | None]:
    """The label names a row's label value holds, or what makes it unusable.

    A label is a string or an integer (its name is its decimal form); with `multi_label`
    a row's label is a list of them, empty included.
    """
    if multi_label:
        if not isinstance(value, list | tuple):
            csv = (
                " (a CSV cell cannot hold a list: use jsonl or parquet)"
                if isinstance(value, str)
                else ""
            )
            return [], (
                f"label is {shown_value(value, 60)}, not a list; with data.multi_label a row's "
                f"label is a list of labels{csv}"
            )
        names = []
        for item in value:
            name, problem = _scalar_name(item)
            if problem is not None:
                return [], f"label list holds {problem}"
            names.append(name)
        return list(dict.fromkeys(names)), None
    if isinstance(value, list | tuple):
        return [], (
            f"label is a list ({shown_value(value, 60)}); set data.multi_label to true for rows "
            "with several labels"
        )
    name, problem = _scalar_name(value)
    return ([name], None) if problem is None else ([], f"label is {problem}")


def _scalar_name(value: Any) -> tuple[str, str | None]:
    if isinstance(value, str):
        return (value, None) if value.strip() else ("", "empty")
    if isinstance(value, bool | int | np.integer):
        return str(value), None
    if value is None:
        return "", "missing (None)"
    what = f"{shown_value(value, 60)}" + (
        "" if isinstance(value, float) else f" ({type(value).__name__})"
    )
    return "", f"{what}; a label is a string or an integer"


def sorted_names(names: Iterable[str]) -> tuple[str, ...]:
    """Integers in numeric order (labels 0..K-1 keep their values as ids), else by name."""
    distinct = set(names)
    if distinct and all(_is_integer(name) for name in distinct):
        return tuple(sorted(distinct, key=int))
    return tuple(sorted(distinct))


def _is_integer(name: str) -> bool:
    try:
        return str(int(name)) == name
    except ValueError:
        return False
