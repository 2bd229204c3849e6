"""The stages a training process goes through, one function each; `worker.run` calls them.

Every function here runs on every rank (most are collectives): the process group, the
checkpoint plan, data, arguments, the training call itself, and the counts behind the
throughput figures.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from datasets import Dataset, DatasetDict, load_from_disk
from transformers import Seq2SeqTrainingArguments, TrainerCallback
from transformers.trainer_utils import TrainOutput

from llm_pipeline.models.loading import hidden_size
from llm_pipeline.storage import local_copy
from llm_pipeline.train import checkpoints
from llm_pipeline.train.checkpoint_sync import CheckpointLayout, plan_layout
from llm_pipeline.train.deepspeed_config import resolve_precision
from llm_pipeline.train.errors import TrainError, out_of_memory_message
from llm_pipeline.train.metrics import RunCounts
from llm_pipeline.train.spec import WorkerSpec
from llm_pipeline.train.trainer import FinetuneTrainer, deepspeed_settings, training_arguments

logger = logging.getLogger(__name__)

COLUMNS = ("input_ids", "attention_mask", "labels")


def init_process_group(spec: WorkerSpec) -> None:
    """Join the job's process group, with the config's collective timeout.

    Done here rather than left to the Trainer: on the CPU path it passes no timeout at all, and
    DeepSpeed would otherwise apply its own default. A collective that waits longer than
    `train.collective_timeout_s` (a dead or stuck peer) then fails instead of hanging.
    """
    timeout = timedelta(seconds=spec.train.collective_timeout_s)
    _default_group_timeout(timeout)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if spec.train.use_deepspeed:
        import deepspeed

        deepspeed.init_distributed(dist_backend=backend, timeout=timeout)
    else:
        dist.init_process_group(backend=backend, timeout=timeout)
    # DeepSpeed's ZeRO-3 calls torch collectives deprecated in 2.x (all_gather_into_tensor,
    # reduce_scatter_tensor); the warning repeats every step on every rank and says nothing a
    # user can act on.
    warnings.filterwarnings(
        "ignore", message=r"`torch\.distributed\.\w+` is deprecated", category=FutureWarning
    )
    if dist.get_rank() != 0:
        # One voice per job: replicas log warnings and errors only.
        logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
        logging.getLogger("transformers").setLevel(logging.WARNING)


def leave_process_group() -> None:
    """Leave the group once every rank is done: a process that exits with the group still
    up can abort in a C++ destructor (SIGABRT, "terminate called without an active
    exception"), which the launcher reports as a failed rank after a good run."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def _default_group_timeout(timeout: timedelta) -> None:
    """Give process groups that libraries create later the same timeout as the world group.

    DeepSpeed builds its data-parallel group with `new_group(ranks)` and no timeout, so torch
    applies its module default (30 min), and a peer that never arrives stalls the job there
    for half an hour. torch has no public setting for that default; it reads this module
    global each time a group is made.
    """
    from torch.distributed import distributed_c10d

    distributed_c10d.default_pg_timeout = timeout
    if isinstance(distributed_c10d.default_pg_nccl_timeout, timedelta):
        distributed_c10d.default_pg_nccl_timeout = timeout


def plan_checkpoints(spec: WorkerSpec) -> CheckpointLayout:
    """This run's checkpoint folder (per fingerprint) and who writes, uploads and marks."""
    fingerprint = checkpoints.run_fingerprint(
        model=spec.model,
        train=spec.train,
        dataset_dir=spec.dataset_dir,
        world_size=dist.get_world_size(),
    )
    return plan_layout(
        folder=checkpoints.run_folder(spec.checkpoint_root, fingerprint),
        staging=str(Path(spec.work_dir) / "staging"),
        fingerprint=fingerprint,
        keep=spec.train.save_total_limit,
        node_count=spec.node_count,
    )


def precision(spec: WorkerSpec) -> str:
    cuda = torch.cuda.is_available()
    try:
        return resolve_precision(
            spec.train.precision,
            cuda_available=cuda,
            bf16_supported=cuda and torch.cuda.is_bf16_supported(),
        )
    except ValueError as err:
        raise TrainError(f"train.{err}") from err


def arguments(
    spec: WorkerSpec, layout: CheckpointLayout, *, precision: str, has_eval: bool
) -> Seq2SeqTrainingArguments:
    """Trainer arguments with the DeepSpeed config; create them before loading the model."""
    deepspeed = deepspeed_settings(
        spec.train,
        precision=precision,
        world_size=dist.get_world_size(),
        hidden_size=hidden_size(spec.model),
    )
    return training_arguments(
        spec.train,
        output_dir=layout.local_folder,
        precision=precision,
        deepspeed=deepspeed,
        save_on_each_node=layout.save_on_each_node,
        has_eval=has_eval,
    )


def load_splits(spec: WorkerSpec) -> tuple[Dataset, Dataset | None]:
    """The tokenized train and validation splits, reduced to the model's columns."""
    folder = _local_dataset(spec)
    try:
        data = load_from_disk(str(folder))
    except (FileNotFoundError, ValueError) as err:
        raise TrainError(
            f"dataset {spec.dataset_dir!r}: not a tokenized dataset saved with save_to_disk ({err})"
        ) from err
    if not isinstance(data, DatasetDict) or "train" not in data:
        found = list(data) if isinstance(data, DatasetDict) else "a single split"
        raise TrainError(f"dataset {spec.dataset_dir!r}: needs a 'train' split, found {found}")
    splits = {name: data[name] for name in ("train", "validation") if name in data}
    for name, split in splits.items():
        missing = [c for c in COLUMNS if c not in split.column_names]
        if missing:
            raise TrainError(
                f"dataset {spec.dataset_dir!r}: split {name!r} lacks {missing}; run the "
                "preprocess step on it first"
            )
    train = splits["train"].select_columns(list(COLUMNS))
    validation = splits.get("validation")
    return train, validation.select_columns(list(COLUMNS)) if validation is not None else None


def _local_dataset(spec: WorkerSpec) -> Path:
    """The dataset on local disk: a remote one is copied once per node, by its first process."""
    note = Path(spec.work_dir) / "dataset.path"
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        try:
            folder = local_copy(spec.dataset_dir, Path(spec.work_dir) / "dataset")
        except FileNotFoundError as err:
            raise TrainError(f"dataset {spec.dataset_dir!r}: {err}") from err
        note.write_text(str(folder), encoding="utf-8")
    dist.barrier()
    return Path(note.read_text(encoding="utf-8"))


class Clock(TrainerCallback):
    """Wall time of the training loop itself: after engine setup, before the final save."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.ended: float | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.started = time.perf_counter()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.ended = time.perf_counter()

    @property
    def seconds(self) -> float:
        if self.started is None or self.ended is None:
            return 0.0
        return self.ended - self.started


def train(trainer: FinetuneTrainer, resume_from: str | None) -> TrainOutput:
    """Run the loop; out-of-memory becomes a message naming the settings to lower."""
    try:
        return trainer.train(resume_from_checkpoint=resume_from)
    except torch.OutOfMemoryError as err:
        raise TrainError(out_of_memory_message(str(err))) from err


def evaluate(trainer: FinetuneTrainer) -> float | None:
    """Loss on the validation split, or None without one."""
    if trainer.eval_dataset is None:
        return None
    last = trainer.state.log_history[-2:] if trainer.state.log_history else []
    for entry in last:
        # The Trainer evaluates by itself when the last step ends an eval period.
        if "eval_loss" in entry and entry.get("step") == trainer.state.global_step:
            return float(entry["eval_loss"])
    return float(trainer.evaluate()["eval_loss"])


def count_parameters(model: torch.nn.Module, *, embeddings: bool = True) -> int:
    """Parameters of the model; under ZeRO-3 each holds its full size in `ds_numel`.

    `embeddings=False` leaves out embedding tables and the output projection: the
    "non-embedding" count of Kaplan et al. (2020) that the 6·N·tokens FLOP estimate is
    defined over. A lookup costs no matmul, and for small models with 30k-token vocabularies
    counting them overstates the work several times over.
    """
    skipped: set[int] = set()
    if not embeddings:
        for module in model.modules():
            if isinstance(module, torch.nn.Embedding):
                skipped.update(id(p) for p in module.parameters())
        get_output = getattr(model, "get_output_embeddings", None)
        output = get_output() if callable(get_output) else None
        if isinstance(output, torch.nn.Module):
            skipped.update(id(p) for p in output.parameters())
    return sum(
        int(getattr(p, "ds_numel", p.numel())) for p in model.parameters() if id(p) not in skipped
    )


def gather_counts(
    trainer: FinetuneTrainer, *, seconds: float, parameters: int, non_embedding_parameters: int
) -> RunCounts:
    """Samples and tokens summed over every rank; the slowest rank's time is the run's."""
    samples, tokens = trainer.trained_counts()
    device = trainer.args.device
    totals = torch.tensor([samples, tokens], dtype=torch.long, device=device)
    dist.all_reduce(totals)
    slowest = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return RunCounts(
        samples=int(totals[0]),
        tokens=int(totals[1]),
        seconds=float(slowest[0]),
        parameters=parameters,
        world_size=dist.get_world_size(),
        non_embedding_parameters=non_embedding_parameters,
        device_name=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    )
