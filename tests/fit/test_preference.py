"""The fit check for preference tuning: a DPO step runs the chosen and the rejected answer of
every pair through the model, so a micro-batch of n pairs keeps the activations of 2n
sequences, while messages and advice speak of pairs, the rows a config sets."""

import json
from pathlib import Path

import pytest

from llm_pipeline.config import ModelConfig, PipelineConfig, TrainConfig, load_config
from llm_pipeline.fit.check import check_fit
from llm_pipeline.fit.machines import ACCELERATORS, Place
from llm_pipeline.output_files import PREPROCESS_REPORT_FILE
from llm_pipeline.train.zero_stage import resolve_zero_stage

from ..offline_models import MINILM

COLUMNS = {
    "preference_tuning": {"prompt": "prompt", "chosen": "chosen", "rejected": "rejected"},
    "instruction_tuning": {"prompt": "prompt", "response": "chosen"},
}


def config(tmp_path: Path, task: str, batch: int, *overrides: str) -> PipelineConfig:
    """`task` on Dahoas/rm-static's pairs with OPT-1.3B on one A100 40GB (ZeRO-3, bf16)."""
    body = {
        "task": task,
        "data": {"dataset": "Dahoas/rm-static", "columns": COLUMNS[task], "max_length": 512},
        "model": {"source": "facebook/opt-1.3b"},
        "train": {"per_device_batch_size": batch, "precision": "bf16", "zero_stage": 3},
        "cluster": {"machine_type": "a2-highgpu-1g", "accelerator_type": "NVIDIA_TESLA_A100"},
    }
    path = tmp_path / f"{task}-{batch}.json"
    path.write_text(json.dumps(body))
    return load_config(path, list(overrides)).config


def finetune_gpu(config: PipelineConfig):  # the finetune step's GPU row
    row = check_fit(config, target="vertex").rows[0]
    assert (row.place, row.memory) == ("finetune", "GPU")
    return row


def test_a_pair_keeps_the_activations_of_two_sequences(tmp_path: Path) -> None:
    dpo = finetune_gpu(config(tmp_path, "preference_tuning", 4))
    sft_4, sft_8 = (finetune_gpu(config(tmp_path, "instruction_tuning", n)) for n in (4, 8))
    activations = dpo.estimate.part("activations")
    assert activations == sft_8.estimate.part("activations")
    assert activations > sft_4.estimate.part("activations")
    # The model's states do not depend on the batch: DPO holds no second model.
    assert dpo.estimate.part("states") == sft_4.estimate.part("states")
    assert dpo.settings.startswith("bf16, micro-batch 4 rows × 2 sequences × 512 tokens, ")
    assert sft_4.settings.startswith("bf16, micro-batch 4 × 512 tokens, ")


def test_a_misfit_names_the_pairs_per_batch_and_the_most_that_fit(tmp_path: Path) -> None:
    slow = ("train.gradient_checkpointing=false",)
    dpo = finetune_gpu(config(tmp_path, "preference_tuning", 64, *slow))
    sft = finetune_gpu(config(tmp_path, "instruction_tuning", 64, *slow))
    assert dpo.problem is not None and sft.problem is not None
    assert dpo.problem.startswith("train.per_device_batch_size 64 needs ~")

    def most(problem: str) -> int:
        return int(problem.split("; at most ")[1].split(" fits")[0])

    # Activations grow with sequences: n pairs fit where 2n single sequences do.
    assert most(dpo.problem) == most(sft.problem) // 2 > 0


def test_auto_zero_stage_in_the_finetune_job_counts_both_answers(tmp_path: Path) -> None:
    """The job's own `zero_stage: auto` estimate, at the length preprocess wrote: a DPO
    micro-batch of 2 pairs weighs what an SFT one of 4 chats does."""
    (tmp_path / PREPROCESS_REPORT_FILE).write_text(json.dumps({"max_length": 64}))
    llama = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128}
    llama |= {"num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2}
    a100 = Place("a2-highgpu-1g", 85, ACCELERATORS["NVIDIA_TESLA_A100"], 1)

    def reason(task: str, batch: int) -> str:
        _, choice = resolve_zero_stage(
            TrainConfig(per_device_batch_size=batch),
            model=ModelConfig(architecture=llama, tokenizer=MINILM),
            task=task,
            dataset_dir=str(tmp_path),
            processes=1,
            nodes=1,
            place=lambda: a100,
        )
        return choice.reason

    assert reason("preference_tuning", 2) == reason("instruction_tuning", 4)
    assert reason("preference_tuning", 2) != reason("instruction_tuning", 2)


@pytest.mark.parametrize("task", ["preference_tuning", "instruction_tuning"])
def test_both_chat_tasks_read_the_whole_sequence_at_data_max_length(tmp_path, task) -> None:
    row = finetune_gpu(config(tmp_path, task, 1))
    assert "× 512 tokens" in row.settings


#: A Llama-3-8B-like shape: grouped keys and values (a small cache per token) and a 128k
#: vocabulary (large logits per token), where scoring pairs outweighs generating.
LLAMA_3_8B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
}


def evaluate_gpu(tmp_path: Path, task: str, batch: int):  # the evaluate step's GPU row
    body = {
        "task": task,
        "data": {"dataset": "Dahoas/rm-static", "columns": COLUMNS[task], "max_length": 2048},
        "model": {"architecture": LLAMA_3_8B, "tokenizer": MINILM},
        "train": {"precision": "bf16", "lora": {"r": 8}},
        "evaluate": {"batch_size": batch},
        "cluster": {"machine_type": "a2-ultragpu-1g", "accelerator_type": "NVIDIA_A100_80GB"},
    }
    path = tmp_path / f"{task}-eval-{batch}.json"
    path.write_text(json.dumps(body))
    rows = check_fit(load_config(path, []).config, target="vertex").rows
    return next(row for row in rows if (row.place, row.memory) == ("evaluate", "GPU"))


def test_evaluate_counts_the_pass_that_scores_every_pair_whole(tmp_path: Path) -> None:
    """DPO's evaluation also runs each pair's two answers whole through the model, keeping
    every position's logits (2 × batch × 2048 × 128k in bf16 at once): with a large
    vocabulary that, not generation, is its peak, and a batch too large for it is refused."""
    dpo, sft = (evaluate_gpu(tmp_path, task, 128) for task in COLUMNS)
    assert sft.problem is None  # generating for 128 prompts fits
    assert dpo.problem is not None and "scoring pass" in dpo.problem, dpo.problem
    assert dpo.problem.startswith("evaluate.batch_size 128 × num_beams 1 needs ~")
    logits = 2 * 128 * 2048 * LLAMA_3_8B["vocab_size"] * 2
    assert logits < dpo.estimate.part("scoring pass") < 1.1 * logits
    assert ", 2 × 128 sequences scored whole, " in dpo.settings
    fits = int(dpo.problem.split("; at most ")[1].split(" fits")[0])
    assert evaluate_gpu(tmp_path, "preference_tuning", fits).problem is None
    # With OPT's 50k vocabulary at 512 tokens, generating is the larger peak: the row is its.
    opt = config(tmp_path, "preference_tuning", 2, "evaluate.batch_size=16")
    row = next(row for row in check_fit(opt, target="vertex").rows if row.place == "evaluate")
    assert row.estimate.part("cache") > 0 and row.estimate.part("scoring pass") == 0
