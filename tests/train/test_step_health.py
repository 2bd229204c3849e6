"""Lost optimizer steps are counted, said, and stop a run most of whose recent steps are lost.

The non-finite gradients are real: the loss of chosen steps is made NaN, so backward fills
the gradients with NaN, as an overflow would in a real run.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from llm_pipeline.config import ClusterConfig, ModelConfig, TrainConfig
from llm_pipeline.errors import TrainError
from llm_pipeline.tasks import get_task
from llm_pipeline.train.step_health import (
    MOST_OF_RECENT,
    RECENT_STEPS,
    StepHealth,
    lost_steps_error,
)

FAULTS = Path(__file__).parent / "faults"
NAN = float("nan")


def test_non_finite_norms_are_counted_and_the_window_keeps_the_latest_steps() -> None:
    health = StepHealth()
    for norm in [1.0, NAN, math.inf, 2.0]:
        health.record(torch.tensor(norm))
    counts = health.read()
    assert (counts.steps, counts.skipped, counts.nonfinite, counts.recent_lost) == (4, 0, 2, 2)
    for _ in range(RECENT_STEPS - 1):  # the second and third steps leave the window
        health.record(torch.tensor(0.5))
    counts = health.read()
    assert counts.nonfinite == 2 and counts.recent_lost == 0


def test_deepspeeds_skips_come_from_its_engine_and_its_norm_is_a_float() -> None:
    health = StepHealth(skips_nonfinite=True)
    health.record(1.0)
    health.record(math.inf, skipped=True)
    health.record(None, skipped=True)  # ZeRO-1/2 without a norm: the skip still counts
    counts = health.read()
    assert (counts.skipped, counts.nonfinite, counts.recent_lost) == (2, 1, 2)
    assert counts.as_logs() == {"skipped_steps": 2.0, "nonfinite_steps": 1.0}


def test_fp16s_grad_scaler_skips_every_non_finite_step() -> None:
    health = StepHealth(scaler_skips=True)
    health.record(torch.tensor(math.inf))
    health.record(torch.tensor(3.0))
    assert health.read().skipped == 1


def test_more_than_half_of_the_recent_steps_lost_stops_the_run() -> None:
    health = StepHealth(skips_nonfinite=True)
    for _ in range(MOST_OF_RECENT):
        health.record(math.inf, skipped=True)
    assert lost_steps_error(health.read(), step=10) is None
    health.record(math.inf, skipped=True)
    error = lost_steps_error(health.read(), step=11)
    assert error is not None
    message = str(error)
    assert message.startswith(
        f"training stopped at step 11: {MOST_OF_RECENT + 1} of the last {MOST_OF_RECENT + 1} "
        "optimizer steps had non-finite gradients (inf or NaN) and were skipped"
    )
    assert "\n" not in message
    assert "train.learning_rate" in message and "fp16" in message and "data" in message


def test_a_stop_without_skipping_says_the_weights_are_damaged() -> None:
    health = StepHealth()
    for _ in range(RECENT_STEPS):
        health.record(torch.tensor(NAN))
    error = lost_steps_error(health.read(), step=30)
    assert error is not None and "reached the weights" in str(error)


Settings = Callable[..., TrainConfig]


@pytest.fixture
def accelerator_state() -> Iterator[None]:
    yield
    from accelerate.state import AcceleratorState

    # The Trainer's process state is a singleton; later tests set up their own.
    AcceleratorState._reset_state(reset_partial_state=True)


def _plain_trainer(
    dataset: Path, model_config: ModelConfig, folder: Path, *, steps: int, nan_at: set[int]
) -> Any:
    """The project's Trainer without DeepSpeed, fp32, in this process, its loss NaN in the
    optimizer steps `nan_at` (counted from 1)."""
    from datasets import load_from_disk
    from transformers import Seq2SeqTrainingArguments

    from llm_pipeline.models.loading import load_model
    from llm_pipeline.models.sources import load_tokenizer
    from llm_pipeline.train.trainer import build_trainer

    tokenizer = load_tokenizer(model_config)
    torch.manual_seed(0)
    trainer = build_trainer(
        model=load_model(model_config, tokenizer),
        tokenizer=tokenizer,
        # One process without a process group (`training_arguments` sets up gloo for torchrun).
        args=Seq2SeqTrainingArguments(
            output_dir=str(folder / "checkpoints"),
            max_steps=steps,
            per_device_train_batch_size=2,
            learning_rate=1e-3,
            logging_steps=1,
            use_cpu=True,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
        ),
        train_dataset=load_from_disk(str(dataset))["train"],
        eval_dataset=None,
        callbacks=[],
        sampling="sequential",
        task=get_task("summarization"),
    )
    compute_loss = trainer.compute_loss

    def nan_in_chosen_steps(*args: Any, **kwargs: Any) -> Any:
        loss = compute_loss(*args, **kwargs)
        return loss * NAN if trainer.state.global_step + 1 in nan_at else loss

    trainer.compute_loss = nan_in_chosen_steps
    return trainer


def test_the_plain_trainer_counts_poisoned_steps_and_stops_once_most_recent_are_lost(
    tokenized_docstrings_tiny: Path,
    tiny_t5_model: ModelConfig,
    tmp_path: Path,
    accelerator_state: None,
) -> None:
    """Without DeepSpeed nothing skips: step 3's NaN gradient reaches the weights, and every
    step after it is non-finite too. Each period's log entry counts them; the eleventh lost
    step in twenty stops the run, instead of training on NaN to step 40."""
    trainer = _plain_trainer(
        tokenized_docstrings_tiny, tiny_t5_model, tmp_path, steps=40, nan_at={3}
    )
    with pytest.raises(TrainError) as caught:
        trainer.train()
    stop = 3 + MOST_OF_RECENT
    assert trainer.state.global_step == stop
    periods = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry["nonfinite_steps"] for entry in periods] == [0, 0, *range(1, stop - 1)]
    assert all(entry["skipped_steps"] == 0 for entry in periods)
    assert all(torch.isnan(p).any() for p in trainer.model.parameters() if p.requires_grad)
    assert str(caught.value).startswith(
        f"training stopped at step {stop}: {MOST_OF_RECENT + 1} of the last {stop} optimizer "
        "steps had non-finite gradients (inf or NaN) and reached the weights"
    )


@pytest.mark.slow
def test_deepspeed_zero3_in_bf16_skips_non_finite_steps_and_the_metrics_say_so(
    tokenized_docstrings_tiny: Path,
    tmp_path: Path,
    tiny_t5_model: ModelConfig,
    train_settings: Settings,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The GPU run's setting (ZeRO-3, bf16) on one CPU process: DeepSpeed skips the two
    steps whose loss is NaN, the weights survive them, and the step's metrics, log and
    status lines say how many were lost."""
    from llm_pipeline.train.job import run_finetune

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(FAULTS), env.get("PYTHONPATH")) if p)
    env["LLM_PIPELINE_TEST_FAULT"] = "0:nan-loss@3,5"
    result = run_finetune(
        dataset_dir=str(tokenized_docstrings_tiny),
        output_dir=str(tmp_path / "model"),
        model=tiny_t5_model,
        train=train_settings(
            max_steps=6, save_steps=100, use_deepspeed=True, zero_stage=3, precision="bf16"
        ),
        cluster=ClusterConfig(processes=1),
        env=env,
    )
    assert result.metrics["skipped_steps"] == 2 and result.metrics["nonfinite_steps"] == 2
    periods = [entry for entry in result.log_history if "loss" in entry]
    assert [entry["skipped_steps"] for entry in periods] == [0, 0, 1, 1, 2, 2]
    # Skipped, not applied: the steps after each NaN one train on finite weights.
    assert all(math.isfinite(entry["grad_norm"]) for entry in periods[5:])
    output = capfd.readouterr().out
    assert "warning: 1 of the last 1 steps skipped, their gradients not finite" in output
    assert "(2 skipped in this run)" in output
