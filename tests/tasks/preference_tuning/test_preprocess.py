"""Preference rows through the real download and preprocess drivers: a user's columns mapped
by `data.columns`, bad rows refused, counted and named in `preprocess.json`, the metrics and
the console, and a split with no usable pair an error naming it.

The word-level tokenizer of tests/data (one word, one token) keeps the expected lengths
countable by hand.
"""

import json
import logging
from pathlib import Path
from typing import Any

import datasets
import pytest

from llm_pipeline.config import DataConfig, ModelConfig
from llm_pipeline.data.download import download_dataset
from llm_pipeline.data.preprocess import preprocess_dataset
from llm_pipeline.errors import DataError
from llm_pipeline.evaluation.examples import load_serving_examples
from llm_pipeline.output_files import PREPROCESS_REPORT_FILE
from llm_pipeline.tasks import get_task
from llm_pipeline.tasks.preference_tuning.pairs import ANSWERS_TOO_LONG, SAME_ANSWERS, UNUSABLE

from ...data.word_tokenizer import CHATML, ids, load, word_tokenizer

TASK = get_task("preference_tuning")
#: A user's own column names, mapped onto the task's roles.
COLUMNS = {"prompt": "question", "chosen": "good", "rejected": "bad"}
MESSAGES = {"messages": "messages", "chosen": "good", "rejected": "bad"}
GOOD = {"question": "what is two plus two ?", "good": "four .", "bad": "six ."}


def _write(folder: Path, splits: dict[str, list[dict[str, Any]]]) -> Path:
    folder.mkdir(parents=True)
    for split, rows in splits.items():
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def _run(
    tmp_path: Path,
    splits: dict[str, list[dict[str, Any]]],
    *,
    template: str | None = None,
    columns: dict[str, str] = COLUMNS,
    **data: Any,
) -> tuple[Any, datasets.DatasetDict]:
    """Download (maps the columns) then preprocess, as the pipeline's two steps do."""
    source = str(_write(tmp_path / "source", splits))
    config = DataConfig(dataset=source, columns=columns, **data)
    model = ModelConfig(
        architecture={"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 1},
        tokenizer=str(word_tokenizer(tmp_path / "tokenizer", chat_template=template)),
    )
    download_dataset(config, TASK, tmp_path / "dataset")
    result = preprocess_dataset(
        dataset_dir=tmp_path / "dataset",
        output_dir=tmp_path / "tokenized",
        data=config,
        model=model,
        task=TASK,
    )
    return result, datasets.load_from_disk(str(tmp_path / "tokenized"))


def test_bad_rows_are_refused_counted_and_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    train = [
        GOOD,
        {"question": "what is two ?", "good": "four .", "bad": " four . "},  # row 2: same
        {"question": "what is two ?", "good": "four ."},  # row 3: no rejected
        GOOD,
        {"question": "two", "good": " ".join(["four"] * 20), "bad": "six ."},  # row 5: too long
        {"question": "", "good": "four .", "bad": "six ."},  # row 6: empty prompt
        # row 7: 12 prompt tokens in the plain layout; with 3-token answers, 2 must go.
        {"question": "what is two plus three plus four ?", "good": "six .", "bad": "four ."},
    ]
    with caplog.at_level(logging.INFO, logger="llm_pipeline.data.preprocess"):
        report, out = _run(tmp_path, {"train": train, "validation": [GOOD, GOOD]}, max_length=16)

    stats = report.splits["train"]
    assert (stats.rows_in, stats.rows_out) == (7, 3)
    assert stats.refused == {UNUSABLE: 2, SAME_ANSWERS: 1, ANSWERS_TOO_LONG: 1}
    assert stats.refused_rows == {UNUSABLE: [3, 6], SAME_ANSWERS: [2], ANSWERS_TOO_LONG: [5]}
    assert stats.first_problem[UNUSABLE] == "row 3: rejected: missing"
    assert (stats.prompts_cut, stats.prompt_tokens_dropped) == (1, 2)
    assert report.splits["validation"].rows_out == 2
    # What the preprocess step logs as KFP metrics.
    metrics = report.metrics()
    assert metrics["train_rows_out"] == 3
    assert metrics[f"train_refused_{UNUSABLE}"] == 2
    assert metrics["train_prompts_cut"] == 1
    # preprocess.json beside the dataset says the same.
    written = json.loads((tmp_path / "tokenized" / PREPROCESS_REPORT_FILE).read_text())
    assert written["max_length"] == 16 and written["max_length_from"] == "config"
    assert written["chat_template_from"] == "default"
    assert written["splits"]["train"]["refused_rows"][SAME_ANSWERS] == [2]
    assert written["splits"]["train"]["rows_out"] == 3
    # The console names the counts, the rows and the first problem, as a warning (preprocess's:
    # the download step's own warnings, of these repeated prompts, are not this line).
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name == "llm_pipeline.data.preprocess"
    ]
    (line,) = [message for message in warnings if message.startswith("train:")]
    assert "3 pairs kept of 7 rows, 4 refused" in line
    assert "2 unusable (rows 3, 6; first: row 3: rejected: missing)" in line
    assert "1 same_answers (rows 2;" in line
    assert "1 prompts lost their oldest tokens to max_length (2 tokens dropped)" in line
    # The kept pairs are tokenized, answers whole, the cut prompt keeping its leading <s>.
    assert out["train"]["chosen"] == ["four .", "four .", "six ."]
    cut = out["train"][2]
    assert len(cut["chosen_input_ids"]) == 16
    assert cut["chosen_input_ids"][0] == ids(load(tmp_path / "tokenizer"), "<s>")[0]


def test_a_chat_template_of_the_tokenizer_renders_both_answers(tmp_path: Path) -> None:
    report, out = _run(tmp_path, {"train": [GOOD], "validation": [GOOD]}, template=CHATML)
    assert report.chat_template_from == "tokenizer"
    assert report.max_length_from == "tokenizer"  # data.max_length unset: the tokenizer's 256
    tokenizer = load(tmp_path / "tokenizer")
    prompt = "<s> <|im_start|> user what is two plus two ? <|im_end|> <|im_start|> assistant"
    row = out["train"][0]
    assert row["chosen_input_ids"] == ids(tokenizer, f"{prompt} four . <|im_end|> </s>")
    assert row["rejected_input_ids"] == ids(tokenizer, f"{prompt} six . <|im_end|> </s>")
    prompt_length = len(prompt.split())
    assert row["chosen_labels"][:prompt_length] == [-100] * prompt_length


def test_the_deploy_probe_sends_held_out_prompts_as_chats_the_server_takes(
    tmp_path: Path,
) -> None:
    system = [{"role": "system", "content": "be brief"}]
    chat = [*system, {"role": "user", "content": "what is two ?"}]
    row = {"messages": chat, "good": "four .", "bad": "six ."}
    _run(tmp_path, {"train": [row], "validation": [row]}, columns=MESSAGES)
    (probe,) = load_serving_examples(tmp_path / "tokenized", 4, TASK)
    assert probe == {"messages": chat}
    assert TASK.serving_instance(probe) == chat


def test_a_split_with_no_usable_pair_is_an_error_naming_it(tmp_path: Path) -> None:
    same = {"question": "what is two ?", "good": "four .", "bad": "four ."}
    with pytest.raises(DataError, match=r"split 'validation': none of its 2 rows is a usable"):
        _run(tmp_path, {"train": [GOOD], "validation": [same, same]})
    assert not (tmp_path / "tokenized").exists()
