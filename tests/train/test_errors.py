"""Failures a user can act on: a rank that raises, a rank that hangs, a model that won't load."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from llm_pipeline.config import ClusterConfig, ModelConfig, TrainConfig
from llm_pipeline.errors import ModelError, TrainError
from llm_pipeline.models.loading import load_model
from llm_pipeline.models.sources import load_tokenizer
from llm_pipeline.train.job import run_finetune

FAULTS = Path(__file__).parent / "faults"
Settings = Callable[..., TrainConfig]


def _env_with_fault(fault: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(FAULTS), env.get("PYTHONPATH")) if p)
    env["LLM_PIPELINE_TEST_FAULT"] = fault
    return env


@pytest.mark.slow
def test_a_rank_that_raises_fails_the_step_with_that_ranks_message(
    tokenized_docstrings_tiny: Path,
    tmp_path: Path,
    tiny_t5_model: ModelConfig,
    train_settings: Settings,
) -> None:
    with pytest.raises(TrainError) as caught:
        run_finetune(
            dataset_dir=str(tokenized_docstrings_tiny),
            output_dir=str(tmp_path / "model"),
            model=tiny_t5_model,
            train=train_settings(max_steps=2),
            cluster=ClusterConfig(processes=2),
            env=_env_with_fault("1:raise"),
        )
    message = str(caught.value)
    assert "rank 1" in message
    assert "injected failure on rank 1: the tokenizer exploded" in message
    assert not (tmp_path / "model").exists()


@pytest.mark.slow
def test_a_hung_rank_fails_the_step_after_the_collective_timeout(
    tokenized_docstrings_tiny: Path,
    tmp_path: Path,
    tiny_t5_model: ModelConfig,
    train_settings: Settings,
) -> None:
    started = time.monotonic()
    with pytest.raises(TrainError) as caught:
        run_finetune(
            dataset_dir=str(tokenized_docstrings_tiny),
            output_dir=str(tmp_path / "model"),
            model=tiny_t5_model,
            train=train_settings(max_steps=2, collective_timeout_s=10),
            cluster=ClusterConfig(processes=2),
            env=_env_with_fault("1:hang"),
        )
    elapsed = time.monotonic() - started
    message = str(caught.value)
    assert "rank 0" in message and "collective_timeout_s (10 s)" in message
    # Start-up takes ~15 s on two cores; without the timeout this would wait an hour.
    assert elapsed < 120


@pytest.mark.slow
def test_a_model_source_that_cannot_load_names_what_was_tried(
    tokenized_docstrings_tiny: Path, tmp_path: Path, train_settings: Settings, minilm: str
) -> None:
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    with pytest.raises(TrainError) as caught:
        run_finetune(
            dataset_dir=str(tokenized_docstrings_tiny),
            output_dir=str(tmp_path / "model"),
            model=ModelConfig(source=str(empty), tokenizer=minilm),
            train=train_settings(max_steps=1),
            cluster=ClusterConfig(processes=1),
            env=dict(os.environ),
        )
    message = str(caught.value)
    assert f"model.source '{empty}'" in message and f"folder {empty}" in message


def test_missing_local_model_folder_is_named(tiny_t5_model: ModelConfig, minilm: str) -> None:
    tokenizer = load_tokenizer(tiny_t5_model)
    with pytest.raises(ModelError, match=r"model.source '/no/such/model': .*no such local folder"):
        load_model(ModelConfig(source="/no/such/model", tokenizer=minilm), tokenizer)


def test_unloadable_encoder_names_both_checkpoints(
    tmp_path: Path, tiny_t5_model: ModelConfig, minilm: str
) -> None:
    tokenizer = load_tokenizer(tiny_t5_model)
    empty = tmp_path / "empty"
    empty.mkdir()
    config = ModelConfig(encoder_decoder={"encoder": str(empty), "decoder": minilm})
    with pytest.raises(ModelError) as caught:
        load_model(config, tokenizer)
    message = str(caught.value)
    assert f"encoder '{empty}' (folder {empty})" in message
    assert f"decoder '{minilm}'" in message


def test_unknown_architecture_is_refused_with_its_model_type(
    tiny_t5_model: ModelConfig, minilm: str
) -> None:
    tokenizer = load_tokenizer(tiny_t5_model)
    config = ModelConfig(architecture={"model_type": "no-such-model"}, tokenizer=minilm)
    with pytest.raises(ModelError, match="model_type 'no-such-model'"):
        load_model(config, tokenizer)


def test_the_ranks_are_told_the_processes_per_node_as_deepspeeds_launcher_tells_them(
    tmp_path: Path,
    tiny_t5_model: ModelConfig,
    train_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """LOCAL_SIZE reaches the ranks: without it DeepSpeed's CPU accelerator forks `numactl`
    at every `device_count()`, dozens of times a step."""
    import llm_pipeline.train.job as job

    seen: dict[str, str] = {}

    class Launched(Exception):
        pass

    def launcher(command: object, *, env: dict[str, str], log_dir: Path) -> None:
        seen.update(env)
        raise Launched

    monkeypatch.setattr(job, "run_launcher", launcher)
    env = {k: v for k, v in os.environ.items() if k != "LOCAL_SIZE"}
    with pytest.raises(Launched):
        run_finetune(
            dataset_dir=str(tmp_path / "data"),
            output_dir=str(tmp_path / "model"),
            model=tiny_t5_model,
            train=train_settings(),
            cluster=ClusterConfig(processes=2),
            env=env,
        )
    assert seen["LOCAL_SIZE"] == "2"
