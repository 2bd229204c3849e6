"""What a training process gets on a GPU without asking: its data loading, optimizer and kernels.

On a GPU the step is short, so the host's part of it shows: the next batch must be collated
while the GPU computes (loader worker processes), copied from page-locked memory (pinned),
and without the host waiting for the copy (non-blocking); a host that waits on the GPU in
any other way each step (a `.item()`, a tensor in an `if`) stalls the queue the same way.
On the CPU the loader stays in the training process, as before: workers there would take
cores from the computation itself, and pinned memory means nothing without a device.

The optimizer is `torch.optim.AdamW` with `fused=True`, one kernel for the whole update
(transformers' own default for torch >= 2.8, named here so that a change of that default
does not change a run); it applies where the Trainer builds the optimizer. Where DeepSpeed
must run it (an `optimizer` section: offload, see `deepspeed_config`), DeepSpeed's CPU Adam
is used and this setting is not read.

`train.compile` and `train.kernels` are opt-in: measured on a GPU in one case at most (the
config fields' descriptions say which).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Collection
from typing import Any

from llm_pipeline.config import TrainConfig
from llm_pipeline.errors import TrainError
from llm_pipeline.tasks import ModelKind

#: The optimizer the Trainer builds (see the module docstring).
OPTIMIZER = "adamw_torch_fused"
#: More loader workers than this per GPU only hold batches in memory: collating padded
#: token lists takes a fraction of a GPU step.
MAX_LOADER_WORKERS = 4


def loader_workers(*, cpus: int, local_processes: int) -> int:
    """Loader worker processes for each training process on a GPU node: the node's CPUs
    shared among its training processes, at most `MAX_LOADER_WORKERS` each."""
    return max(0, min(MAX_LOADER_WORKERS, cpus // max(local_processes, 1)))


def loader_settings(*, cuda: bool, cpus: int, local_processes: int) -> dict[str, Any]:
    """TrainingArguments' data loading for a process on a GPU (`cuda`) or on the CPU (none:
    the Trainer's defaults, loading in the training process)."""
    if not cuda:
        return {}
    workers = loader_workers(cpus=cpus, local_processes=local_processes)
    settings: dict[str, Any] = {
        "dataloader_num_workers": workers,
        "dataloader_pin_memory": True,
        # The batch's copy to the GPU is queued, not waited for (it needs pinned memory).
        "accelerator_config": {"non_blocking": True},
    }
    if workers:
        # Workers live for the whole run, not one epoch, each two batches ahead.
        settings |= {"dataloader_persistent_workers": True, "dataloader_prefetch_factor": 2}
    return settings


def node_cpus() -> int:
    """CPUs this process may run on (its affinity mask, which containers narrow)."""
    return len(os.sched_getaffinity(0))


def local_processes() -> int:
    """Training processes on this node, as torchrun (LOCAL_WORLD_SIZE) or DeepSpeed's
    launcher (LOCAL_SIZE) says."""
    return int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("LOCAL_SIZE") or "1")


def kernel_settings(
    train: TrainConfig, *, kind: ModelKind, cuda: bool, liger_installed: bool | None = None
) -> dict[str, Any]:
    """TrainingArguments for `train.compile` and `train.kernels`; a TrainError where they
    cannot work here (the config check refuses what it can know earlier: the model kind)."""
    if train.compile and not kind.compiles:
        raise TrainError(
            "train.compile: supported for causal LMs and seq2seq models, and this is a "
            f"{kind.description}"
        )
    if train.kernels and not kind.fused_kernels:
        raise TrainError(
            f"train.kernels: supported for causal LMs only, and this is a {kind.description}"
        )
    if train.kernels != "liger":
        return {"torch_compile": bool(train.compile)}
    if not cuda:
        raise TrainError(
            "train.kernels: liger runs Triton kernels on a CUDA GPU, and this process has none"
        )
    if liger_installed is None:
        liger_installed = importlib.util.find_spec("liger_kernel") is not None
    if not liger_installed:
        raise TrainError(
            "train.kernels: liger needs the liger-kernel package in the training image "
            "(`pip install liger-kernel`)"
        )
    return {"torch_compile": bool(train.compile), "use_liger_kernel": True}


def check_liger_model(model_type: str, supported: Collection[str] | None = None) -> None:
    """A TrainError unless Liger has kernels for `model_type` (`supported`: the model types
    it patches, read from the installed liger-kernel by default). Without this check a model
    it does not know trains with a log line and none of its kernels."""
    if supported is None:
        from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN

        supported = set(MODEL_TYPE_TO_APPLY_LIGER_FN)
    if model_type not in supported:
        raise TrainError(
            f"train.kernels: liger has no kernels for model type {model_type!r} (it patches "
            f"{', '.join(sorted(supported))}); leave train.kernels unset for this model"
        )
