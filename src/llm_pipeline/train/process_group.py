"""Joining and leaving the job's process group, with the collective timeout the config sets."""

from __future__ import annotations

import os
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist

from llm_pipeline.train.spec import WorkerSpec


def join(spec: WorkerSpec) -> None:
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
    if spec.train.deepspeed_on:
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
        import logging

        # One voice per job: replicas log warnings and errors only.
        logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
        logging.getLogger("transformers").setLevel(logging.WARNING)


def leave() -> None:
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
