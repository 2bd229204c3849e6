"""What a run gets on a GPU by default (loader workers, pinned memory, fused AdamW, kernels
on request), decided on the CPU through the `cuda` seam; and a training loop that reads
nothing back from the device between logging steps."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType, SimpleNamespace
from typing import Any

import datasets
import pytest
import torch
import torch.distributed as dist
from pydantic import ValidationError
from transformers import LlamaConfig, LlamaForCausalLM, TrainerCallback, TrainingArguments

from llm_pipeline.config import TrainConfig
from llm_pipeline.errors import TrainError
from llm_pipeline.tasks import get_task
from llm_pipeline.tasks.kinds import CAUSAL_LM, CLASSIFIER, SEQ2SEQ
from llm_pipeline.train import device_defaults
from llm_pipeline.train.checkpoint_sync import CompleteCheckpoints, plan_layout
from llm_pipeline.train.counts import Clock
from llm_pipeline.train.preemption import SaveOnSignal
from llm_pipeline.train.status import TrainingStatus
from llm_pipeline.train.trainer import build_trainer
from llm_pipeline.train.trainer_settings import training_arguments

from ..offline_models import TINY_LLAMA

#: Ways Python code reads a tensor's value back to the host (on a GPU: waits for it).
READS = ("item", "__bool__", "__float__", "__int__", "tolist")


@pytest.mark.parametrize(
    ("cpus", "processes", "workers"), [(12, 1, 4), (96, 8, 4), (8, 8, 1), (24, 8, 3), (2, 4, 0)]
)
def test_loader_workers_share_the_nodes_cpus_among_its_gpus(
    cpus: int, processes: int, workers: int
) -> None:
    assert device_defaults.loader_workers(cpus=cpus, local_processes=processes) == workers


@pytest.mark.usefixtures("one_process_group")
def test_a_gpu_process_loads_in_workers_into_pinned_memory_and_the_cpu_keeps_its_loader(
    tmp_path: Path,
) -> None:
    def arguments(cuda: bool) -> TrainingArguments:
        return training_arguments(
            TrainConfig(use_deepspeed=False),
            output_dir=str(tmp_path),
            precision="fp32",
            deepspeed=None,
            save_on_each_node=False,
            has_eval=False,
            kind=CAUSAL_LM,
            cuda=cuda,
        )

    gpu, cpu = arguments(cuda=True), arguments(cuda=False)
    expected = device_defaults.loader_workers(
        cpus=device_defaults.node_cpus(), local_processes=device_defaults.local_processes()
    )
    assert gpu.dataloader_num_workers == expected
    assert gpu.dataloader_pin_memory and gpu.accelerator_config.non_blocking
    assert cpu.dataloader_num_workers == 0 and not cpu.accelerator_config.non_blocking
    assert gpu.optim == cpu.optim == "adamw_torch_fused"
    assert not gpu.logging_nan_inf_filter and not cpu.logging_nan_inf_filter
    # Workers that die with each epoch would be started again for every one.
    settings = device_defaults.loader_settings(cuda=True, cpus=8, local_processes=1)
    assert settings["dataloader_persistent_workers"] and settings["dataloader_prefetch_factor"]
    without = device_defaults.loader_settings(cuda=True, cpus=1, local_processes=2)
    assert without["dataloader_num_workers"] == 0 and "dataloader_prefetch_factor" not in without


def test_compile_applies_to_generators_and_not_yet_to_classifiers() -> None:
    for compiled in (TrainConfig(compile=True), TrainConfig(compile="blocks")):
        for kind in (CAUSAL_LM, SEQ2SEQ):
            assert device_defaults.kernel_settings(compiled, kind=kind, cuda=True) == {
                "torch_compile": True
            }
        with pytest.raises(TrainError, match=r"train\.compile: .*seq2seq models.*a classifier"):
            device_defaults.kernel_settings(compiled, kind=CLASSIFIER, cuda=True)


def test_compile_takes_true_false_or_blocks_and_names_what_else_it_got() -> None:
    assert TrainConfig(compile="blocks").compile == "blocks"
    assert TrainConfig.model_validate({"compile": True}).compile is True
    with pytest.raises(ValidationError) as refused:
        TrainConfig.model_validate({"compile": "layers"})
    assert "compile" in str(refused.value) and "'blocks'" in str(refused.value)


def test_liger_needs_a_gpu_and_its_package_and_a_causal_lm() -> None:
    liger = TrainConfig(kernels="liger", compile=True)
    assert device_defaults.kernel_settings(
        liger, kind=CAUSAL_LM, cuda=True, liger_installed=True
    ) == {"torch_compile": True, "use_liger_kernel": True}
    with pytest.raises(TrainError, match=r"train\.kernels: .*CUDA GPU"):
        device_defaults.kernel_settings(liger, kind=CAUSAL_LM, cuda=False, liger_installed=True)
    with pytest.raises(TrainError, match=r"pip install liger-kernel"):
        device_defaults.kernel_settings(liger, kind=CAUSAL_LM, cuda=True, liger_installed=False)
    with pytest.raises(TrainError, match=r"train\.kernels: .*causal LMs only.*seq2seq model"):
        device_defaults.kernel_settings(liger, kind=SEQ2SEQ, cuda=True, liger_installed=True)
    device_defaults.check_liger_model("llama", supported={"llama", "qwen2"})
    with pytest.raises(TrainError, match=r"no kernels for model type 'gpt2'.*llama, qwen2"):
        device_defaults.check_liger_model("gpt2", supported={"llama", "qwen2"})


#: Reads left alone, by the file they happen in: the data loader's seed for each epoch's
#: workers (a tensor made in host memory, never on a device), and transformers' choice of
#: an attention mask inside the model's forward (whether the batch has padding, or packed
#: examples), once per forward; avoiding it would mean handing the model a materialised 4-D
#: mask, which eager attention reads differently from SDPA.
ALLOWED_READERS = (
    f"torch{os.sep}utils{os.sep}data{os.sep}",
    f"transformers{os.sep}masking_utils.py",
)


def _allowed(frame: FrameType | None) -> bool:
    while frame is not None:
        if any(reader in frame.f_code.co_filename for reader in ALLOWED_READERS):
            return True
        frame = frame.f_back
    return False


class _StartsWatching(TrainerCallback):
    """Marks the start of the training loop (its end: the last step's logging)."""

    def __init__(self, watch: dict[str, bool]) -> None:
        self.watch = watch

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.watch["training"] = True


def _reads_while_training(
    args: TrainingArguments, monkeypatch: pytest.MonkeyPatch, folder: Path
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(reads outside the Trainer's log/save/evaluate phase, reads inside it), each as
    (how, global step), over 6 steps of a tiny Llama through the project's trainer and
    the callbacks that run every step."""
    torch.manual_seed(0)
    settings = {k: v for k, v in TINY_LLAMA.items() if k != "model_type"}
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, **settings))
    lengths = [5, 9, 7, 12, 6, 10, 8, 11]
    rows = [list(range(1, n + 1)) for n in lengths]
    train = datasets.Dataset.from_dict(
        {"input_ids": rows, "attention_mask": [[1] * n for n in lengths], "labels": rows}
    )
    tokenizer = type("Tokenizer", (), {"pad_token_id": 0})()
    watch = {"training": False, "reporting": False}
    trainer = build_trainer(
        model=model,
        tokenizer=tokenizer,  # type: ignore[arg-type]  # the collator reads its pad id only
        args=args,
        train_dataset=train,
        eval_dataset=None,
        callbacks=[
            CompleteCheckpoints(
                plan_layout(
                    folder=str(folder), staging=str(folder), fingerprint="f", keep=1, node_count=1
                )
            ),
            SaveOnSignal(),
            TrainingStatus(),
            Clock(),
            _StartsWatching(watch),
        ],
        sampling="sequential",
        task=get_task("instruction_tuning"),
    )
    outside: list[tuple[str, int]] = []
    inside: list[tuple[str, int]] = []

    def counted(name: str) -> Callable[..., Any]:
        original = getattr(torch.Tensor, name)

        def read(tensor: torch.Tensor, *a: Any, **k: Any) -> Any:
            if watch["training"] and not _allowed(sys._getframe(1)):
                seen = inside if watch["reporting"] else outside
                seen.append((name, trainer.state.global_step))
            return original(tensor, *a, **k)

        return read

    report = trainer._maybe_log_save_evaluate

    def reporting(*a: Any, **k: Any) -> Any:
        watch["reporting"] = True
        try:
            return report(*a, **k)
        finally:
            watch["reporting"] = False
            if trainer.state.global_step >= trainer.state.max_steps:
                watch["training"] = False  # the loop is over: the run's summary follows

    monkeypatch.setattr(trainer, "_maybe_log_save_evaluate", reporting)
    with monkeypatch.context() as patched:
        for name in READS:
            patched.setattr(torch.Tensor, name, counted(name))
        trainer.train()
    assert trainer.optimizer is not None
    assert trainer.optimizer.param_groups[0]["fused"]  # AdamW's fused kernel
    return outside, inside


@pytest.fixture
def six_steps_logged_every_three(
    tmp_path: Path, one_process_group: None
) -> Iterator[TrainingArguments]:
    yield training_arguments(
        TrainConfig(
            use_deepspeed=False,
            max_steps=6,
            per_device_batch_size=2,
            logging_steps=3,
            save_steps=100,
        ),
        output_dir=str(tmp_path),
        precision="fp32",
        deepspeed=None,
        save_on_each_node=False,
        has_eval=False,
        kind=CAUSAL_LM,
    )


def test_training_reads_nothing_back_from_the_device_between_logging_steps(
    six_steps_logged_every_three: TrainingArguments,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    outside, inside = _reads_while_training(six_steps_logged_every_three, monkeypatch, tmp_path)
    assert outside == []
    # The loss is read where it is logged, and only there: steps 3 and 6.
    assert inside and {step for _, step in inside} == {3, 6}
    # The check is live: the Trainer's default NaN filter reads every micro-batch's loss.
    filtered = dataclasses.replace(six_steps_logged_every_three, logging_nan_inf_filter=True)
    outside, _ = _reads_while_training(filtered, monkeypatch, tmp_path / "filtered")
    assert len(outside) >= 6 and {how for how, _ in outside} == {"__bool__"}


def test_the_processes_on_a_node_are_read_from_either_launcher(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setenv("LOCAL_SIZE", "8")  # DeepSpeed's launcher
    assert device_defaults.local_processes() == 8
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # torchrun
    assert device_defaults.local_processes() == 4


@pytest.mark.usefixtures("one_process_group")
def test_beside_a_gpu_backend_the_stop_flag_is_agreed_over_a_gloo_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On GPUs the default group is NCCL's, whose tensors live on the GPU: the flag gets a
    gloo group of its own (here the default gloo group stands in for NCCL's)."""
    made: list[str] = []
    new_group = dist.new_group

    def recording(*args: Any, **kwargs: Any) -> Any:
        made.append(kwargs["backend"])
        return new_group(*args, **kwargs)

    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    monkeypatch.setattr(dist, "new_group", recording)
    stopper = SaveOnSignal()
    stopper.on_train_begin(SimpleNamespace(ddp_timeout=60), None, None)  # type: ignore[arg-type]
    assert made == ["gloo"]
    control = SimpleNamespace(should_save=False, should_evaluate=True, should_training_stop=False)
    state = SimpleNamespace(global_step=3, max_steps=10)
    stopper.on_step_end(None, state, control)  # type: ignore[arg-type]
    assert not control.should_training_stop
    stopper.signum = int(signal.SIGTERM)  # as the signal thread records it
    stopper.on_step_end(None, state, control)  # type: ignore[arg-type]
    assert control.should_save and control.should_training_stop and stopper.saved_step == 3


@pytest.mark.usefixtures("one_process_group")
def test_loader_workers_deliver_the_batches_the_training_process_would(tmp_path: Path) -> None:
    """The GPU's loader (worker processes, persistent, pinned) gives the same batches in the
    same order as loading in the training process: a resumed run skips the right ones."""
    lengths = [5, 9, 7, 12, 6, 10, 8, 11, 4, 13]
    rows = [list(range(1, n + 1)) for n in lengths]
    train = datasets.Dataset.from_dict(
        {"input_ids": rows, "attention_mask": [[1] * n for n in lengths], "labels": rows}
    )

    settings = {k: v for k, v in TINY_LLAMA.items() if k != "model_type"}
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, **settings))

    def batches(cuda: bool) -> tuple[int, list[list[list[int]]]]:
        args = training_arguments(
            TrainConfig(use_deepspeed=False, per_device_batch_size=2),
            output_dir=str(tmp_path),
            precision="fp32",
            deepspeed=None,
            save_on_each_node=False,
            has_eval=False,
            kind=CAUSAL_LM,
            cuda=cuda,
        )
        trainer = build_trainer(
            model=model,
            tokenizer=type("Tokenizer", (), {"pad_token_id": 0})(),  # type: ignore[arg-type]
            args=args,
            train_dataset=train,
            eval_dataset=None,
            callbacks=[],
            sampling="group_by_length",
            task=get_task("instruction_tuning"),
        )
        loader = trainer.get_train_dataloader()
        seen = []
        for epoch in (0, 1):
            loader.set_epoch(epoch)  # type: ignore[attr-defined]
            seen += [batch["input_ids"].tolist() for batch in loader]
        return args.dataloader_num_workers, seen

    (none, in_process), (workers, loaded) = batches(cuda=False), batches(cuda=True)
    assert none == 0 and workers > 0
    assert loaded == in_process and len(in_process) == 10
