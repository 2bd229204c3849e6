"""Preference tuning (DPO) trains through the same finetune step: the pair columns reach the
collator, the loss is DPO's against the reference, the reward figures are logged and shown;
and under ZeRO-3 on two ranks, LoRA (the reference is the base with adapters off) and full
fine-tuning (the reference taken once, kept beside the checkpoints) are killed and resume.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import datasets
import pytest

from llm_pipeline.config import ClusterConfig, LoraSettings, ModelConfig, TrainConfig
from llm_pipeline.errors import TrainError
from llm_pipeline.models.sources import load_tokenizer
from llm_pipeline.tasks import get_task
from llm_pipeline.tasks.preference_tuning.training import REFERENCE_FILE

from ..offline_models import TINY_LLAMA
from .kill_and_resume import complete_checkpoints, kill_rank_after_a_checkpoint

TASK = get_task("preference_tuning")


def _model(tokenized: Path) -> ModelConfig:
    return ModelConfig(architecture=dict(TINY_LLAMA), tokenizer=str(tokenized.parent / "tokenizer"))


def _trainer(tokenized: Path, keep: Path, train: TrainConfig, *, evaluate: bool = False) -> Any:
    """One process, no DeepSpeed, full DPO; the validation split too when `evaluate`."""
    from llm_pipeline.train.status import TrainingStatus
    from llm_pipeline.train.trainer import build_trainer
    from llm_pipeline.train.trainer_settings import training_arguments

    config = _model(tokenized)
    tokenizer = load_tokenizer(config, kind=TASK.model_kind)
    splits = datasets.load_from_disk(str(tokenized))
    columns = list(TASK.training_columns or ())
    return build_trainer(
        model=TASK.build_model(config, tokenizer),
        tokenizer=tokenizer,
        args=training_arguments(
            train,
            output_dir=str(keep),
            precision="fp32",
            deepspeed=None,
            save_on_each_node=False,
            has_eval=evaluate,
            kind=TASK.model_kind,
            keep_columns=TASK.training_columns is not None,
        ),
        train_dataset=splits["train"].select_columns(columns),
        eval_dataset=splits["validation"].select_columns(columns) if evaluate else None,
        callbacks=[TrainingStatus(figures=TASK.training_figures)],
        sampling="group_by_length",
        task=TASK,
        train=train,
        keep_folder=str(keep),
    )


def test_full_dpo_starts_from_the_reference_and_logs_its_rewards(
    tokenized_preferences: Path,
    tmp_path: Path,
    train_settings: Callable[..., TrainConfig],
    one_process_group: None,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """One process, no DeepSpeed: the first step's policy is the reference, so its loss is
    -log σ(0) = log 2 and its margin 0; the reference was kept for a resumed run."""
    train = train_settings(zero_stage=0, max_steps=3, learning_rate=1e-2)
    splits = datasets.load_from_disk(str(tokenized_preferences))
    keep = tmp_path / "checkpoints"
    trainer = _trainer(tokenized_preferences, keep, train)
    trainer.train()

    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 3
    assert logged[0]["loss"] == pytest.approx(math.log(2), abs=1e-4)
    assert logged[0]["reward_margin"] == pytest.approx(0, abs=1e-4)
    # After a step the policy is no longer the reference: its rewards move off zero.
    # (Both answers' rewards: on some rows one of them barely moves in two small steps.)
    assert all(
        abs(entry["reward_chosen"]) + abs(entry["reward_rejected"]) > 1e-6 for entry in logged[1:]
    )
    assert all(0 <= entry["reward_accuracy"] <= 1 for entry in logged)
    kept = json.loads((keep / REFERENCE_FILE).read_text())
    assert len(kept["train"]["ref_chosen_logps"]) == len(splits["train"])
    assert "step 1/3 · loss 0.693 · reward accuracy 0.000 · reward margin 0.000" in (
        capfd.readouterr().out
    )
    assert trainer.trained_counts()[0] == 3 * 4 * 2  # both answers of 4 pairs a step


def test_an_evaluation_logs_the_rewards_on_the_validation_pairs(
    tokenized_preferences: Path,
    tmp_path: Path,
    train_settings: Callable[..., TrainConfig],
    one_process_group: None,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """As TRL logs `eval_rewards/*`: the validation pairs' reward figures beside the eval
    loss, shown on its status line."""
    train = train_settings(zero_stage=0, max_steps=2, eval_steps=2, learning_rate=1e-2)
    trainer = _trainer(tokenized_preferences, tmp_path / "checkpoints", train, evaluate=True)
    trainer.train()

    (logged,) = [entry for entry in trainer.state.log_history if "eval_loss" in entry]
    assert {f"eval_{name}" for name in TASK.training_figures} <= set(logged)
    assert 0 <= logged["eval_reward_accuracy"] <= 1
    assert logged["eval_reward_margin"] == pytest.approx(
        logged["eval_reward_chosen"] - logged["eval_reward_rejected"], abs=1e-5
    )
    shown = capfd.readouterr().out
    assert f"eval reward accuracy {logged['eval_reward_accuracy']:.3f}" in shown
    assert f"eval rejected reward {logged['eval_reward_rejected']:.3f}" in shown


def _kill_and_resume(
    tokenized: Path,
    tmp_path: Path,
    train: TrainConfig,
    capfd: pytest.CaptureFixture[str],
    *,
    between: Callable[[Path], Any] = lambda checkpoints: None,
) -> tuple[Any, Path]:
    """Two ranks under ZeRO-3, SIGKILLed after a checkpoint, rerun: the rerun resumes from
    it and loses on the steps the first attempt ran past it as that attempt did."""
    from llm_pipeline.train.job import run_finetune

    max_steps = train.max_steps
    assert max_steps is not None
    checkpoints = tmp_path / "checkpoints"
    step_args: dict[str, Any] = {
        "dataset_dir": str(tokenized),
        "output_dir": str(tmp_path / "model"),
        "model": _model(tokenized),
        "train": train,
        "cluster": ClusterConfig(processes=2),
        "env": dict(os.environ),
        "task": "preference_tuning",
    }
    error, first_losses = kill_rank_after_a_checkpoint(
        step_args, checkpoints=checkpoints, max_steps=max_steps, capfd=capfd
    )
    assert isinstance(error, TrainError), error
    assert "rank 1" in str(error) and "signal 9" in str(error)
    newest = max(complete_checkpoints(checkpoints))
    before_kill = {step: loss for step, loss in first_losses.items() if step > newest}
    assert before_kill
    between(checkpoints)

    result = run_finetune(**step_args)

    assert result.metrics["resumed_from_step"] == newest
    assert result.metrics["global_step"] == max_steps
    resumed = {entry["step"]: entry["loss"] for entry in result.log_history if "loss" in entry}
    for step, loss in before_kill.items():
        assert resumed[step] == pytest.approx(loss, abs=1e-3), (step, resumed[step], loss)
    assert 0 <= result.metrics["train_reward_accuracy"] <= 1
    assert result.metrics["train_reward_margin"] is not None
    assert 0 <= result.metrics["eval_reward_accuracy"] <= 1
    resolved = json.loads((tmp_path / "model" / "llm_pipeline_config.json").read_text())
    assert resolved["resolved"]["deepspeed"]["zero_optimization"]["stage"] == 3
    return result, checkpoints


@pytest.mark.slow
def test_zero3_lora_dpo_on_two_ranks_is_killed_and_resumes(
    tokenized_preferences: Path,
    tmp_path: Path,
    train_settings: Callable[..., TrainConfig],
    capfd: pytest.CaptureFixture[str],
) -> None:
    """LoRA: the reference is the model with its adapters off, so nothing is kept for it."""
    train = train_settings(
        max_steps=6, save_steps=2, learning_rate=5e-2, lora=LoraSettings(r=4, alpha=8)
    )
    result, checkpoints = _kill_and_resume(tokenized_preferences, tmp_path, train, capfd)
    assert not list(checkpoints.glob(f"run-*/{REFERENCE_FILE}"))
    first = next(entry for entry in result.log_history if entry.get("step") == 1)
    assert first["loss"] == pytest.approx(math.log(2), abs=1e-4)  # B = 0: policy = base


@pytest.mark.slow
def test_zero3_full_dpo_on_two_ranks_resumes_with_the_kept_reference(
    tokenized_preferences: Path,
    tmp_path: Path,
    train_settings: Callable[..., TrainConfig],
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Full fine-tuning: the reference pass ran once, before the first step; the resumed
    run read it back (not rewritten) instead of scoring with its trained weights (which
    would move the resumed steps' losses off the first attempt's)."""
    kept: dict[str, Any] = {}

    def remember(checkpoints: Path) -> None:
        (path,) = checkpoints.glob(f"run-*/{REFERENCE_FILE}")
        kept.update(path=path, text=path.read_text(), mtime=path.stat().st_mtime_ns)

    train = train_settings(max_steps=6, save_steps=2, learning_rate=5e-2)
    _kill_and_resume(tokenized_preferences, tmp_path, train, capfd, between=remember)
    assert kept["path"].read_text() == kept["text"]
    assert kept["path"].stat().st_mtime_ns == kept["mtime"]
    columns = json.loads(kept["text"])
    assert set(columns) == {"train", "validation"}
    assert len(columns["train"]["ref_chosen_logps"]) == 32
