"""The download step keeps a classifier's label column usable: a hub `ClassLabel` becomes its
names, lists stay lists, integers stay integers (not "1.0"), and columns are named by role."""

import json
from pathlib import Path

import datasets
import pandas as pd
import pytest

from llm_pipeline.config import DataConfig
from llm_pipeline.data import DataError
from llm_pipeline.data.download import download_dataset
from llm_pipeline.tasks import get_task

TASK = get_task("text_classification")
TEXTS = ["a fine film", "a dull film", "the plot is thin", "great acting", "slow start"]


def _download(source: Path, tmp_path: Path, **fields) -> datasets.DatasetDict:
    config = DataConfig(dataset=str(source), validation_fraction=0.4, seed=0, **fields)
    download_dataset(config, TASK, tmp_path / "out")
    return datasets.load_from_disk(str(tmp_path / "out"))


def test_a_class_label_column_becomes_its_names(tmp_path: Path) -> None:
    # A save_to_disk folder carries its features as a hub dataset does (GLUE, IMDB): ids
    # with names, and -1 on the rows of an unlabelled test split.
    features = datasets.Features(
        {
            "sentence": datasets.Value("string"),
            "idx": datasets.Value("int32"),
            "sentiment": datasets.ClassLabel(names=["negative", "positive"]),
        }
    )
    rows = {"sentence": TEXTS, "idx": list(range(5)), "sentiment": [1, 0, 0, 1, 0]}
    test = {"sentence": TEXTS[:2], "idx": [0, 1], "sentiment": [-1, -1]}
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict(rows, features=features),
            "validation": datasets.Dataset.from_dict(rows, features=features),
            "test": datasets.Dataset.from_dict(test, features=features),
        }
    ).save_to_disk(str(tmp_path / "source"))
    out = _download(
        tmp_path / "source", tmp_path, columns={"text": "sentence", "label": "sentiment"}
    )
    assert out["train"].column_names == ["text", "label"]
    assert out["train"].features["label"] == datasets.Value("string")
    assert out["train"]["label"] == ["positive", "negative", "negative", "positive", "negative"]
    assert out["train"]["text"] == TEXTS
    assert out["test"]["label"] == [None, None]


def test_a_list_of_class_labels_becomes_lists_of_names(tmp_path: Path) -> None:
    features = datasets.Features(
        {
            "text": datasets.Value("string"),
            "topics": datasets.List(datasets.ClassLabel(names=["plot", "acting", "pace"])),
        }
    )
    topics = [[0], [0, 2], [0], [1], []]
    datasets.Dataset.from_dict({"text": TEXTS, "topics": topics}, features=features).save_to_disk(
        str(tmp_path / "source")
    )
    out = _download(
        tmp_path / "source", tmp_path, columns={"text": "text", "label": "topics"}, test_split=None
    )
    both = {
        text: label
        for split in out.values()
        for text, label in zip(split["text"], split["label"], strict=True)
    }
    assert both == {
        "a fine film": ["plot"],
        "a dull film": ["plot", "pace"],
        "the plot is thin": ["plot"],
        "great acting": ["acting"],
        "slow start": [],
    }


def test_integer_labels_with_a_missing_cell_stay_integers(tmp_path: Path) -> None:
    # pandas reads an integer column with an empty cell as floats: 1.0, NaN, 2.0.
    folder = tmp_path / "source"
    folder.mkdir()
    labels = [1, None, 2, 0, 1]
    pd.DataFrame({"review": TEXTS, "stars": labels}).to_csv(folder / "train.csv", index=False)
    pd.DataFrame({"review": TEXTS, "stars": [0.5, 1, 2, 0, 1]}).to_csv(
        folder / "validation.csv", index=False
    )
    out = _download(folder, tmp_path, columns={"text": "review", "label": "stars"})
    assert out["train"].features["label"] == datasets.Value("int64")
    assert out["train"]["label"] == labels
    # Not whole numbers: left as they are, for preprocess to refuse row by row.
    assert out["validation"]["label"] == [0.5, 1.0, 2.0, 0.0, 1.0]


def test_list_labels_and_text_pairs_from_jsonl(tmp_path: Path) -> None:
    folder = tmp_path / "source"
    folder.mkdir()
    rows = [
        {"q": text, "passage": text.upper(), "tags": ["a", "b"][: i % 3], "other": i}
        for i, text in enumerate(TEXTS)
    ]
    for split in ("train", "validation"):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    columns = {"text": "q", "text_pair": "passage", "label": "tags"}
    out = _download(folder, tmp_path, columns=columns)
    assert out["validation"].column_names == ["text", "text_pair", "label"]
    assert out["validation"]["label"] == [[], ["a"], ["a", "b"], [], ["a"]]
    assert out["validation"]["text_pair"] == [text.upper() for text in TEXTS]


def test_the_columns_must_map_text_and_label(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"\['label', 'text'\] or \['label', 'text', 'text_pair'\]"):
        download_dataset(
            DataConfig(dataset=str(tmp_path), columns={"text": "a", "target": "b"}),
            TASK,
            tmp_path / "out",
        )
