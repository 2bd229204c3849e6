"""ZeRO-3 on two CPU processes (torchrun, gloo): it learns, its model reloads, its numbers match.

These run the real stack: torchrun, DeepSpeed ZeRO-3 over gloo, the Hugging Face Trainer,
MiniLM's tokenizer and real docstring text (tests/docstring_data.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from llm_pipeline.config import ClusterConfig, ModelConfig, TrainConfig
from llm_pipeline.launch.cluster import detect_cluster
from llm_pipeline.launch.commands import torchrun_command
from llm_pipeline.models.loading import load_model
from llm_pipeline.models.sources import load_tokenizer
from llm_pipeline.train.job import WORKER_MODULE, run_finetune
from llm_pipeline.train.spec import WorkerSpec

pytestmark = pytest.mark.slow
Settings = Callable[..., TrainConfig]


def test_two_process_zero3_trains_and_saves_a_model_that_reloads(
    tokenized_docstrings: Path, tmp_path: Path, tiny_t5_model: ModelConfig, train_settings: Settings
) -> None:
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    output = tmp_path / "model"
    result = run_finetune(
        dataset_dir=str(tokenized_docstrings),
        output_dir=str(output),
        model=tiny_t5_model,
        train=train_settings(max_steps=16, save_steps=8, learning_rate=1e-2),
        cluster=ClusterConfig(processes=2),
        tensorboard_dir=str(tmp_path / "tensorboard"),
        env=dict(os.environ),
    )

    losses = [e["loss"] for e in result.log_history if "loss" in e]
    assert len(losses) == 16
    # The last four steps average at least a nat below the first four: learning, not noise
    # (step-to-step noise on these batches is a few tenths).
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 - 1.0
    metrics = result.metrics
    assert metrics["global_step"] == 16 and metrics["world_size"] == 2
    assert metrics["zero_stage"] == 3 and result.zero_stage == "3 (train.zero_stage)"
    assert metrics["train_samples"] == 16 * 2 * 4
    assert metrics["train_tokens_per_second"] > 0 and metrics["train_tflops_per_second"] > 0
    # After the first step's warm-up (its share of the tokens left out), a real window.
    assert metrics["train_steady_tokens_per_second"] > 0
    assert metrics["train_steady_tflops_per_second"] > 0
    assert metrics["eval_loss"] is not None and metrics["mfu"] is None  # no GPU here
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= {
        p.name for p in output.iterdir()
    }
    assert not list(output.glob("*.bin")), "weights must be safetensors only"
    resolved = json.loads((output / "llm_pipeline_config.json").read_text())
    assert resolved["resolved"]["deepspeed"]["zero_optimization"]["stage"] == 3
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))

    model = AutoModelForSeq2SeqLM.from_pretrained(output)
    tokenizer = AutoTokenizer.from_pretrained(output)
    batch = tokenizer(
        ["#Person1#: Where is the station? #Person2#: Turn left."], return_tensors="pt"
    )
    generated = model.generate(**batch, max_new_tokens=8)
    assert generated.shape[0] == 1 and generated.shape[1] > 1
    assert isinstance(tokenizer.decode(generated[0], skip_special_tokens=True), str)


def _worker_run(spec: WorkerSpec, *, processes: int, sampling: str) -> list[float]:
    """Start the worker module under torchrun as run_finetune does, on a fixed order."""
    spec_path = Path(spec.work_dir) / "spec.json"
    Path(spec.work_dir).mkdir(parents=True)
    spec.write(spec_path)
    info = detect_cluster({}, procs_per_node=processes)
    command = torchrun_command(
        info, script_args=["--spec", str(spec_path), "--sampling", sampling], module=WORKER_MODULE
    )
    subprocess.run(command, check=True, timeout=600)
    log = json.loads(spec.result_path.read_text())["log"]
    return [entry["loss"] for entry in log if "loss" in entry]


def test_zero3_on_two_processes_matches_plain_single_process_training(
    tokenized_docstrings: Path,
    tmp_path: Path,
    tiny_t5_model: ModelConfig,
    train_settings: Settings,
    minilm: str,
) -> None:
    """Same initial weights, same global batches in the same order, same losses.

    ZeRO-3 partitions parameters, gradients and optimizer states and reduces gradients over
    gloo; none of that should change the arithmetic beyond float32 summation order. Tolerance:
    relative 1e-4 per step over the first 6 steps.
    """
    initial = tmp_path / "initial"
    tokenizer = load_tokenizer(tiny_t5_model)
    torch.manual_seed(0)
    load_model(tiny_t5_model, tokenizer).save_pretrained(initial)
    model = ModelConfig(source=str(initial), tokenizer=minilm)

    def spec(name: str, processes: int, **train: Any) -> WorkerSpec:
        return WorkerSpec(
            dataset_dir=str(tokenized_docstrings),
            output_dir=str(tmp_path / name / "model"),
            model=model,
            train=train_settings(max_steps=6, save_steps=100, lr_scheduler="constant", **train),
            checkpoint_root=str(tmp_path / name / "checkpoints"),
            tensorboard_dir=None,
            tensorboard_mirror=None,
            work_dir=str(tmp_path / name / "work"),
            node_count=1,
            procs_per_node=processes,
        )

    # One global batch of 4 either way: 2 processes x 2, or 1 process x 4.
    zero3 = spec("zero3", 2, per_device_batch_size=2, zero_stage=3)
    plain = spec("plain", 1, per_device_batch_size=4, zero_stage=0)

    zero3_losses = _worker_run(zero3, processes=2, sampling="sequential")
    plain_losses = _worker_run(plain, processes=1, sampling="sequential")

    assert len(zero3_losses) == len(plain_losses) == 6
    assert zero3_losses == pytest.approx(plain_losses, rel=1e-4)
    assert plain_losses[-1] < plain_losses[0]
