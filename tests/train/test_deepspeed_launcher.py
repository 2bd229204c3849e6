"""`cluster.launcher: deepspeed` on one node: DeepSpeed's own launcher starts the ranks."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from llm_pipeline.config import ClusterConfig, ModelConfig, TrainConfig
from llm_pipeline.train import FinetuneResult, TrainError, run_finetune


@pytest.mark.slow
def test_deepspeed_launcher_trains_on_one_node(
    tokenized_docstrings_tiny: Path,
    tmp_path: Path,
    tiny_t5_model: ModelConfig,
    train_settings: Callable[..., TrainConfig],
) -> None:
    result = run_finetune(
        dataset_dir=str(tokenized_docstrings_tiny),
        output_dir=str(tmp_path / "model"),
        model=tiny_t5_model,
        train=train_settings(max_steps=2),
        cluster=ClusterConfig(processes=2, launcher="deepspeed"),
        env=dict(os.environ),
    )
    assert isinstance(result, FinetuneResult) and result.is_primary
    assert result.metrics["world_size"] == 2 and result.metrics["global_step"] == 2
    assert (tmp_path / "model" / "model.safetensors").is_file()


def test_a_replica_outside_the_training_pools_trains_nothing(
    tmp_path: Path, tiny_t5_model: ModelConfig
) -> None:
    spec = (
        '{"cluster": {"workerpool0": ["a:2222"], "workerpool2": ["c:2222"]},'
        ' "task": {"type": "workerpool2", "index": 0}}'
    )
    result = run_finetune(
        dataset_dir=str(tmp_path / "data"),
        output_dir=str(tmp_path / "model"),
        model=tiny_t5_model,
        train=TrainConfig(),
        cluster=ClusterConfig(),
        env={"CLUSTER_SPEC": spec},
    )
    assert not result.is_primary and result.output_dir is None
    assert "not a training node" in result.message


def test_an_object_store_output_folder_is_refused(
    tmp_path: Path, tiny_t5_model: ModelConfig
) -> None:
    with pytest.raises(TrainError, match="must be a local path"):
        run_finetune(
            dataset_dir=str(tmp_path),
            output_dir="gs://bucket/model",
            model=tiny_t5_model,
            train=TrainConfig(),
            cluster=ClusterConfig(),
            env={},
        )
