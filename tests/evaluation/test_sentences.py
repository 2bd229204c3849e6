"""The offline sentence splitter on prose and on PTB-tokenized CNN/DailyMail text."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from llm_pipeline.evaluation import iter_sentences, lead_k, split_sentences

PROSE = [
    (
        "Mr. Smith paid $3.5 million for the house. He moved in on Monday.",
        ["Mr. Smith paid $3.5 million for the house.", "He moved in on Monday."],
    ),
    (
        "The U.S. economy grew 3.5% last year. Growth slowed in Europe.",
        ["The U.S. economy grew 3.5% last year.", "Growth slowed in Europe."],
    ),
    (
        "He moved to the U.S. He found work quickly.",
        ["He moved to the U.S.", "He found work quickly."],
    ),
    (
        "Dr. Jones met John F. Kennedy at 3 p.m. yesterday. They talked.",
        ["Dr. Jones met John F. Kennedy at 3 p.m. yesterday.", "They talked."],
    ),
    (
        '"Are you coming?" she asked. "No," he said.',
        ['"Are you coming?" she asked.', '"No," he said.'],
    ),
    ('He said "stop." Then he left.', ['He said "stop."', "Then he left."]),
    ("It was cold (very cold.) We stayed in.", ["It was cold (very cold.)", "We stayed in."]),
    ("Is it? Yes! It is.", ["Is it?", "Yes!", "It is."]),
    (
        "Apple Inc. The company said sales rose. Apple Inc. Chief Tim Cook spoke.",
        ["Apple Inc.", "The company said sales rose.", "Apple Inc. Chief Tim Cook spoke."],
    ),
    (
        "Wait... what happened? Nothing... Really.",
        ["Wait... what happened?", "Nothing...", "Really."],
    ),
    ("I know . . . maybe. Then again, no.", ["I know . . . maybe.", "Then again, no."]),
    (
        "First line\nSecond line. Third sentence!\n\n  \nLast",
        ["First line", "Second line.", "Third sentence!", "Last"],
    ),
    # Lowercased prose has no case to go by; abbreviations still hold.
    (
        "mr. smith went to washington. he arrived on time.",
        ["mr. smith went to washington.", "he arrived on time."],
    ),
    (
        "the u.s. economy grew 3.5 percent. it slowed later.",
        ["the u.s. economy grew 3.5 percent.", "it slowed later."],
    ),
    ("no terminal punctuation at all", ["no terminal punctuation at all"]),
    ("", []),
    ("   \n\t ", []),
]

PTB = [
    (
        "washington ( cnn ) president obama says he is `` committed '' . his comments came "
        "on sunday . `` i am sure , '' he said .",
        [
            "washington ( cnn ) president obama says he is `` committed '' .",
            "his comments came on sunday .",
            "`` i am sure , '' he said .",
        ],
    ),
    (
        "he said : `` leave my man alone . '' `` stop looking for him . ''",
        ["he said : `` leave my man alone . ''", "`` stop looking for him . ''"],
    ),
    # In tokenized text a full stop still attached to a word belongs to an abbreviation.
    (
        "the firm , apple inc. , said sales rose . u.s. officials agreed in washington d.c. "
        "on monday . mr. obama spoke at 3 p.m. .",
        [
            "the firm , apple inc. , said sales rose .",
            "u.s. officials agreed in washington d.c. on monday .",
            "mr. obama spoke at 3 p.m. .",
        ],
    ),
    (
        "who knew ? nobody did ! -lrb- not even him . -rrb- the end",
        ["who knew ?", "nobody did !", "-lrb- not even him . -rrb-", "the end"],
    ),
    (
        "she asked : ‘ what has it ever done for us ? ’ the meeting went on .",
        ["she asked : ‘ what has it ever done for us ? ’", "the meeting went on ."],
    ),
]


@pytest.mark.parametrize(("text", "expected"), PROSE)
def test_splits_prose(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


@pytest.mark.parametrize(("text", "expected"), PTB)
def test_splits_ptb_tokenized_text(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_rejects_non_text() -> None:
    with pytest.raises(ValueError, match="expected a str, got bytes"):
        split_sentences(b"bytes. are not text.")  # type: ignore[arg-type]


def _assert_cut_at_whitespace_only(text: str, sentences: list[str]) -> None:
    """Each sentence is a stripped slice of `text`, in order, and no word is lost."""
    offset = 0
    for sentence in sentences:
        assert sentence and sentence == sentence.strip()
        found = text.find(sentence, offset)
        assert found >= 0, f"not a slice of the input: {sentence!r}"
        assert text[offset:found].strip() == "", "non-whitespace dropped between sentences"
        offset = found + len(sentence)
    assert text[offset:].strip() == ""


def test_real_text_is_cut_only_at_whitespace(
    cnndm_test: list[dict[str, Any]], samsum_test: list[dict[str, Any]], shared_data: Path
) -> None:
    # rouge.py takes rouge1/2/L tokens from the rougeLsum lines; that needs this property.
    documents_file = shared_data / "xsum_test" / "documents_321.jsonl"
    xsum = [json.loads(line)["document"] for line in documents_file.read_text().splitlines()]
    texts = [row["article"] for row in cnndm_test[:300]] + xsum
    texts += [row["dialogue"] for row in samsum_test[:300]]
    texts += [row["summary"] for row in samsum_test[:300]]
    for text in texts:
        _assert_cut_at_whitespace_only(text, split_sentences(text))


# A PTB sentence ends in a lone mark, maybe followed by closing quotes, brackets or marks.
_PTB_SENTENCE_END = re.compile(
    r"(?:^|\s)(?:[.!?]+|…)(?:\s+(?:[.!?]+|…|''|'|\"|’|”|-rrb-|-rsb-|\)|\]))*$"
)


def test_cnndm_articles_split_at_every_lone_full_stop(cnndm_test: list[dict[str, Any]]) -> None:
    for row in cnndm_test[:500]:
        sentences = split_sentences(row["article"])
        for sentence in sentences[:-1]:
            end = _PTB_SENTENCE_END.search(sentence)
            assert end, f"ends mid-sentence: {sentence[-60:]!r}"
            # No sentence end was missed: a lone "." inside is only ever part of ". . .".
            inner = sentence[: end.start()].split()
            for i, tok in enumerate(inner):
                if tok == ".":
                    neighbours = inner[i - 1 : i] + inner[i + 1 : i + 2]
                    assert "." in neighbours, f"missed a sentence end in {sentence!r}"


def test_lead_k_takes_the_first_k_sentences_one_per_line() -> None:
    document = "Mr. Lee arrived. He sat down. The U.S. team won. Fans cheered."
    assert lead_k(document, 3) == "Mr. Lee arrived.\nHe sat down.\nThe U.S. team won."
    assert lead_k(document, 1) == "Mr. Lee arrived."
    assert lead_k(document, 10) == "\n".join(split_sentences(document))
    assert lead_k("", 3) == ""


def test_lead_k_matches_the_full_split_on_cnndm(cnndm_test: list[dict[str, Any]]) -> None:
    for row in cnndm_test[:200]:
        article = row["article"]
        assert lead_k(article, 3) == "\n".join(split_sentences(article)[:3])
        assert lead_k(article, 3).count("\n") == 2


def test_lead_k_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="k must be >= 1, got 0"):
        lead_k("One. Two.", 0)
    with pytest.raises(ValueError, match="str document"):
        lead_k(None, 3)  # type: ignore[arg-type]


def test_iter_sentences_is_lazy() -> None:
    sentences = iter_sentences("One. Two. Three.")
    assert next(sentences) == "One."
    assert list(sentences) == ["Two.", "Three."]
