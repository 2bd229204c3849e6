"""Evaluation rows that are also training rows, and train's repeated rows: the download step
counts them by what the model reads of a row, says so, and preprocess carries what it said
about each evaluation split to evaluate's report."""

import json
import logging
from pathlib import Path
from typing import Any

import datasets
import pytest

from llm_pipeline.config import ModelConfig
from llm_pipeline.data.download import download_dataset
from llm_pipeline.data.overlap import data_note, find_overlap
from llm_pipeline.data.preprocess import preprocess_dataset
from llm_pipeline.tasks import get_task

from ..offline_models import MINILM

TASK = get_task("summarization")
LEAK = (
    "the model is scored on rows it trained on, so the scores are inflated and the gate trusts them"
)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


@pytest.fixture
def leaky(tmp_path, source_rows, write) -> Path:
    """The source's own splits: train repeats 2 of its rows, validation holds 3 train
    documents (under other summaries) and test 1."""
    train = source_rows["train"]
    splits = {
        "train": [*train, {**train[0], "summary": "Again."}, train[1]],
        "validation": [
            *({**train[i], "summary": "Another summary."} for i in (5, 6, 7)),
            *source_rows["validation"][3:],
        ],
        "test": [train[9], *source_rows["test"][1:]],
    }
    for split, rows in splits.items():
        write(tmp_path / "source" / split, rows, "jsonl")
    return tmp_path / "source"


def test_the_download_step_says_which_evaluation_rows_are_train_rows(
    leaky, tmp_path, source_config, caplog
):
    with caplog.at_level(logging.WARNING, logger="llm_pipeline"):
        rows = download_dataset(source_config(leaky), TASK, tmp_path / "out")

    notes = [
        "train: 2 of 42 rows repeat the document of another train row; they are kept (a source "
        "may repeat rows to weigh them)",
        f"validation: 3 of its 8 rows have the document of a train row: {LEAK}; dedupe the "
        "source's splits, or leave validation out of the source and the download step carves "
        "it from train",
        f"test: 1 of its 6 rows has the document of a train row: {LEAK}; dedupe the source's "
        "splits, or set data.test_split to null to evaluate on validation",
    ]
    assert _warnings(caplog) == notes
    assert rows == {"train": 42, "validation": 8, "test": 6}  # repeats are kept
    info = json.loads((tmp_path / "out" / "download.json").read_text())
    assert list(info["data_notes"].values()) == notes


def test_a_carved_validation_can_share_rows_with_train_only_through_repeats(
    tmp_path, source_rows, write, source_config, caplog
):
    twice = [row for row in source_rows["train"][:20] for _ in range(2)]
    path = write(tmp_path / "mine", twice, "jsonl")

    with caplog.at_level(logging.WARNING, logger="llm_pipeline"):
        download_dataset(source_config(path), TASK, tmp_path / "out")

    saved = datasets.load_from_disk(str(tmp_path / "out"))
    train = set(saved["train"]["document"])
    shared = sum(document in train for document in saved["validation"]["document"])
    assert shared > 0
    assert (
        f"validation: {shared} of its 20 rows have the document of a train row, though "
        "validation was carved from train: train holds duplicate rows, and the carve put copies "
        "of one row on both sides; the model is scored on rows it trained on, so the scores are "
        "inflated and the gate trusts them: dedupe the source"
    ) in _warnings(caplog)


def test_clean_splits_say_nothing(tmp_path, source_rows, write, source_config, caplog):
    for split, rows in source_rows.items():
        write(tmp_path / "source" / split, rows, "jsonl")
    with caplog.at_level(logging.WARNING, logger="llm_pipeline"):
        download_dataset(source_config(tmp_path / "source"), TASK, tmp_path / "out")
    assert _warnings(caplog) == []
    assert json.loads((tmp_path / "out" / "download.json").read_text())["data_notes"] == {}


def test_preprocess_keeps_the_evaluation_splits_notes_for_evaluate(leaky, tmp_path, source_config):
    config = source_config(leaky, max_source_length=64)
    download_dataset(config, TASK, tmp_path / "downloaded")
    preprocess_dataset(
        dataset_dir=tmp_path / "downloaded",
        output_dir=tmp_path / "tokenized",
        data=config,
        model=ModelConfig(source=MINILM),
        task=TASK,
    )
    notes = {split: data_note(tmp_path / "tokenized", split) for split in ("train", "test")}
    leak = (
        f"test: 1 of its 6 rows has the document of a train row: {LEAK}; dedupe the source's "
        "splits, or set data.test_split to null to evaluate on validation"
    )
    assert notes == {"train": None, "test": leak}  # train is not evaluated
    # Evaluate scoring fewer rows (evaluate.max_samples) says what the count is over.
    assert data_note(tmp_path / "tokenized", "test", 6) == leak
    assert data_note(tmp_path / "tokenized", "test", 4) == (
        f"{leak} (counted over the 6 rows the download step saved; evaluate scored 4 of them)"
    )


def _shared(task: str, train: dict[str, list[Any]], other: dict[str, list[Any]]) -> int:
    splits = {"train": datasets.Dataset.from_dict(train), "test": datasets.Dataset.from_dict(other)}
    return find_overlap(splits, get_task(task), carved=False).shared["test"][0]


def test_each_task_knows_its_rows_by_what_its_model_reads():
    question = [{"role": "user", "content": "What is 2 + 2?"}]
    # A prompt is the one user turn of a chat; the answer is not what the model reads.
    chats = {"messages": [[*question, {"role": "assistant", "content": "4"}]]}
    prompts = {"prompt": ["What is 2 + 2?"], "response": ["Four."]}
    assert _shared("instruction_tuning", prompts, chats) == 1
    as_text = {"messages": [json.dumps(chats["messages"][0])]}  # a CSV cell's chat
    assert _shared("instruction_tuning", chats, as_text) == 1
    followed = [
        *chats["messages"][0],
        {"role": "user", "content": "And 3 + 3?"},
        {"role": "assistant", "content": "6"},
    ]
    assert _shared("instruction_tuning", chats, {"messages": [followed]}) == 0
    # Preference pairs: the prompt (or the chat before the answers), whatever the answers.
    pairs = {"prompt": ["What is 2 + 2?"], "chosen": ["4"], "rejected": ["5"]}
    other = {"messages": [question], "chosen": ["Four"], "rejected": ["Five"]}
    assert _shared("preference_tuning", pairs, other) == 1
    # A classifier's pair is both texts; a blank text is no row (preprocess drops it).
    train = {
        "text": ["a cat", "a cat", " "],
        "text_pair": ["sits", "runs", "x"],
        "label": [1, 0, 1],
    }
    test = {"text": ["a cat", " "], "text_pair": ["runs", "x"], "label": [1, 1]}
    assert _shared("text_classification", train, test) == 1
    documents = {"document": ["A.", "B."], "summary": ["a", "b"]}
    assert (
        _shared("summarization", documents, {"document": ["B.", "C."], "summary": ["x", "c"]}) == 1
    )
