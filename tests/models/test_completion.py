"""The causal-LM generation primitive: left padding, prompts tokenized as in training, only
the new text returned, cut at a stop string; the folder check names what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from llm_pipeline.errors import ModelLoadError
from llm_pipeline.models.completion import (
    CompletionSettings,
    complete,
    cut_at_stop,
    encode_prompts,
    load_causal_lm,
    new_text,
    pad_left,
)
from llm_pipeline.models.sources import resolve_model_path

from ..offline_models import MINILM, TINY_LLAMA

PROMPTS = [
    "### Instruction:\nWhat does `json.dumps` do?\n\n### Response:\n",
    "hi",
    "### Instruction:\nName a prime.\n\n### Response:\n",
]


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama saved as the finetune step saves a model, MiniLM's tokenizer."""
    folder = tmp_path_factory.mktemp("llama")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(MINILM))
    torch.manual_seed(0)
    settings = {k: v for k, v in TINY_LLAMA.items() if k != "model_type"}
    config = LlamaConfig(vocab_size=len(tokenizer), pad_token_id=0, eos_token_id=102, **settings)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_pad_left_ends_every_row_in_the_last_column() -> None:
    ids, mask = pad_left([[5, 6, 7], [8]], pad_id=0, device=torch.device("cpu"))
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_cut_at_stop_cuts_before_the_earliest_stop_string() -> None:
    assert cut_at_stop("an answer\n### Instruction: more", ["###", "\n"]) == "an answer"
    assert cut_at_stop("no stop here", ["###"]) == "no stop here"
    assert cut_at_stop("kept", []) == "kept"


def test_prompts_keep_the_leading_token_and_get_no_end_token(llama_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(llama_dir)
    plain, templated = encode_prompts(tokenizer, ["what is it", "[CLS] what is it"])
    # BERT's tokenizer would wrap a text in [CLS] ... [SEP]; a prompt must not end in [SEP].
    assert plain[0] == tokenizer.cls_token_id and tokenizer.sep_token_id not in plain
    assert templated == plain  # a [CLS] the text already has is not doubled


def test_new_text_continues_a_word_the_prompt_left_unfinished(llama_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(llama_dir)
    prompt = tokenizer("the word is un", add_special_tokens=False)["input_ids"]
    new = tokenizer.convert_tokens_to_ids(["##like", "this"])
    # Decoded alone, "##like this"; as a continuation, the word's end and the next word.
    assert new_text(tokenizer, prompt, new) == "like this"


def test_completions_are_the_same_batched_or_alone(llama_dir: Path) -> None:
    model, tokenizer = load_causal_lm(llama_dir, device=torch.device("cpu"))
    settings = CompletionSettings(batch_size=3, max_new_tokens=6)
    together = complete(model, tokenizer, PROMPTS, settings=settings)
    alone = [complete(model, tokenizer, [p], settings=settings) for p in PROMPTS]
    assert together.texts == [one.texts[0] for one in alone]
    assert together.token_counts == [one.token_counts[0] for one in alone]
    assert all(0 < count <= 6 for count in together.token_counts)
    # Only the new text: the prompt's words do not come back.
    assert not any("Instruction" in text for text in together.texts)
    assert together.texts[0]


def test_an_answer_starts_at_its_first_word(llama_dir: Path) -> None:
    """WordPiece decodes the prompt and the answer with a space between them; an answer
    (every prompt here ends where an answer turn begins) does not start with it."""
    model, tokenizer = load_causal_lm(llama_dir, device=torch.device("cpu"))
    texts = complete(model, tokenizer, PROMPTS, settings=CompletionSettings(max_new_tokens=6))
    assert all(text and not text[0].isspace() for text in texts.texts), texts.texts


def test_a_stop_string_ends_the_completion_before_it(llama_dir: Path) -> None:
    model, tokenizer = load_causal_lm(llama_dir, device=torch.device("cpu"))
    free = complete(model, tokenizer, PROMPTS[:1], settings=CompletionSettings(max_new_tokens=6))
    word = free.texts[0].split()[1]
    stopped = complete(
        model, tokenizer, PROMPTS[:1], settings=CompletionSettings(max_new_tokens=6, stop=(word,))
    )
    assert stopped.texts[0] == free.texts[0][: free.texts[0].find(word)]
    assert stopped.token_counts[0] < free.token_counts[0]


def test_load_takes_the_dtype_asked_for(llama_dir: Path) -> None:
    model, _ = load_causal_lm(llama_dir, device=torch.device("cpu"), dtype=torch.bfloat16)
    assert next(model.parameters()).dtype == torch.bfloat16


def test_a_seq2seq_folder_is_refused_by_name(tmp_path: Path) -> None:
    from transformers import T5Config, T5ForConditionalGeneration

    T5ForConditionalGeneration(
        T5Config(d_model=8, d_ff=8, num_layers=1, num_heads=1)
    ).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="not a causal LM"):
        load_causal_lm(tmp_path)
