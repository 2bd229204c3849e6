"""Preprocess for instruction tuning: chats become one token sequence each, the prompt masked
from the loss, cut to length from the prompt side, bad chats dropped and counted.

Expected ids are written by hand with a word-level tokenizer (tests/data/word_tokenizer.py:
one word, one token), with and without a chat template of the tokenizer's own; the real
offline tokenizer (MiniLM's, BERT's: no EOS, so `[SEP]` ends responses) runs the real
docstring questions.
"""

import json
import logging
from pathlib import Path
from typing import Any

import datasets
import pytest

from llm_pipeline.config import DataConfig, ModelConfig
from llm_pipeline.data.preprocess import preprocess_dataset
from llm_pipeline.errors import DataError
from llm_pipeline.models import load_tokenizer
from llm_pipeline.output_files import PREPROCESS_REPORT_FILE
from llm_pipeline.tasks import get_task
from llm_pipeline.tasks.chat import Segment, chat_problem
from llm_pipeline.tasks.instruction_tuning.preprocess import fit_to_length

from ..docstring_data import DocstringData
from ..offline_models import MINILM as MINILM_SOURCE
from .word_tokenizer import CHATML, ids, load, word_tokenizer

TASK = get_task("instruction_tuning")
#: A tiny Llama: the probe for packing builds one of its shape; nothing is trained here.
LLAMA = {
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
}
TWO_TURNS = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "what is two plus two ?"},
    {"role": "assistant", "content": "four ."},
    {"role": "user", "content": "and three plus three ?"},
    {"role": "assistant", "content": "six ."},
]


def _save(folder: Path, splits: dict[str, list[dict[str, Any]]]) -> Path:
    """A DatasetDict laid out as the download step writes it: a chat column whose rows
    are not all lists of turns is `Json`, as the json reader makes it."""

    def split(rows: list[dict[str, Any]]) -> datasets.Dataset:
        if "messages" in rows[0]:
            features = datasets.Features({"messages": datasets.Json()})
            return datasets.Dataset.from_list(rows, features=features)
        return datasets.Dataset.from_list(rows)

    datasets.DatasetDict({name: split(rows) for name, rows in splits.items()}).save_to_disk(
        str(folder)
    )
    return folder


def _run(
    tmp_path: Path,
    splits: dict[str, list[dict[str, Any]]],
    model: ModelConfig,
    **data: Any,
) -> tuple[Any, datasets.DatasetDict]:
    source = _save(tmp_path / "in", splits)
    columns = {"messages": "messages"} if "messages" in splits["train"][0] else None
    config = DataConfig(
        dataset="unused-here",
        columns=columns or {"prompt": "prompt", "response": "response"},
        **data,
    )
    report = preprocess_dataset(
        dataset_dir=source, output_dir=tmp_path / "out", data=config, model=model, task=TASK
    )
    return report, datasets.load_from_disk(str(tmp_path / "out"))


def _words(tmp_path: Path, template: str | None) -> ModelConfig:
    folder = word_tokenizer(tmp_path / "tokenizer", chat_template=template)
    return ModelConfig(architecture=LLAMA, tokenizer=str(folder))


@pytest.mark.parametrize("template", ["tokenizer's own (ChatML)", "none: the default layout"])
def test_prompt_tokens_are_masked_and_every_assistant_turn_is_learned(
    tmp_path: Path, template: str
) -> None:
    own = template.startswith("tokenizer")
    model = _words(tmp_path, CHATML if own else None)
    tokenizer = load(Path(model.tokenizer or ""))
    _, out = _run(tmp_path, {"train": [{"messages": TWO_TURNS}]}, model)
    if own:  # ChatML's turn end is <|im_end|>, not the EOS `</s>`, which is added after it
        prompt_1 = "<s> <|im_start|> system be brief <|im_end|> <|im_start|> user what is two "
        prompt_1 += "plus two ? <|im_end|> <|im_start|> assistant"
        response_1 = "four . <|im_end|> </s>"
        prompt_2 = "<|im_start|> user and three plus three ? <|im_end|> <|im_start|> assistant"
        response_2 = "six . <|im_end|> </s>"
    else:  # `### Instruction:` ... `### Response:`, the response closed by `</s>`
        prompt_1 = "<s> be brief ### Instruction : what is two plus two ? ### Response :"
        response_1 = "four . </s>"
        prompt_2 = "### Instruction : and three plus three ? ### Response :"
        response_2 = "six . </s>"
    parts = [(prompt_1, False), (response_1, True), (prompt_2, False), (response_2, True)]
    expected_ids = [i for words, _ in parts for i in ids(tokenizer, words)]
    expected_labels = [
        i if learned else -100 for words, learned in parts for i in ids(tokenizer, words)
    ]
    row = out["train"][0]
    assert row["input_ids"] == expected_ids
    assert row["labels"] == expected_labels
    assert row["attention_mask"] == [1] * len(expected_ids)
    # Evaluation continues the prompt of the last assistant turn and compares with its text.
    # The prompt is the template's rendering: the EOS added after ChatML's <|im_end|> is
    # not in it; the default layout writes `</s>` itself.
    assert row["response"] == "six ."
    earlier = "four . <|im_end|>" if own else "four . </s>"
    expected_prompt = f"{prompt_1.removeprefix('<s> ')} {earlier} {prompt_2}"
    prompt_ids = tokenizer(row["prompt"], add_special_tokens=False)["input_ids"]
    assert prompt_ids == ids(tokenizer, expected_prompt)


def test_prompt_and_response_rows_are_one_turn_chats_ending_with_sep_for_bert(
    tmp_path: Path, docstring_data: DocstringData
) -> None:
    """MiniLM's tokenizer (BERT's) has no EOS: `[SEP]` ends every response."""
    rows = [
        {"prompt": f"What does `{row['document'].split(':')[0]}` do?", "response": row["summary"]}
        for row in docstring_data.rows("train", 40)
    ]
    model = ModelConfig(architecture=LLAMA, tokenizer=MINILM_SOURCE)
    tokenizer = load_tokenizer(model)
    report, out = _run(tmp_path, {"train": rows, "validation": rows[:5]}, model, max_length=512)
    assert report.chat_template_from == "default"
    for row, source in zip(out["train"], rows, strict=True):
        learned = [label for label in row["labels"] if label != -100]
        expected = tokenizer(source["response"], add_special_tokens=False)["input_ids"]
        assert learned == [*expected, tokenizer.sep_token_id]
        start = len(row["labels"]) - len(learned)  # the response is the sequence's end
        assert row["labels"][start:] == row["input_ids"][start:]
        assert set(row["labels"][:start]) == {-100}
        assert row["input_ids"][0] == tokenizer.cls_token_id
        assert row["prompt"] == f"### Instruction:\n{source['prompt']}\n\n### Response:\n"
        assert row["input_ids"][:start] == [
            tokenizer.cls_token_id,
            *tokenizer(row["prompt"], add_special_tokens=False)["input_ids"],
        ]
        assert row["response"] == source["response"]


def test_a_long_prompt_loses_its_oldest_tokens_and_the_response_stays(tmp_path: Path) -> None:
    model = _words(tmp_path, None)
    tokenizer = load(Path(model.tokenizer or ""))
    long_question = " ".join(["what is two plus two ?"] * 6)  # 36 words
    rows = [
        {"prompt": long_question, "response": "four ."},
        {"prompt": "name a colour", "response": "blue ."},
    ]
    report, out = _run(tmp_path, {"train": rows}, model, max_length=24)
    cut, whole = out["train"]
    # <s>, then the last 24 - 1 - 3 = 20 prompt tokens, then the whole response.
    full_prompt = ids(tokenizer, f"### Instruction : {long_question} ### Response :")
    assert cut["input_ids"] == [
        tokenizer.bos_token_id,
        *full_prompt[-20:],
        *ids(tokenizer, "four . </s>"),
    ]
    assert cut["labels"][-3:] == ids(tokenizer, "four . </s>")
    assert whole["input_ids"][-3:] == ids(tokenizer, "blue . </s>")
    stats = report.splits["train"]
    assert (stats.rows_prompt_cut, stats.rows_response_cut) == (1, 0)
    assert stats.tokens_dropped == len(full_prompt) - 20
    saved = json.loads((tmp_path / "out" / PREPROCESS_REPORT_FILE).read_text())
    assert saved["splits"]["train"]["rows_prompt_cut"] == 1
    assert saved["splits"]["train"]["tokens_dropped"] == stats.tokens_dropped
    assert report.metrics()["train_rows_prompt_cut"] == 1.0


def test_fit_to_length_cuts_the_prompt_oldest_first_and_a_long_response_at_its_end() -> None:
    prompt, response = Segment([0, 1, 2, 3, 4, 5, 6, 7], False), Segment([10, 11, 12], True)
    fitted = fit_to_length([prompt, response], 8, lead=1)  # token 0 opens every sequence
    assert fitted.input_ids == [0, 4, 5, 6, 7, 10, 11, 12]
    assert fitted.labels == [-100] * 5 + [10, 11, 12]
    assert (fitted.prompt_dropped, fitted.response_dropped) == (3, 0)
    # A response longer than the room left: the prompt keeps max_length // 4 = 2 tokens,
    # the response loses its end.
    long = Segment(list(range(20, 30)), True)
    fitted = fit_to_length([prompt, long], 8, lead=1)
    assert fitted.input_ids == [0, 6, 7, 20, 21, 22, 23, 24]
    assert (fitted.prompt_dropped, fitted.response_dropped) == (5, 5)
    # Two turns: the oldest prompt tokens go first; no response token is lost.
    turns = [Segment([0, 1, 2], False), Segment([10], True), Segment([3, 4, 5], False)]
    fitted = fit_to_length([*turns, Segment([11], True)], 6, lead=1)
    assert fitted.input_ids == [0, 10, 3, 4, 5, 11]
    assert fitted.labels == [-100, 10, -100, -100, -100, 11]


@pytest.mark.parametrize(
    ("chat", "problem"),
    [
        ("What is two plus two?", "not a list of turns (got str)"),
        ([], "no turns"),
        ([{"role": "user"}], "turn 1 of 1: not an object with `role` and `content`"),
        (
            [{"role": "user", "content": "hi"}, {"role": "bot", "content": "hello"}],
            "turn 2 of 2: unknown role 'bot' (roles: system, user, assistant)",
        ),
        (
            [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "turn 1 of 1: content is not text (got list)",
        ),
        ([{"role": "user", "content": " "}], "turn 1 of 1: no text"),
        ([{"role": "user", "content": "hi"}], "no assistant turn to learn"),
        (
            [{"role": "assistant", "content": "hello"}],
            "turn 1 of 1: an assistant turn with no system or user turn before it",
        ),
    ],
)
def test_each_kind_of_bad_chat_is_named(chat: Any, problem: str) -> None:
    assert chat_problem(chat, need_assistant=True) == problem


def test_bad_chats_are_dropped_and_counted_and_a_split_of_none_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = _words(tmp_path, None)
    good = {"messages": TWO_TURNS}
    bad = {"messages": [{"role": "user", "content": "hi"}, {"role": "bot", "content": "x"}]}
    text = {"messages": json.dumps(TWO_TURNS)}  # a chat kept as JSON text (a CSV cell)
    caplog.set_level(logging.INFO, logger="llm_pipeline.data.preprocess")
    report, out = _run(tmp_path, {"train": [good, bad, text, bad]}, model)
    stats = report.splits["train"]
    assert (stats.rows_in, stats.rows_dropped, stats.rows_out) == (4, 2, 2)
    # Rows and turns as a person counts them: the second row's second turn.
    assert stats.first_dropped == (
        "row 2: turn 2 of 2: unknown role 'bot' (roles: system, user, assistant)"
    )
    assert out["train"][0]["input_ids"] == out["train"][1]["input_ids"]
    assert "2 dropped (unusable chat, first: row 2: turn 2 of 2: unknown role 'bot'" in caplog.text
    with pytest.raises(DataError) as caught:
        _run(tmp_path / "again", {"train": [good], "validation": [bad, bad]}, model)
    assert str(caught.value) == (
        "split 'validation': none of its 2 rows is a usable chat; the first: row 1: turn 2 of 2: "
        "unknown role 'bot' (roles: system, user, assistant)"
    )


def test_a_blank_response_is_named_by_its_column(tmp_path: Path) -> None:
    model = _words(tmp_path, None)
    rows = [{"prompt": "name a colour", "response": "blue ."}, {"prompt": "x", "response": " "}]
    report, _ = _run(tmp_path, {"train": rows}, model)
    assert report.splits["train"].first_dropped == "row 2: response: no text"


def test_a_max_length_with_no_room_for_prompt_and_response_is_refused(tmp_path: Path) -> None:
    model = _words(tmp_path, None)
    with pytest.raises(DataError, match=r"data.max_length: 2 leaves no room .* at least 3"):
        _run(tmp_path, {"train": [{"messages": TWO_TURNS}]}, model, max_length=2)


def test_the_configured_template_serves_a_tokenizer_without_one_and_yields_to_its_own(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows = [{"prompt": "name a colour", "response": "blue ."}]
    plain = "{% for m in messages %}{{ m['content'] + ' ' }}{% endfor %}"
    report, out = _run(
        tmp_path / "plain", {"train": rows}, _words(tmp_path, None), chat_template=plain
    )
    assert report.chat_template_from == "config"
    assert out["train"][0]["prompt"] == "name a colour "
    caplog.set_level(logging.WARNING, logger="llm_pipeline.data.preprocess")
    model = _words(tmp_path / "own", CHATML)
    report, out = _run(tmp_path / "own", {"train": rows}, model, chat_template=plain)
    assert report.chat_template_from == "tokenizer"
    assert out["train"][0]["prompt"].startswith("<|im_start|> user name a colour")
    assert "data.chat_template is ignored: the tokenizer has its own chat template" in caplog.text
