"""Checkpoints in Cloud Storage (a real GCS JSON API on loopback): written, marked, resumed."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import fsspec
import pytest

from llm_pipeline.config import ClusterConfig, ModelConfig, TrainConfig
from llm_pipeline.train.checkpoints import MARKER
from llm_pipeline.train.job import run_finetune

pytestmark = pytest.mark.slow


def test_checkpoints_go_to_gcs_and_a_rerun_resumes_from_there(
    gcs_bucket: str,
    tokenized_docstrings: Path,
    tmp_path: Path,
    tiny_t5_model: ModelConfig,
    train_settings: Callable[..., TrainConfig],
) -> None:
    root = f"gs://{gcs_bucket}/checkpoints"
    step_args = {
        "dataset_dir": str(tokenized_docstrings),
        "output_dir": str(tmp_path / "model"),
        "model": tiny_t5_model,
        "train": train_settings(max_steps=6, save_steps=3, checkpoint_dir=root),
        "cluster": ClusterConfig(processes=2),
        # Vertex sets AIP_CHECKPOINT_DIR; here the config's checkpoint_dir is the one.
        "env": {k: v for k, v in os.environ.items() if k != "AIP_CHECKPOINT_DIR"},
    }

    first = run_finetune(**step_args)

    assert first.checkpoint_folder is not None and first.checkpoint_folder.startswith(root)
    gcs = fsspec.filesystem("gs")
    checkpoint = f"{first.checkpoint_folder}/checkpoint-3"
    names = {name.rsplit("/", 1)[1] for name in gcs.find(checkpoint)}
    assert MARKER in names
    # Both ranks uploaded their shards; the primary added the shared files.
    assert {
        "zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "zero_pp_rank_1_mp_rank_00_optim_states.pt",
        "rng_state_0.pth",
        "rng_state_1.pth",
        "trainer_state.json",
        "model.safetensors",
    } <= names
    assert first.metrics["resumed_from_step"] is None

    second = run_finetune(**step_args)

    assert second.metrics["resumed_from_step"] == 3
    assert second.metrics["global_step"] == 6
    assert second.metrics["train_samples"] == 3 * 2 * 4
    # Same data order and state after resuming: the same losses as the uninterrupted run.
    losses = {e["step"]: e["loss"] for e in first.log_history if "loss" in e}
    resumed = {e["step"]: e["loss"] for e in second.log_history if "loss" in e}
    assert resumed == pytest.approx(losses, rel=1e-5)
