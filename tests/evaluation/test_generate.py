"""Generation: the same summaries whatever the batching, in input order. Across processes:
tests/evaluation/test_sharded.py (the evaluate step in one process and in two, identical)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import datasets
import pytest
import torch

from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.models.generation import (
    build_generation_config,
    generate_summaries,
    load_seq2seq,
)

from . import generate_fixtures as fixtures

# Shared fixtures (pytest finds them by name in this module's namespace).
tiny_t5_dir = fixtures.tiny_t5_dir
eval_dataset_dir = fixtures.eval_dataset_dir


def _input_ids(dataset_dir: Path) -> list[list[int]]:
    return [
        list(ids) for ids in datasets.load_from_disk(str(dataset_dir))["validation"]["input_ids"]
    ]


def _differences(a: list[str], b: list[str]) -> int:
    assert len(a) == len(b)
    return sum(x != y for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def tiny_t5(tiny_t5_dir: Path) -> tuple[Any, Any]:
    return load_seq2seq(tiny_t5_dir, device=torch.device("cpu"))


def test_loads_fp32_in_eval_mode_on_cpu(tiny_t5: tuple[Any, Any]) -> None:
    model, _ = tiny_t5
    assert not model.training
    assert next(model.parameters()).dtype == torch.float32


def test_batch_size_does_not_change_greedy_summaries(
    tiny_t5: tuple[Any, Any], eval_dataset_dir: Path
) -> None:
    model, tokenizer = tiny_t5
    ids = _input_ids(eval_dataset_dir)
    one = generate_summaries(model, tokenizer, ids, config=EvaluateConfig(batch_size=1))
    many = generate_summaries(model, tokenizer, ids, config=EvaluateConfig(batch_size=16))
    # The trained model must give input-dependent summaries, or this test proves nothing.
    assert len(set(one.texts)) >= len(ids) // 2, "the fixture model's outputs are degenerate"
    # Padding a row to its batch's width changes BLAS summation order, so a near-tie between
    # two tokens can flip; allow 1% of the summaries to differ, and say how many did.
    differ = _differences(one.texts, many.texts)
    assert differ <= len(ids) // 100, f"{differ} of {len(ids)} summaries differ"
    assert one.token_counts == many.token_counts or differ > 0


def test_summaries_come_back_in_input_order(
    tiny_t5: tuple[Any, Any], eval_dataset_dir: Path
) -> None:
    model, tokenizer = tiny_t5
    ids = _input_ids(eval_dataset_dir)[:12]
    assert len({len(row) for row in ids}) > 1, "needs inputs of different lengths to sort"
    config = EvaluateConfig(batch_size=1)  # one row per batch: the same arithmetic either way
    forward = generate_summaries(model, tokenizer, ids, config=config)
    backward = generate_summaries(model, tokenizer, ids[::-1], config=config)
    assert backward.texts == forward.texts[::-1]
    assert backward.token_counts == forward.token_counts[::-1]
    alone = [generate_summaries(model, tokenizer, [row], config=config).texts[0] for row in ids]
    assert forward.texts == alone


def test_longest_inputs_are_generated_first(
    tiny_t5: tuple[Any, Any], eval_dataset_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tokenizer = tiny_t5
    ids = _input_ids(eval_dataset_dir)[:40]
    widths: list[int] = []
    masks_match: list[bool] = []
    real_generate = model.generate

    def spy(*, input_ids: torch.Tensor, attention_mask: torch.Tensor, **kwargs: Any) -> Any:
        widths.append(input_ids.shape[1])
        # Right padding: every row's mask is ones then zeros, and covers its real length.
        masks_match.append(bool((attention_mask.cummin(dim=1).values == attention_mask).all()))
        return real_generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)

    monkeypatch.setattr(model, "generate", spy)
    generate_summaries(model, tokenizer, ids, config=EvaluateConfig(batch_size=8))
    assert widths[0] == max(len(row) for row in ids)
    assert widths == sorted(widths, reverse=True)
    assert all(masks_match)


def test_config_settings_override_the_model_generation_config(tiny_t5: tuple[Any, Any]) -> None:
    model, tokenizer = tiny_t5
    inherited = build_generation_config(model, tokenizer, EvaluateConfig())
    assert inherited.max_new_tokens == fixtures.MAX_TARGET_TOKENS  # saved with the model
    assert inherited.num_beams == model.generation_config.num_beams
    assert inherited.do_sample is False
    chosen = build_generation_config(
        model,
        tokenizer,
        EvaluateConfig(max_new_tokens=7, num_beams=3, length_penalty=1.5, no_repeat_ngram_size=2),
    )
    assert (chosen.max_new_tokens, chosen.num_beams) == (7, 3)
    assert (chosen.length_penalty, chosen.no_repeat_ngram_size) == (1.5, 2)
    # ...and the model's own config is left as it was.
    assert model.generation_config.max_new_tokens == fixtures.MAX_TARGET_TOKENS


def test_min_and_max_new_tokens_bound_the_summaries(
    tiny_t5: tuple[Any, Any], eval_dataset_dir: Path
) -> None:
    model, tokenizer = tiny_t5
    ids = _input_ids(eval_dataset_dir)[:8]
    exact = EvaluateConfig(min_new_tokens=6, max_new_tokens=6, batch_size=4)
    assert generate_summaries(model, tokenizer, ids, config=exact).token_counts == [6] * 8
    beams = EvaluateConfig(max_new_tokens=5, num_beams=2, no_repeat_ngram_size=2, batch_size=4)
    counts = generate_summaries(model, tokenizer, ids, config=beams).token_counts
    assert all(1 <= count <= 5 for count in counts)


def test_loads_and_generates_with_an_encoder_decoder_warm_start(tmp_path: Path) -> None:
    from transformers import AutoTokenizer, EncoderDecoderModel

    encoder = fixtures.minilm_tokenizer_dir()
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    warm = EncoderDecoderModel.from_encoder_decoder_pretrained(str(encoder), str(encoder))
    for settings in (warm.config, warm.generation_config):
        settings.decoder_start_token_id = tokenizer.cls_token_id
        settings.pad_token_id = tokenizer.pad_token_id
        settings.eos_token_id = tokenizer.sep_token_id
    warm.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)

    model, loaded_tokenizer = load_seq2seq(tmp_path, device=torch.device("cpu"))
    assert isinstance(model, EncoderDecoderModel)
    ids = loaded_tokenizer(["Hello there.", "A longer input sentence than the first one."])
    out = generate_summaries(
        model, loaded_tokenizer, ids["input_ids"], config=EvaluateConfig(max_new_tokens=4)
    )
    assert len(out.texts) == 2
    assert all(1 <= count <= 4 for count in out.token_counts)
