"""A real pretrained network fine-tuned offline: a seq2seq model warm-started from MiniLM."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from llm_pipeline.config import ClusterConfig, ModelConfig, TrainConfig
from llm_pipeline.models.loading import load_model
from llm_pipeline.models.sources import load_tokenizer, resolve_model_path
from llm_pipeline.train.job import run_finetune


def test_warm_start_builds_with_the_tokenizers_special_tokens(minilm: str) -> None:
    config = ModelConfig(encoder_decoder={"encoder": minilm, "decoder": minilm})
    tokenizer = load_tokenizer(config)
    model = load_model(config, tokenizer)
    assert model.config.decoder_start_token_id == tokenizer.cls_token_id
    assert model.config.eos_token_id == tokenizer.sep_token_id
    assert model.config.pad_token_id == tokenizer.pad_token_id
    assert model.config.vocab_size == len(tokenizer)
    assert model.config.decoder.add_cross_attention and model.config.decoder.is_decoder


def test_every_trainable_parameter_of_a_warm_start_gets_a_gradient(minilm: str) -> None:
    """What DDP without its unused-parameter search (the plain Trainer over processes)
    needs: the encoder's pooler, which the model never reads, is frozen."""
    config = ModelConfig(encoder_decoder={"encoder": minilm, "decoder": minilm})
    tokenizer = load_tokenizer(config)
    model = load_model(config, tokenizer)
    batch = tokenizer(["a short document"], return_tensors="pt")
    labels = tokenizer(["a summary"], return_tensors="pt").input_ids
    model(**batch, labels=labels).loss.backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert missing == []
    assert not model.encoder.pooler.dense.weight.requires_grad


@pytest.mark.slow
def test_minilm_encoder_decoder_trains_a_step_and_keeps_its_pretrained_weights(
    tokenized_docstrings_tiny: Path,
    tmp_path: Path,
    minilm: str,
    train_settings: Callable[..., TrainConfig],
) -> None:
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, EncoderDecoderModel

    output = tmp_path / "model"
    result = run_finetune(
        dataset_dir=str(tokenized_docstrings_tiny),
        output_dir=str(output),
        model=ModelConfig(encoder_decoder={"encoder": minilm, "decoder": minilm}),
        train=train_settings(
            max_steps=2, per_device_batch_size=2, learning_rate=5e-5, zero_stage="auto"
        ),
        cluster=ClusterConfig(processes=1),
        env=dict(os.environ),
    )
    # On a CPU whose RAM holds the whole training state, auto trains without DeepSpeed.
    assert result.metrics["zero_stage"] == 0
    assert result.zero_stage.startswith("0 (auto: no DeepSpeed: the whole training state, ")

    losses = [e["loss"] for e in result.log_history if "loss" in e]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    # Two 22M MiniLM stacks and the cross-attention, all of it trained but the encoder's
    # pooler, which the model never reads (384 x 384 and a bias).
    assert result.metrics["total_parameters"] > 40_000_000
    pooler = 384 * 384 + 384
    assert result.metrics["trainable_parameters"] == result.metrics["total_parameters"] - pooler
    pretrained = load_file(Path(resolve_model_path(minilm)) / "model.safetensors")
    tuned = load_file(output / "model.safetensors")
    embeddings = "embeddings.word_embeddings.weight"
    # Two small steps move the pretrained embeddings a little, not back to random.
    assert torch.allclose(tuned[f"encoder.{embeddings}"], pretrained[embeddings], atol=1e-2)
    model = EncoderDecoderModel.from_pretrained(output)
    tokenizer = AutoTokenizer.from_pretrained(output)
    batch = tokenizer(["#Person1#: Is the shop open? #Person2#: Until six."], return_tensors="pt")
    assert model.generate(**batch, max_new_tokens=5).shape[1] > 1
