"""Preference rows become pairs: prompt masked, answers whole, bad rows counted and named.

Expected ids are written by hand with the word-level tokenizer of tests/data (one word, one
token; `<s>` opens every sequence, `</s>` ends every answer).
"""

import json
from pathlib import Path

import datasets
import pytest

from llm_pipeline.errors import DataError
from llm_pipeline.tasks.chat import ChatFormat
from llm_pipeline.tasks.preference_tuning.pairs import (
    ANSWERS_TOO_LONG,
    SAME_ANSWERS,
    UNUSABLE,
    Pair,
    PreferenceRow,
    Refused,
    check_row,
    encode_pair,
)
from llm_pipeline.tasks.preference_tuning.preprocess import encode_pairs

from ...data.word_tokenizer import CHATML, ids, load, word_tokenizer

PROMPT = "### Instruction : what is two plus three ? ### Response :"


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> ChatFormat:
    """No template of its own: the plain instruction/response layout."""
    return ChatFormat.for_tokenizer(load(word_tokenizer(tmp_path_factory.mktemp("plain"))))


@pytest.fixture(scope="module")
def chatml(tmp_path_factory: pytest.TempPathFactory) -> ChatFormat:
    folder = word_tokenizer(tmp_path_factory.mktemp("chatml"), chat_template=CHATML)
    return ChatFormat.for_tokenizer(load(folder))


def pair(chat_format: ChatFormat, row: dict, max_length: int = 64) -> Pair:
    checked = check_row(row)
    assert not isinstance(checked, Refused), checked
    encoded = encode_pair(chat_format, checked, max_length)
    assert isinstance(encoded, Pair), encoded
    return encoded


def test_each_answer_follows_the_rendered_prompt_which_is_masked(plain: ChatFormat) -> None:
    tok = plain.tokenizer
    row = {"prompt": "what is two plus three ?", "chosen": "four .", "rejected": "six ."}
    columns = pair(plain, row).columns()
    prompt = ids(tok, f"<s> {PROMPT}")
    assert columns["prompt_input_ids"] == prompt
    for name, answer in (("chosen", "four . </s>"), ("rejected", "six . </s>")):
        assert columns[f"{name}_input_ids"] == prompt + ids(tok, answer)
        assert columns[f"{name}_labels"] == [-100] * len(prompt) + ids(tok, answer)
        assert columns[f"{name}_attention_mask"] == [1] * (len(prompt) + 2 + 1)


def test_a_chat_prompt_and_assistant_messages_use_the_tokenizers_template(
    chatml: ChatFormat,
) -> None:
    tok = chatml.tokenizer
    row = {
        "messages": [
            {"role": "system", "content": "be brief ."},
            {"role": "user", "content": "name a colour ."},
            {"role": "assistant", "content": "blue ."},
            {"role": "user", "content": "what is two plus two ?"},
        ],
        "chosen": {"role": "assistant", "content": "four ."},
        "rejected": [{"role": "assistant", "content": "six ."}],  # TRL's layout
    }
    encoded = pair(chatml, row)
    # The earlier assistant turn is context here, masked, and as SFT trained on it: ended
    # with EOS (appended, since ChatML's turn end is not EOS).
    assert encoded.prompt_ids == ids(
        tok,
        "<s> <|im_start|> system be brief . <|im_end|> <|im_start|> user name a colour . "
        "<|im_end|> <|im_start|> assistant blue . <|im_end|> </s> <|im_start|> user what is two "
        "plus two ? <|im_end|> <|im_start|> assistant",
    )
    assert encoded.chosen_ids == ids(tok, "four . <|im_end|> </s>")
    assert encoded.rejected_ids == ids(tok, "six . <|im_end|> </s>")


def test_an_answer_may_be_json_text_or_a_message_stored_as_json(plain: ChatFormat) -> None:
    row = {"prompt": "a", "chosen": '{"colour": "blue"}', "rejected": "[1, 2]"}
    assert check_row(row) == PreferenceRow(
        turns=[{"role": "user", "content": "a"}], chosen='{"colour": "blue"}', rejected="[1, 2]"
    )
    cell = '[{"role": "assistant", "content": "four ."}]'  # a CSV cell in TRL's layout
    assert check_row({"prompt": "a", "chosen": cell, "rejected": "six ."}) == PreferenceRow(
        turns=[{"role": "user", "content": "a"}], chosen="four .", rejected="six ."
    )


def test_a_long_pair_loses_its_oldest_prompt_tokens_never_an_answer_token(
    plain: ChatFormat,
) -> None:
    tok = plain.tokenizer
    row = {"prompt": "what is two plus three ?", "chosen": "four .", "rejected": "six six ."}
    encoded = pair(plain, row, max_length=9)
    # <s>, then as much of the prompt's end as fits beside the longer answer (4 tokens).
    assert encoded.prompt_ids == ids(tok, "<s> ? ### Response :")
    assert encoded.prompt_dropped == len(ids(tok, PROMPT)) - 4
    assert encoded.chosen_ids == ids(tok, "four . </s>")
    assert encoded.rejected_ids == ids(tok, "six six . </s>")
    assert max(len(encoded.columns()[f"{a}_input_ids"]) for a in ("chosen", "rejected")) == 9


def test_a_pair_whose_answers_leave_no_room_for_the_prompt_is_refused(plain: ChatFormat) -> None:
    checked = check_row({"prompt": "what is two ?", "chosen": "four .", "rejected": "six six ."})
    assert not isinstance(checked, Refused)
    refused = encode_pair(plain, checked, max_length=5)  # <s> + 4 answer tokens: no prompt
    assert refused == Refused(
        ANSWERS_TOO_LONG,
        "the longer answer has 4 tokens, which leaves no room for the prompt within "
        "data.max_length (5)",
    )


@pytest.mark.parametrize(
    ("row", "reason", "problem"),
    [
        (
            {"prompt": "a", "chosen": "four .", "rejected": " four .\n"},
            SAME_ANSWERS,
            "chosen and rejected are the same answer",
        ),
        ({"prompt": "a", "chosen": "four .", "rejected": None}, UNUSABLE, "rejected: missing"),
        ({"prompt": "a", "rejected": "six ."}, UNUSABLE, "chosen: missing"),
        ({"prompt": " ", "chosen": "four .", "rejected": "six ."}, UNUSABLE, "prompt: no text"),
        ({"prompt": "a", "chosen": "", "rejected": "six ."}, UNUSABLE, "chosen: no text"),
        (
            {"prompt": "a", "chosen": {"role": "user", "content": "x"}, "rejected": "six ."},
            UNUSABLE,
            "chosen: a message whose role is not 'assistant' ('user')",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "a"},
                    {"role": "assistant", "content": "b"},
                ],
                "chosen": "four .",
                "rejected": "six .",
            },
            UNUSABLE,
            "messages: turn 2 of 2: the prompt ends with the assistant's turn; it must end "
            "with the user's, which the answers answer",
        ),
    ],
)
def test_a_bad_row_is_refused_naming_the_column(row: dict, reason: str, problem: str) -> None:
    assert check_row(row) == Refused(reason, problem)


def test_refused_rows_are_counted_and_named_by_row(plain: ChatFormat, tmp_path: Path) -> None:
    good = {"prompt": "what is two ?", "chosen": "four .", "rejected": "six ."}
    rows = [
        good,
        {"prompt": "what is two ?", "chosen": "four .", "rejected": "four ."},  # row 2
        {"prompt": "what is two ?", "chosen": "four .", "rejected": None},  # row 3
        good,
        {
            "prompt": "two",
            "chosen": " ".join(["four"] * 11 + ["."]),
            "rejected": "six .",
        },
        {"prompt": "", "chosen": "four .", "rejected": "six ."},  # row 6
        {"prompt": "what is two plus three ?", "chosen": "four .", "rejected": "six ."},
    ]
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)})
    # 14: a good row's 11 prompt tokens and its 3 answer tokens.
    kept, stats = encode_pairs(splits, chat_format=plain, max_length=14, work_dir=tmp_path)
    train = stats["train"]
    assert (train.rows_in, train.rows_out) == (7, 3)
    assert train.refused == {UNUSABLE: 2, SAME_ANSWERS: 1, ANSWERS_TOO_LONG: 1}
    assert train.refused_rows == {UNUSABLE: [3, 6], SAME_ANSWERS: [2], ANSWERS_TOO_LONG: [5]}
    assert train.first_problem[UNUSABLE] == "row 3: rejected: missing"
    assert json.loads(json.dumps(train.to_dict()))["rows_out"] == 3
    # Row 7's prompt is cut to fit beside its answer: counted, not refused.
    assert (train.prompts_cut, train.prompt_tokens_dropped) == (1, 2)
    assert kept["train"]["chosen"] == ["four .", "four .", "four ."]
    assert kept["train"]["chat"][0] == '[{"role": "user", "content": "what is two ?"}]'
    assert kept["train"]["prompt"][0] == "### Instruction:\nwhat is two ?\n\n### Response:\n"
    assert set(kept["train"].column_names) == {
        "prompt_input_ids",
        *(
            f"{a}_{c}"
            for a in ("chosen", "rejected")
            for c in ("input_ids", "attention_mask", "labels")
        ),
        "prompt",
        "chat",
        "chosen",
        "rejected",
    }


def test_a_split_without_one_usable_pair_is_an_error(plain: ChatFormat, tmp_path: Path) -> None:
    rows = [{"prompt": "a", "chosen": "four .", "rejected": "four ."}] * 2
    splits = datasets.DatasetDict({"validation": datasets.Dataset.from_list(rows)})
    with pytest.raises(
        DataError,
        match=r"split 'validation': none of its 2 rows is a usable "
        r"preference pair; the first: row 1: chosen and rejected are the same",
    ):
        encode_pairs(splits, chat_format=plain, max_length=10, work_dir=tmp_path)
