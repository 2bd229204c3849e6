"""`train.zero_stage: "auto"` resolved where the finetune job runs, before any process starts."""

import json
from pathlib import Path

import pytest

from llm_pipeline.config import ModelConfig, TrainConfig
from llm_pipeline.fit.machines import ACCELERATORS, Place
from llm_pipeline.fit.memory import Lengths
from llm_pipeline.fit.shapes import model_shape
from llm_pipeline.fit.states import training_memory
from llm_pipeline.output_files import PREPROCESS_REPORT_FILE
from llm_pipeline.train.trainer_settings import deepspeed_settings
from llm_pipeline.train.zero_stage import resolve_zero_stage

from ..offline_models import MINILM, TINY_T5

LAPTOP = Place("this machine", 16)
A100 = Place("a2-highgpu-1g", 85, ACCELERATORS["NVIDIA_TESLA_A100"], 1)


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """A preprocessed dataset's folder, as far as the resolution reads it."""
    report = {"max_source_length": 64, "max_target_length": 24}
    (tmp_path / PREPROCESS_REPORT_FILE).write_text(json.dumps(report))
    return tmp_path


def resolve(train: TrainConfig, dataset: Path, *, place: Place, model=None):
    return resolve_zero_stage(
        train,
        model=model or ModelConfig(architecture=dict(TINY_T5), tokenizer=MINILM),
        task="summarization",
        dataset_dir=str(dataset),
        processes=1,
        nodes=1,
        place=lambda: place,
    )


@pytest.mark.parametrize("place", [LAPTOP, A100], ids=["CPU", "A100"])
def test_auto_on_a_machine_that_holds_the_whole_state_reaches_the_worker_as_no_deepspeed(
    dataset, place
):
    train, choice = resolve(TrainConfig(per_device_batch_size=4), dataset, place=place)
    assert (train.zero_stage, choice.stage, choice.source) == (0, 0, "auto")
    assert deepspeed_settings(train, precision="fp32", world_size=1, hidden_size=32) is None
    # Estimated at the lengths preprocess wrote, on this machine's device.
    shape = model_shape(ModelConfig(architecture=dict(TINY_T5), tokenizer=MINILM))
    estimate, _ = training_memory(
        shape,
        lengths=Lengths(4, 64, 24),
        dtype="bf16" if place.accelerator else "fp32",
        device="cuda" if place.accelerator else "cpu",
        checkpointing=False,
        zero=None,
        processes_per_node=1,
        nodes=1,
    )
    assert f"the whole training state, {estimate.total / 2**30:.1f} GiB" in choice.reason


def test_a_fixed_stage_is_kept_and_reaches_the_worker_as_it_is(dataset):
    fixed = TrainConfig(zero_stage=3)
    train, choice = resolve(fixed, dataset, place=LAPTOP)
    assert train == fixed and choice.describe() == "3 (train.zero_stage)"
    config = deepspeed_settings(train, precision="fp32", world_size=2, hidden_size=32)
    assert config is not None and config["zero_optimization"]["stage"] == 3


@pytest.mark.parametrize(("place", "stage"), [(A100, 3), (LAPTOP, 0)], ids=["GPU", "CPU"])
def test_a_model_whose_shape_is_unknown_gets_the_safe_default(dataset, monkeypatch, place, stage):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    unknown = ModelConfig(source="someone/not-cached")
    train, choice = resolve(TrainConfig(), dataset, place=place, model=unknown)
    assert train.zero_stage == choice.stage == stage
    assert choice.reason.startswith("the model's shape is unknown (model.source 'someone/")


def test_without_preprocess_json_the_lengths_fall_back_to_the_caps(tmp_path, dataset):
    _, read = resolve(TrainConfig(), dataset, place=LAPTOP)
    _, capped = resolve(TrainConfig(), tmp_path / "elsewhere", place=LAPTOP)

    def gib(reason: str) -> float:
        return float(reason.split("state, ")[1].split(" GiB")[0])

    # The caps (1024 source, 512 target tokens) need more than preprocess's 64 + 24.
    assert read.stage == capped.stage == 0 and gib(capped.reason) > gib(read.reason)
