"""Instruction tuning trains a causal LM through the same finetune step: its collator and loss,
ZeRO-3 on two CPU ranks (torchrun, gloo), checkpoints it resumes from, a model folder that
reloads and completes prompts, and token counts for a decoder-only model."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import datasets
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from llm_pipeline.config import ClusterConfig, ModelConfig, TrainConfig
from llm_pipeline.models.completion import CompletionSettings, complete, load_causal_lm
from llm_pipeline.train.checkpoints import MARKER
from llm_pipeline.train.collators import CausalLMCollator
from llm_pipeline.train.job import run_finetune
from llm_pipeline.train.safe_load import safe_torch_load
from llm_pipeline.train.trainer import token_mean_loss

from ..offline_models import TINY_LLAMA


def test_the_collator_pads_right_and_never_targets_the_first_token() -> None:
    rows = [
        {"input_ids": [5, 6, 7], "attention_mask": [1, 1, 1], "labels": [-100, 6, 7]},
        {"input_ids": [8], "attention_mask": [1], "labels": [8]},
    ]
    batch = CausalLMCollator(pad_id=0)(rows)
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["labels"].tolist() == [[-100, 6, 7], [-100, -100, -100]]
    assert CausalLMCollator(pad_id=0, pad_to_multiple_of=8)(rows)["input_ids"].shape == (2, 8)


def test_packed_rows_keep_their_positions_and_go_without_a_mask() -> None:
    # Two examples in one row: positions restart at 0 where the second begins.
    row = {
        "input_ids": [1, 2, 3, 4, 5],
        "attention_mask": [1, 1, 1, 1, 1],
        "labels": [-100, 2, -100, -100, 5],
        "position_ids": [0, 1, 0, 1, 2],
    }
    batch = CausalLMCollator(pad_id=0)([row, {**row, **{k: v[:3] for k, v in row.items()}}])
    assert "attention_mask" not in batch
    assert batch["position_ids"].tolist() == [[0, 1, 0, 1, 2], [0, 1, 0, 0, 0]]


def test_the_shifted_token_mean_loss_is_the_causal_lms_own() -> None:
    torch.manual_seed(0)
    settings = {k: v for k, v in TINY_LLAMA.items() if k != "model_type"}
    model = LlamaForCausalLM(LlamaConfig(vocab_size=50, **settings))
    ids = torch.randint(1, 50, (2, 7))
    labels = ids.clone()
    labels[0, :3] = -100  # a prompt
    labels[1, 5:] = -100  # padding
    outputs = model(input_ids=ids, labels=labels)
    ours = token_mean_loss(0.0, shift=True)(outputs, labels)
    assert torch.allclose(ours, outputs.loss, atol=1e-6)


@pytest.mark.slow
def test_zero3_on_two_ranks_trains_a_causal_lm_that_checkpoints_and_completes(
    tokenized_instructions: Path,
    tmp_path: Path,
    tiny_llama_model: ModelConfig,
    train_settings: Callable[..., TrainConfig],
) -> None:
    result = run_finetune(
        dataset_dir=str(tokenized_instructions),
        output_dir=str(tmp_path / "model"),
        model=tiny_llama_model,
        # 8 steps of 4 rows on 2 ranks: each of the 64 training rows exactly once.
        train=train_settings(max_steps=8, save_steps=4, learning_rate=1e-2),
        cluster=ClusterConfig(processes=2),
        env=dict(os.environ),
        task="instruction_tuning",
    )

    losses = [e["loss"] for e in result.log_history if "loss" in e]
    assert len(losses) == 8 and sum(losses[-2:]) / 2 < sum(losses[:2]) / 2 - 0.5
    train = datasets.load_from_disk(str(tokenized_instructions))["train"]
    tokens = sum(len(ids) for ids in train["input_ids"])
    targets = sum(sum(label != -100 for label in labels) for labels in train["labels"])
    metrics = result.metrics
    # Decoder-only: every token is read once, the response tokens among them are targets.
    assert metrics["train_source_tokens"] == metrics["train_tokens"] == tokens
    assert metrics["train_target_tokens"] == targets
    assert metrics["parameters_per_target_token"] == 0
    output = tmp_path / "model"
    resolved = json.loads((output / "llm_pipeline_config.json").read_text())
    assert resolved["task"] == "instruction_tuning"
    assert resolved["resolved"]["deepspeed"]["zero_optimization"]["stage"] == 3

    model, tokenizer = load_causal_lm(output, device=torch.device("cpu"))
    assert isinstance(model, LlamaForCausalLM) and tokenizer.pad_token_id is not None
    # The folder carries the template its chats were rendered with in training: a server
    # given nothing else renders a chat's history as training did.
    report = json.loads((tokenized_instructions / "preprocess.json").read_text())
    assert tokenizer.chat_template == report["chat_template"]
    prompts = list(train["prompt"][:2])
    done = complete(model, tokenizer, prompts, settings=CompletionSettings(max_new_tokens=5))
    assert all(0 < count <= 5 for count in done.token_counts)

    # The mid-run checkpoint is complete: both ranks' ZeRO-3 model and optimizer shards,
    # readable by the loader a resume uses (tests/train/test_resume.py resumes from one).
    (checkpoint,) = (tmp_path / "checkpoints").glob(f"run-*/checkpoint-4/{MARKER}")
    for rank in (0, 1):
        for part in ("model_states", "optim_states"):
            name = f"global_step4/zero_pp_rank_{rank}_mp_rank_00_{part}.pt"
            assert safe_torch_load(str(checkpoint.parent / name), map_location="cpu")


def test_the_worker_reads_the_chat_template_preprocess_rendered_with(tmp_path: Path) -> None:
    from llm_pipeline.train import training_data

    spec = SimpleNamespace(work_dir=str(tmp_path))
    (tmp_path / training_data._NOTE).write_text(str(tmp_path / "data"))
    (tmp_path / "data").mkdir()
    assert training_data.chat_template(spec) is None  # no report: nothing to record
    report = {"tokenizer": "t", "chat_template": "{{ messages[0]['content'] }}"}
    (tmp_path / "data" / "preprocess.json").write_text(json.dumps(report))
    assert training_data.chat_template(spec) == "{{ messages[0]['content'] }}"
