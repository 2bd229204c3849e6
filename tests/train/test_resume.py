"""A job whose rank is killed mid-training resumes, on rerun, from its last complete checkpoint.

The run trains LoRA adapters (`train.lora`) under ZeRO-3 on two ranks, so the adapters'
state is what the checkpoint must carry; a full fine-tuning run is killed and resumed in
tests/train/test_preemption.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file

from llm_pipeline.config import ClusterConfig, LoraSettings, ModelConfig, TrainConfig
from llm_pipeline.errors import TrainError
from llm_pipeline.train.job import run_finetune
from llm_pipeline.train.safe_load import safe_torch_load

from .kill_and_resume import complete_checkpoints, kill_rank_after_a_checkpoint
from .lora_checks import assert_merged_is_base_plus_adapter

pytestmark = pytest.mark.slow

MAX_STEPS, SAVE_STEPS = 16, 4


def _assert_whole(checkpoint: Path, step: int) -> None:
    """Every rank's files are there and load (safely); the state says the same step."""
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert state["global_step"] == step
    for rank in (0, 1):
        assert (checkpoint / f"rng_state_{rank}.pth").is_file()
        for kind in ("model_states", "optim_states"):
            shard = checkpoint / f"global_step{step}" / f"zero_pp_rank_{rank}_mp_rank_00_{kind}.pt"
            assert safe_torch_load(str(shard), map_location="cpu")
    # The adapter alone, readable without DeepSpeed; the frozen base is not copied.
    assert load_file(checkpoint / "adapter_model.safetensors")
    assert not (checkpoint / "model.safetensors").exists()


def test_killed_rank_of_a_lora_run_resumes_from_the_last_complete_checkpoint(
    tokenized_docstrings: Path,
    tmp_path: Path,
    tiny_t5_folder: Path,
    train_settings: Callable[..., TrainConfig],
    capfd: pytest.CaptureFixture[str],
) -> None:
    output = tmp_path / "model"
    checkpoints = tmp_path / "checkpoints"  # the default: beside the output folder
    step_args: dict[str, Any] = {
        "dataset_dir": str(tokenized_docstrings),
        "output_dir": str(output),
        "model": ModelConfig(source=str(tiny_t5_folder)),
        "train": train_settings(
            max_steps=MAX_STEPS,
            save_steps=SAVE_STEPS,
            save_total_limit=2,
            learning_rate=1e-2,
            lora=LoraSettings(r=8),
        ),
        "cluster": ClusterConfig(processes=2),
        "env": dict(os.environ),
    }
    error, first_losses = kill_rank_after_a_checkpoint(
        step_args, checkpoints=checkpoints, max_steps=MAX_STEPS, capfd=capfd
    )

    assert isinstance(error, TrainError), error
    assert "rank 1" in str(error) and "signal 9" in str(error)
    assert not output.exists(), "a failed run must not leave a model folder"
    complete = complete_checkpoints(checkpoints)
    for step, folder in complete.items():
        _assert_whole(folder, step)
    newest = max(complete)
    assert newest < MAX_STEPS
    before_kill = {step: loss for step, loss in first_losses.items() if step > newest}
    assert before_kill, "the first attempt logged no step after its checkpoint"

    result = run_finetune(**step_args)

    metrics = result.metrics
    assert metrics["resumed_from_step"] == newest
    assert metrics["global_step"] == MAX_STEPS
    # This run trained only the steps after the checkpoint: 2 ranks x 4 examples each.
    assert metrics["train_samples"] == (MAX_STEPS - newest) * 2 * 4
    logged = [entry["step"] for entry in result.log_history if "loss" in entry]
    assert logged == list(range(1, MAX_STEPS + 1)), "every step logged exactly once"
    # The adapters resumed where the checkpoint left them, with their optimizer state, the
    # data order and the dropout's random state: steps both attempts ran lose the same.
    resumed = {entry["step"]: entry["loss"] for entry in result.log_history if "loss" in entry}
    for step, loss in before_kill.items():
        assert resumed[step] == pytest.approx(loss, abs=1e-3), (step, resumed[step], loss)
    assert (output / "model.safetensors").is_file()
    assert_merged_is_base_plus_adapter(output, tiny_t5_folder)
    # save_total_limit 2; no checkpoint of the final step (the model is saved right after);
    # whatever the kill left half-written was cleaned up, not resumed from.
    assert sorted(complete_checkpoints(checkpoints)) == [8, 12]
    folders = sorted(int(p.name.split("-")[1]) for p in checkpoints.glob("run-*/checkpoint-*"))
    assert folders == [8, 12]
