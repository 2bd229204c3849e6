"""The Hugging Face pieces built from TrainConfig: DeepSpeed settings, order, loss, spec."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from llm_pipeline.config import LoraSettings, ModelConfig, TrainConfig
from llm_pipeline.errors import TrainError
from llm_pipeline.launch.node_files import NODE_DIR_ENV
from llm_pipeline.tasks import get_task
from llm_pipeline.train.spec import WorkerSpec
from llm_pipeline.train.trainer import EpochSeededLengthGroupedSampler, token_mean_loss
from llm_pipeline.train.trainer_settings import deepspeed_settings
from llm_pipeline.train.worker import largest_adapter

from ..fit.tiny_classifiers import TINY_BERT
from ..offline_models import MINILM, TINY_LLAMA
from .specs import unrun_spec


def test_no_deepspeed_config_when_deepspeed_is_off() -> None:
    for train in (TrainConfig(use_deepspeed=False), TrainConfig(zero_stage=0)):
        assert deepspeed_settings(train, precision="fp32", world_size=2, hidden_size=32) is None


def test_an_unresolved_auto_stage_is_refused_in_a_training_process() -> None:
    with pytest.raises(TrainError, match=r'train\.zero_stage "auto" reached a training process'):
        deepspeed_settings(TrainConfig(), precision="fp32", world_size=1, hidden_size=None)


def test_generated_config_has_explicit_batch_sizes() -> None:
    train = TrainConfig(per_device_batch_size=4, gradient_accumulation_steps=2, zero_stage=3)
    config = deepspeed_settings(train, precision="fp32", world_size=3, hidden_size=32)
    assert config is not None
    assert config["train_micro_batch_size_per_gpu"] == 4
    assert config["train_batch_size"] == 4 * 2 * 3
    assert config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True


def test_lora_runs_keep_their_largest_adapter_whole_under_zero3() -> None:
    def threshold(train: TrainConfig) -> object:
        config = deepspeed_settings(
            train, precision="fp32", world_size=2, hidden_size=32, largest_adapter=16 * 64
        )
        assert config is not None
        return config["zero_optimization"]["stage3_param_persistence_threshold"]

    assert threshold(TrainConfig(zero_stage=3, lora=LoraSettings(r=16))) == 16 * 64
    # Without LoRA nothing is adapted, whatever a caller passes: 10 x hidden size.
    assert threshold(TrainConfig(zero_stage=3)) == 320


def test_the_workers_adapter_size_is_the_fit_checks_count() -> None:
    """What the finetune step's worker passes (from the config alone, before any weight
    loads): TINY_LLAMA, r 16 on every linear layer, largest A or B is 16 x 64."""
    spec = unrun_spec(
        ModelConfig(architecture=dict(TINY_LLAMA), tokenizer=MINILM),
        TrainConfig(lora=LoraSettings(r=16)),
    )
    llm = get_task("instruction_tuning")
    assert largest_adapter(spec, llm) == 16 * TINY_LLAMA["intermediate_size"]
    assert largest_adapter(replace(spec, train=TrainConfig()), llm) is None
    # A classifier's shape is read by its task's own terms: a tiny BERT's widest linear.
    bert = ModelConfig(architecture=dict(TINY_BERT), tokenizer=MINILM)
    classify = get_task("text_classification")
    assert (
        largest_adapter(replace(spec, model=bert), classify) == 16 * TINY_BERT["intermediate_size"]
    )


def test_a_users_json_is_taken_whole_with_auto_batch_sizes_filled(tmp_path: Path) -> None:
    user = {
        "train_micro_batch_size_per_gpu": "auto",
        "train_batch_size": "auto",
        "zero_optimization": {"stage": 3, "overlap_comm": False},
        "custom": 1,
    }
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(user))
    train = TrainConfig(per_device_batch_size=2, deepspeed_config=str(path))
    config = deepspeed_settings(train, precision="fp32", world_size=4, hidden_size=None)
    assert config is not None
    assert config["custom"] == 1 and config["zero_optimization"]["overlap_comm"] is False
    assert config["train_micro_batch_size_per_gpu"] == 2 and config["train_batch_size"] == 8
    assert config["gradient_accumulation_steps"] == 1


def test_an_unreadable_users_json_is_a_train_error(tmp_path: Path) -> None:
    train = TrainConfig(deepspeed_config=str(tmp_path / "missing.json"))
    with pytest.raises(TrainError, match=r"train\.deepspeed_config: .*missing\.json"):
        deepspeed_settings(train, precision="fp32", world_size=1, hidden_size=None)


def test_length_grouped_order_depends_only_on_seed_and_epoch() -> None:
    lengths = [(i * 37) % 50 + 1 for i in range(200)]

    def order(epoch: int, seed: int = 3) -> list[int]:
        sampler = EpochSeededLengthGroupedSampler(lengths=lengths, batch_size=8, seed=seed)
        torch.manual_seed(epoch * 1000 + 1)  # the global RNG must not matter
        sampler.set_epoch(epoch)
        return list(sampler)

    assert order(0) == order(0) and sorted(order(0)) == list(range(200))
    assert order(0) != order(1) and order(0) != order(0, seed=4)
    first = order(0)[:8]
    # Grouped: one batch's lengths are close together compared with the whole range.
    assert max(lengths[i] for i in first) - min(lengths[i] for i in first) < 25


def test_token_mean_loss_divides_by_the_steps_tokens_not_the_batchs() -> None:
    logits = torch.zeros(2, 3, 5)
    labels = torch.tensor([[1, 2, -100], [3, -100, -100]])
    loss = token_mean_loss(0.0)
    per_token = torch.log(torch.tensor(5.0))
    assert loss({"logits": logits}, labels) == pytest.approx(per_token.item())
    # With 6 label tokens over the whole step (other micro-batches, other ranks), this batch's
    # 3 tokens contribute half.
    halved = loss({"logits": logits}, labels, num_items_in_batch=torch.tensor(6))
    assert halved == pytest.approx(per_token.item() / 2)


def test_worker_spec_round_trips_through_json(tmp_path: Path) -> None:
    spec = WorkerSpec(
        dataset_dir="gs://b/data",
        output_dir="/gcs/b/model",
        model=ModelConfig(architecture={"model_type": "t5", "d_model": 32}, tokenizer="tok"),
        train=TrainConfig(max_steps=3, precision="fp32"),
        checkpoint_root="gs://b/ckpt",
        tensorboard_dir=None,
        tensorboard_mirror="gs://b/tb",
        work_dir=str(tmp_path),
        node_count=2,
        procs_per_node=8,
    )
    spec.write(tmp_path / "spec.json")
    assert WorkerSpec.read(tmp_path / "spec.json") == spec


def test_a_rank_runs_its_nodes_spec_only_if_the_primary_has_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under DeepSpeed's multi-node launcher a rank reads the spec its own node wrote, with
    the primary's digest on its command line; a spec changed after its node wrote it, or a
    node whose config differs, is refused before anything runs."""
    from llm_pipeline.train import worker

    spec = WorkerSpec(
        dataset_dir="/gcs/b/data",
        output_dir="/gcs/b/model",
        model=ModelConfig(architecture={"model_type": "t5", "d_model": 32}, tokenizer="tok"),
        train=TrainConfig(max_steps=3, precision="fp32"),
        checkpoint_root="/gcs/b/ckpt",
        tensorboard_dir=None,
        tensorboard_mirror=None,
        work_dir=str(tmp_path / "node1-work"),
        node_count=2,
        procs_per_node=1,
    )
    folder = tmp_path / "node1"
    folder.mkdir(mode=0o700)
    spec.write(folder / "spec.json")
    monkeypatch.setenv(NODE_DIR_ENV, str(folder))
    # Each node's copy has its own work folder; the rest is what the digest covers.
    primary = replace(spec, work_dir=str(tmp_path / "node0-work"))
    assert WorkerSpec.read_node_copy(primary.digest()) == spec
    tampered = json.loads((folder / "spec.json").read_text())
    tampered["dataset_dir"] = "/gcs/someone-elses/data"
    (folder / "spec.json").write_text(json.dumps(tampered))
    with pytest.raises(TrainError, match=r"spec\.json: this node's spec differs from the prim"):
        worker.main(["--node-spec", primary.digest()])
