"""When checkpoints become complete, and which one a restarted job resumes from, across ranks.

Runs inside the training processes, with the process group up. Three storage cases:
- object storage (`gs://`): each node's Trainer writes to a local staging folder; after a save
  each node uploads its own ranks' files, the primary adds the shared ones, then marks.
- a local folder every node sees (one node, NFS, Vertex's /gcs/ mount): the primary marks.
- a local folder per node (no shared filesystem): each node keeps its own shards
  (`save_on_each_node`, DeepSpeed's `use_node_local_storage`) and each node's first process
  adds DeepSpeed's `latest` tag, which only global rank 0 writes, and marks its own copy.
Which case holds is measured, not assumed: the primary writes a probe file and every rank
says whether it sees it.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from llm_pipeline.errors import TrainError
from llm_pipeline.storage import is_remote, to_uri
from llm_pipeline.train import checkpoints, lease, run_lock

logger = logging.getLogger(__name__)

_leases: list[lease.Lease] = []  # the lease this process holds on an object-storage folder


@dataclass(frozen=True)
class CheckpointLayout:
    """Where this rank's Trainer writes checkpoints and who declares them complete."""

    folder: str  # the run's checkpoint folder: local path or gs:// URI
    local_folder: str  # where the Trainer writes: `folder` itself, or local staging
    remote: bool
    shared: bool  # every node sees the same `folder`
    fingerprint: str
    keep: int
    rank: int
    local_rank: int
    world_size: int
    node_count: int
    procs_per_node: int

    @property
    def save_on_each_node(self) -> bool:
        """Each node writes the shared files too: its folder is its own (staging or disk)."""
        return self.node_count > 1 and not (self.shared and not self.remote)

    @property
    def node_local(self) -> bool:
        """Each node keeps its own copy on its own disk (no shared folder, no object store)."""
        return not self.shared and not self.remote

    @property
    def marks(self) -> bool:
        """Whether this process writes markers and deletes old checkpoints."""
        return self.rank == 0 if self.shared else self.local_rank == 0

    @property
    def node_ranks(self) -> range:
        node = self.rank // self.procs_per_node
        return range(node * self.procs_per_node, (node + 1) * self.procs_per_node)


def plan_layout(
    *,
    folder: str,
    staging: str,
    fingerprint: str,
    keep: int,
    node_count: int,
) -> CheckpointLayout:
    """Decide the layout for this run; a collective, so every rank calls it."""
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    remote = is_remote(folder)
    local_folder = str(Path(staging) / "checkpoints") if remote else to_uri(folder)
    if local_rank == 0:
        if remote:
            # Leftovers of an earlier attempt on this machine must not mix with downloads.
            shutil.rmtree(local_folder, ignore_errors=True)
        Path(local_folder).mkdir(parents=True, exist_ok=True)
    dist.barrier()
    _hold_folder(folder, local_folder, rank=rank, remote=remote)
    shared = remote or node_count == 1 or _sees_same_folder(local_folder)
    return CheckpointLayout(
        folder=folder,
        local_folder=local_folder,
        remote=remote,
        shared=shared,
        fingerprint=fingerprint,
        keep=keep,
        rank=rank,
        local_rank=local_rank,
        world_size=world,
        node_count=node_count,
        procs_per_node=world // node_count,
    )


def _hold_folder(folder: str, local_folder: str, *, rank: int, remote: bool) -> None:
    """Hold the folder before anything there is read or deleted: on disk every rank locks its
    own file (`run_lock`), on object storage the primary takes the lease (`lease`). If another
    run holds it, every rank stops with the same message naming the holder."""
    refusal: str | None = None
    if not remote:
        refusal = run_lock.hold(local_folder, rank=rank)
    elif rank == 0:
        taken = lease.acquire(folder, job=os.environ.get("CLOUD_ML_JOB_ID") or None)
        if isinstance(taken, str):
            refusal = taken
        else:
            taken.keep_renewed()
            _leases.append(taken)
    refusals: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(refusals, refusal)
    holder = next((r for r in refusals if r), None)
    if holder is not None:
        raise TrainError(
            f"checkpoint folder {folder} is in use by another training run ({holder}); "
            "two runs writing one folder would delete each other's checkpoints. Wait for it "
            "to end or stop it, or give this run its own train.checkpoint_dir"
        )


def release_folder() -> None:
    """Give up this process's lease on an object-storage folder, if it holds one (disk locks
    go with the process)."""
    while _leases:
        _leases.pop().release()


def _sees_same_folder(local_folder: str) -> bool:
    """Whether every rank sees the file the primary writes into `local_folder`."""
    token = [uuid.uuid4().hex if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(token, src=0)
    probe = Path(local_folder) / f".probe-{token[0]}"
    if dist.get_rank() == 0:
        probe.write_text("shared?")
    dist.barrier()
    seen: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(seen, probe.exists())
    dist.barrier()
    if dist.get_rank() == 0:
        probe.unlink(missing_ok=True)
    return all(seen)


def prepare_resume(layout: CheckpointLayout) -> str | None:
    """The local checkpoint folder every rank resumes from, or None to start fresh.

    The newest step complete for every rank: on node-local disks a node that lost its disk
    (a replaced VM) forces an older, or no, checkpoint. Partial checkpoints and ones newer than
    the chosen step are deleted; a remote one is fetched (shared files and this node's ranks).
    """
    visible = set(checkpoints.complete_steps(layout.folder))
    views: list[Any] = [None] * layout.world_size
    dist.all_gather_object(views, visible)
    common = set.intersection(*views) if views else set()
    step = max(common) if common else None
    if layout.marks:
        removed = checkpoints.remove_all_but(layout.folder, keep_step=step)
        if removed:
            logger.info("removed partial or unusable checkpoints at steps %s", removed)
    if step is None:
        dist.barrier()
        return None
    local = checkpoints.checkpoint_path(layout.local_folder, step)
    if layout.remote and layout.local_rank == 0:
        remote = checkpoints.checkpoint_path(layout.folder, step)
        checkpoints.download(remote, local, ranks=layout.node_ranks)
    dist.barrier()
    checkpoints.check_latest_tag(local)
    logger.info("resuming from the complete checkpoint at step %d (%s)", step, layout.folder)
    return local


class CompleteCheckpoints(TrainerCallback):
    """After each save: wait for every rank, upload if remote, mark complete, rotate.

    Trainer calls `on_save` on every rank right after all of them wrote their files, so the
    barrier here is the point where the checkpoint is whole.
    """

    def __init__(self, layout: CheckpointLayout) -> None:
        self.layout = layout

    def on_step_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        # No checkpoint of the last step: the final model is saved right after it, and the
        # Trainer resumed from a checkpoint at max_steps runs one step too many.
        if state.max_steps and state.global_step >= state.max_steps:
            control.should_save = False

    def on_save(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        layout, step = self.layout, state.global_step
        dist.barrier()
        if layout.remote:
            self._upload(step)
            dist.barrier()
        if layout.marks:
            target = checkpoints.checkpoint_path(layout.folder, step)
            if layout.node_local and args.deepspeed:
                checkpoints.add_latest_tag(target)
            checkpoints.write_marker(
                target, step=step, world_size=layout.world_size, fingerprint=layout.fingerprint
            )
            deleted = checkpoints.rotate(layout.folder, keep=layout.keep)
            if deleted:
                logger.info("deleted old checkpoints at steps %s", deleted)
        # No rank runs ahead into the next save while markers and deletions are in flight.
        dist.barrier()

    def _upload(self, step: int) -> None:
        layout = self.layout
        local = checkpoints.checkpoint_path(layout.local_folder, step)
        if layout.local_rank == 0:
            remote = checkpoints.checkpoint_path(layout.folder, step)
            checkpoints.upload(local, remote, shared_files=layout.rank == 0)
        dist.barrier()
        if layout.local_rank == 0:
            # Staging holds one checkpoint at a time; the remote copy is the durable one.
            shutil.rmtree(local, ignore_errors=True)
