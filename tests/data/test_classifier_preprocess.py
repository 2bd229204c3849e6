"""Preprocessing for a classifier: the label set, label ids, pairs, truncation, and the rows
left out (empty text, unusable labels, labels training never saw), counted by name."""

import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import datasets
import pytest
from transformers import AutoTokenizer

from llm_pipeline import components
from llm_pipeline.config import DataConfig, ModelConfig
from llm_pipeline.data import DataError
from llm_pipeline.data.preprocess import preprocess_dataset
from llm_pipeline.models.sources import resolve_model_path
from llm_pipeline.tasks import get_task
from llm_pipeline.tasks.text_classification.labels import LabelSet, read_label_set

from ..offline_models import MINILM

TASK = get_task("text_classification")
MODEL = ModelConfig(source=MINILM)

Rows = dict[str, list[Any]]


def _preprocess(
    tmp_path: Path, splits: dict[str, Rows], *, json_labels: bool = False, **fields: Any
) -> tuple[datasets.DatasetDict, dict[str, Any], Any]:
    """Save `splits` as the download step would (labels as JSON values with `json_labels`),
    preprocess them; (dataset, preprocess.json, report)."""
    source, out = tmp_path / "downloaded", tmp_path / "tokenized"

    def table(rows: Rows) -> datasets.Dataset:
        if not json_labels:
            return datasets.Dataset.from_dict(rows)
        features = {column: datasets.Value("string") for column in rows}
        features["label"] = datasets.Json()
        return datasets.Dataset.from_dict(rows, features=datasets.Features(features))

    datasets.DatasetDict({name: table(rows) for name, rows in splits.items()}).save_to_disk(
        str(source)
    )
    data = DataConfig(dataset="unused", columns={"text": "text", "label": "label"}, **fields)
    report = preprocess_dataset(
        dataset_dir=source, output_dir=out, data=data, model=MODEL, task=TASK
    )
    return (
        datasets.load_from_disk(str(out)),
        json.loads((out / "preprocess.json").read_text()),
        report,
    )


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return AutoTokenizer.from_pretrained(resolve_model_path(MINILM))


def test_string_labels_are_sorted_and_rows_carry_ids_and_names(tmp_path, tokenizer) -> None:
    train = {
        "text": ["a fine film", "a dull film", "the plot is thin", "great acting"],
        "label": ["pos", "neg", "neg", "pos"],
    }
    validation = {"text": ["slow start", "warm and funny"], "label": ["neg", "pos"]}
    out, payload, report = _preprocess(tmp_path, {"train": train, "validation": validation})
    labels = read_label_set(tmp_path / "tokenized")
    assert labels == LabelSet(names=("neg", "pos"), train_counts={"neg": 2, "pos": 2})
    assert payload["label_set"] == labels.to_dict()
    assert out["train"]["labels"] == [1, 0, 0, 1]
    assert out["train"]["label"] == train["label"]
    assert out["train"]["text"] == train["text"]
    assert out["train"].features["labels"] == datasets.Value("int64")
    expected = tokenizer(validation["text"])
    for column in ("input_ids", "attention_mask", "token_type_ids"):
        assert out["validation"][column] == expected[column]
    assert payload["splits"]["validation"]["label_counts"] == {"neg": 1, "pos": 1}
    assert report.metrics()["train_majority_share"] == 0.5


def test_integer_labels_keep_their_values_as_ids(tmp_path) -> None:
    train = {"text": ["one", "two", "three", "four"], "label": [2, 0, 1, 2]}
    out, payload, _ = _preprocess(tmp_path, {"train": train})
    assert payload["label_set"]["names"] == ["0", "1", "2"]
    assert out["train"]["labels"] == [2, 0, 1, 2]
    assert out["train"]["label"] == ["2", "0", "1", "2"]


def test_integer_labels_outside_zero_to_k_are_sorted_as_numbers(tmp_path) -> None:
    train = {"text": ["one", "two", "three", "four"], "label": [10, 2, 5, 10]}
    out, payload, _ = _preprocess(tmp_path, {"train": train})
    assert payload["label_set"]["names"] == ["2", "5", "10"]
    assert out["train"]["labels"] == [2, 0, 1, 2]


def test_multi_label_rows_become_multi_hot(tmp_path) -> None:
    train = {
        "text": ["plot and pace", "just the plot", "nothing to say", "acting"],
        "label": [["plot", "pace"], ["plot"], [], ["acting"]],
    }
    out, _, _ = _preprocess(tmp_path, {"train": train}, multi_label=True, threshold=0.3)
    assert read_label_set(tmp_path / "tokenized") == LabelSet(
        names=("acting", "pace", "plot"),
        multi_label=True,
        threshold=0.3,
        train_counts={"acting": 1, "pace": 1, "plot": 2},
    )
    assert out["train"]["labels"] == [[0, 1, 1], [0, 0, 1], [0, 0, 0], [1, 0, 0]]
    assert out["train"].features["labels"] == datasets.List(datasets.Value("float32"))
    assert out["train"]["label"] == [["pace", "plot"], ["plot"], [], ["acting"]]


def test_pairs_are_tokenized_as_pairs_and_cut_longest_first(tmp_path, tokenizer) -> None:
    question = "is the plot any good"
    passage = " ".join(["the plot wanders for an hour before anything happens"] * 5)
    train = {
        "text": [question, "short", question],
        "text_pair": [passage, "also short", "a good plot"],
        "label": ["no", "yes", "yes"],
    }
    out, payload, _ = _preprocess(tmp_path, {"train": train}, max_length=24)
    expected = tokenizer(
        train["text"], train["text_pair"], truncation="longest_first", max_length=24
    )
    assert out["train"]["input_ids"] == expected["input_ids"]
    assert out["train"]["token_type_ids"] == expected["token_type_ids"]
    assert len(out["train"]["input_ids"][0]) == 24
    # Longest first: the question keeps all its words, the passage is cut.
    first = tokenizer.decode(out["train"]["input_ids"][0])
    assert first.startswith(f"[CLS] {question} [SEP] the plot wanders")
    assert out["train"]["text_pair"] == train["text_pair"]
    stats = payload["splits"]["train"]
    assert stats["tokens"]["max"] == len(tokenizer(question, passage)["input_ids"])
    assert stats["truncated"] == pytest.approx(1 / 3)
    assert payload["max_length"] == 24 and payload["max_length_from"] == "config"


def test_a_null_max_length_is_the_tokenizers(tmp_path, tokenizer) -> None:
    train = {"text": ["one", "two"], "label": ["a", "b"]}
    _, payload, _ = _preprocess(tmp_path, {"train": train})
    assert payload["max_length"] == min(tokenizer.model_max_length, 1024)
    assert payload["max_length_from"] == "tokenizer"


def test_labels_training_never_saw_are_left_out_and_counted_by_name(tmp_path, caplog) -> None:
    train = {"text": ["good", "bad", "fine"], "label": ["pos", "neg", "pos"]}
    test = {
        "text": ["meh", "so so", "great", "odd", "fine"],
        "label": ["mixed", "mixed", "pos", "weird", "neg"],
    }
    with caplog.at_level(logging.INFO, logger="llm_pipeline.data.preprocess"):
        out, payload, report = _preprocess(tmp_path, {"train": train, "test": test})
    assert out["test"]["text"] == ["great", "fine"]
    stats = payload["splits"]["test"]
    assert stats["unseen_labels"] == {"mixed": 2, "weird": 1}
    assert stats["rows_dropped"] == {"empty_text": 0, "malformed_label": 0, "unseen_label": 3}
    assert stats["rows_in"] == 5 and stats["rows_out"] == 2
    assert (
        "test: 3 of 5 rows left out: labels the training split never has: 'mixed' (2), 'weird' (1)"
    ) in caplog.messages
    assert report.metrics()["test_rows_dropped_unseen_label"] == 3


def test_data_labels_fix_the_order_and_leave_out_the_rest(tmp_path, caplog) -> None:
    train = {"text": ["good", "bad", "fine", "odd"], "label": ["pos", "neg", "pos", "weird"]}
    with caplog.at_level(logging.WARNING, logger="llm_pipeline.data.preprocess"):
        out, payload, _ = _preprocess(tmp_path, {"train": train}, labels=["pos", "neg", "mixed"])
    assert payload["label_set"]["names"] == ["pos", "neg", "mixed"]
    assert payload["label_set"]["train_counts"] == {"pos": 2, "neg": 1, "mixed": 0}
    assert payload["labels_from"] == "config"
    assert out["train"]["labels"] == [0, 1, 0]
    assert "train: 1 of 4 rows left out: labels outside data.labels: 'weird' (1)" in (
        caplog.messages
    )


def test_integer_data_labels_match_integer_rows(tmp_path) -> None:
    train = {"text": ["one", "two", "three"], "label": [1, 0, 7]}
    out, payload, _ = _preprocess(tmp_path, {"train": train}, labels=[0, 1])
    assert payload["label_set"]["names"] == ["0", "1"]
    assert out["train"]["labels"] == [1, 0]
    assert payload["splits"]["train"]["unseen_labels"] == {"7": 1}


def test_a_training_split_with_one_label_is_refused(tmp_path) -> None:
    train = {"text": ["good", "fine", "nice", "  "], "label": ["pos", "pos", "pos", "neg"]}
    with pytest.raises(DataError) as caught:
        _preprocess(tmp_path, {"train": train})
    message = str(caught.value)
    assert "split 'train': all 3 of its usable rows have label 'pos'" in message
    assert "at least two labels" in message and "data.columns.label" in message
    assert not (tmp_path / "tokenized").exists()


def test_multi_label_training_without_two_labels_is_refused(tmp_path) -> None:
    train = {"text": ["good", "fine"], "label": [[], []]}
    with pytest.raises(DataError, match="none of its 2 usable rows has a label"):
        _preprocess(tmp_path, {"train": train}, multi_label=True)


def test_empty_texts_are_left_out_and_counted(tmp_path, caplog) -> None:
    train = {"text": ["good", "", "bad", None, "  \n"], "label": ["pos", "neg", "neg", "pos", "x"]}
    with caplog.at_level(logging.WARNING, logger="llm_pipeline.data.preprocess"):
        out, payload, _ = _preprocess(tmp_path, {"train": train})
    assert out["train"]["text"] == ["good", "bad"]
    stats = payload["splits"]["train"]
    assert stats["rows_dropped"]["empty_text"] == 3
    assert stats["first_dropped"] == {"empty_text": "row 2: text is empty"}
    # A label only an empty text has is not in the label set.
    assert payload["label_set"]["names"] == ["neg", "pos"]
    assert "train: 3 of 5 rows left out: empty text (first: row 2: text is empty)" in (
        caplog.messages
    )


def test_an_empty_text_pair_is_an_empty_text(tmp_path) -> None:
    train = {"text": ["q1", "q2", "q3"], "text_pair": ["p1", " ", "p3"], "label": [0, 1, 1]}
    _, payload, _ = _preprocess(tmp_path, {"train": train})
    assert payload["splits"]["train"]["first_dropped"] == {
        "empty_text": "row 2: text_pair is empty"
    }


@pytest.mark.parametrize(
    ("value", "multi_label", "problem"),
    [
        (None, False, "label is missing (None)"),
        (0.5, False, "label is 0.5; a label is a string or an integer"),
        ({"name": "a"}, False, "label is {'name': 'a'} (dict); a label is a string or an integer"),
        ("", False, "label is empty"),
        (["a"], False, "label is a list (['a']); set data.multi_label to true"),
        ("a", True, "label is 'a', not a list; with data.multi_label a row's label is a list"),
        (["a", None], True, "label list holds missing (None)"),
    ],
)
def test_unusable_label_values_are_left_out_naming_the_first(
    tmp_path, value: Any, multi_label: bool, problem: str
) -> None:
    usable = [["a"], ["b"]] if multi_label else ["a", "b"]
    # A column of JSON values holds any mix of types, as the json builder reads one.
    rows = {"text": ["one", "two", "three", "four"], "label": [*usable, value, value]}
    _, payload, _ = _preprocess(
        tmp_path, {"train": rows}, json_labels=True, multi_label=multi_label
    )
    stats = payload["splits"]["train"]
    assert stats["first_dropped"]["malformed_label"].startswith(f"row 3: {problem}")
    assert stats["rows_dropped"]["malformed_label"] == 2 and stats["rows_out"] == 2


def test_a_split_with_no_usable_rows_is_refused_naming_it(tmp_path) -> None:
    train = {"text": ["good", "bad"], "label": ["pos", "neg"]}
    test = {"text": ["meh", ""], "label": ["mixed", "pos"]}
    with pytest.raises(DataError) as caught:
        _preprocess(tmp_path, {"train": train, "test": test})
    assert str(caught.value) == (
        "split 'test': none of its 2 rows is usable: 1 empty text (first: row 2: text is "
        "empty); 1 labels outside the label set (first: row 1: label 'mixed'); set "
        "data.test_split to null to evaluate on validation instead"
    )


def test_mixed_integer_and_string_labels_are_names(tmp_path) -> None:
    rows = {"text": ["one", "two", "three"], "label": [1, "spam", True]}
    out, payload, _ = _preprocess(tmp_path, {"train": rows}, json_labels=True)
    assert payload["label_set"]["names"] == ["1", "True", "spam"]
    assert out["train"]["label"] == ["1", "spam", "True"]


def test_the_preprocess_step_logs_the_classification_figures(tmp_path) -> None:
    class Metrics:
        def __init__(self) -> None:
            self.logged: dict[str, float] = {}

        def log_metric(self, metric: str, value: float) -> None:
            self.logged[metric] = value

    source = tmp_path / "downloaded"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"text": ["good", "bad", ""], "label": [1, 0, 1]}),
            "test": datasets.Dataset.from_dict({"text": ["fine", "odd"], "label": [1, 2]}),
        }
    ).save_to_disk(str(source))
    metrics = Metrics()
    data = DataConfig(dataset="unused", columns={"text": "text", "label": "label"})
    components.preprocess.python_func(
        task="text_classification",
        data=data.model_dump_json(),
        model=MODEL.model_dump_json(),
        dataset=SimpleNamespace(path=str(source)),
        tokenized=SimpleNamespace(path=str(tmp_path / "tokenized")),
        metrics=metrics,
    )
    assert read_label_set(tmp_path / "tokenized").names == ("0", "1")
    logged = metrics.logged
    assert logged["num_labels"] == 2 and logged["train_majority_share"] == 0.5
    assert logged["train_rows_dropped_empty_text"] == 1
    assert logged["test_rows_dropped_unseen_label"] == 1
    assert logged["test_tokens_max"] == 3  # [CLS] fine [SEP]


def test_one_label_of_data_labels_in_training_is_refused_naming_the_rest(tmp_path) -> None:
    # data.labels misspells a label ('negative' for 'neg'): the message names what was left
    # out, so the user sees the spelling their rows use.
    train = {"text": ["good", "fine", "odd", "bad"], "label": ["pos", "pos", "neg", "neg"]}
    with pytest.raises(DataError) as caught:
        _preprocess(tmp_path, {"train": train}, labels=["pos", "negative"])
    assert str(caught.value).startswith(
        "split 'train': all 2 of its usable rows have label 'pos' (rows with labels outside "
        "data.labels ['pos', 'negative'] left out: 'neg' (2))"
    )


def test_data_labels_none_of_which_training_has_are_refused_naming_its_labels(
    tmp_path,
) -> None:
    train = {"text": ["good", "fine", "odd"], "label": ["pos", "pos", "neg"]}
    with pytest.raises(DataError) as caught:
        _preprocess(tmp_path, {"train": train}, labels=["positive", "negative"])
    assert str(caught.value).startswith(
        "split 'train': none of its usable rows has a label in data.labels (rows with labels "
        "outside data.labels ['positive', 'negative'] left out: 'pos' (2), 'neg' (1))"
    )


def test_a_text_that_is_an_object_is_refused_naming_its_row(tmp_path) -> None:
    # A JSON column of mixed values: the object was tokenized as its printed form.
    train = {"text": ["good", {"body": "bad"}, "fine"], "label": ["pos", "neg", "pos"]}
    features = datasets.Features({"text": datasets.Json(), "label": datasets.Value("string")})
    source = tmp_path / "downloaded"
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict(train, features=features)}
    ).save_to_disk(str(source))
    data = DataConfig(dataset="unused", columns={"text": "text", "label": "label"})
    with pytest.raises(DataError) as caught:
        preprocess_dataset(
            dataset_dir=source, output_dir=tmp_path / "out", data=data, model=MODEL, task=TASK
        )
    assert str(caught.value) == (
        "split 'train': column 'text' (data.columns.text) must hold text, but row 2 holds an "
        "object: {'body': 'bad'}; map data.columns.text to a column of text"
    )


def test_a_max_length_without_room_for_text_is_refused(tmp_path) -> None:
    train = {"text": ["q1", "q2"], "text_pair": ["p1", "p2"], "label": [0, 1]}
    with pytest.raises(DataError) as caught:
        _preprocess(tmp_path, {"train": train}, max_length=3)
    assert str(caught.value) == (
        "data.max_length: 3 leaves no room for text; the tokenizer adds 3 special token(s) to "
        "every pair of texts"
    )
