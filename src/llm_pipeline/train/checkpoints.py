"""Checkpoint folders on local disk or object storage, and the marker that makes one complete.

The Trainer writes `checkpoint-<step>/` folders rank by rank; a job killed half-way leaves a
folder that looks like a checkpoint but is not one. So a checkpoint counts only once its
marker (`COMPLETE.json`) exists, and the marker is written last, after every rank's files are
in place (the caller holds a barrier before `write_marker`). Deleting goes the other way:
marker first, so a half-deleted folder is never taken for complete.

Layout: `<checkpoint root>/run-<fingerprint>/checkpoint-<step>/`. The fingerprint hashes what
decides the training trajectory (model, optimisation settings, data, world size), so a rerun
with other settings never resumes from, or rotates away, another run's checkpoints.

No torch here: this module moves files; `checkpoint_sync` decides when, across ranks.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from fsspec import AbstractFileSystem
from fsspec.core import url_to_fs

from llm_pipeline.config import ModelConfig, TrainConfig
from llm_pipeline.config.train import checkpoint_folder_problem
from llm_pipeline.errors import TrainError, UnsafePathError
from llm_pipeline.safe_paths import key_destination
from llm_pipeline.storage import is_remote, to_uri, write_atomic

MARKER = "COMPLETE.json"
PREFIX = "checkpoint-"
#: DeepSpeed's file naming the tag (`global_step<N>`) its `load_checkpoint` reads.
LATEST_TAG = "latest"
_TAG = re.compile(r"^global_step\d+$")
_STEP = re.compile(rf"^{PREFIX}(\d+)$")
# Files that belong to one rank: DeepSpeed's ZeRO partitions and the Trainer's RNG states.
_RANK_FILE = re.compile(r"(?:zero_pp_rank_|rng_state_)(\d+)")
# Settings that change how often things are saved or logged, not what is trained.
_OPERATIONAL_FIELDS = frozenset(
    {
        "checkpoint_dir",
        "save_steps",
        "save_total_limit",
        "logging_steps",
        "eval_steps",
        "per_device_eval_batch_size",
        "collective_timeout_s",
        "startup_timeout_s",
    }
)


@dataclass(frozen=True)
class Checkpoint:
    """One `checkpoint-<step>` folder; `complete` when its marker is there."""

    step: int
    path: str
    complete: bool


def resolve_checkpoint_root(
    env: Mapping[str, str], *, configured: str | None, output_dir: str
) -> str:
    """Where checkpoints go: Vertex's `AIP_CHECKPOINT_DIR`, else `train.checkpoint_dir`, else
    `checkpoints/` beside the output folder.

    The last keeps a retried KFP task's checkpoints next to the artifact it is producing, so a
    rerun of the same task finds them; output folders themselves are written whole at the end.
    """
    from_vertex = env.get("AIP_CHECKPOINT_DIR", "").strip()
    problem = checkpoint_folder_problem(from_vertex) if from_vertex else None
    if problem:
        raise TrainError(f"AIP_CHECKPOINT_DIR: {problem}")
    chosen = from_vertex or configured
    if chosen:
        return chosen.rstrip("/")
    parent = PurePosixPath(to_uri(output_dir).rstrip("/")).parent
    return str(parent / "checkpoints")


def run_fingerprint(
    *, model: ModelConfig, train: TrainConfig, dataset_dir: str, world_size: int
) -> str:
    """A short hash of everything a resumed run must share with the run that saved."""
    payload: dict[str, Any] = {
        "model": model.model_dump(mode="json"),
        "train": {
            k: v for k, v in train.model_dump(mode="json").items() if k not in _OPERATIONAL_FIELDS
        },
        "dataset": to_uri(dataset_dir).rstrip("/"),
        "world_size": world_size,
    }
    text = json.dumps(payload, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def run_folder(root: str, fingerprint: str) -> str:
    """This run's checkpoint folder under the checkpoint root."""
    return f"{root.rstrip('/')}/run-{fingerprint}"


def list_checkpoints(folder: str) -> list[Checkpoint]:
    """Every `checkpoint-<step>` in `folder`, oldest first; a missing folder has none."""
    fs, path = _fs(folder)
    if not fs.exists(path):
        return []
    found = []
    for entry in fs.ls(path, detail=True):
        name = PurePosixPath(entry["name"]).name
        match = _STEP.match(name)
        if match and entry["type"] == "directory":
            child = f"{folder.rstrip('/')}/{name}"
            complete = fs.exists(f"{path.rstrip('/')}/{name}/{MARKER}")
            found.append(Checkpoint(int(match.group(1)), child, complete))
    return sorted(found, key=lambda c: c.step)


def complete_steps(folder: str) -> list[int]:
    """Steps of the complete checkpoints in `folder`, oldest first."""
    return [c.step for c in list_checkpoints(folder) if c.complete]


def checkpoint_path(folder: str, step: int) -> str:
    return f"{folder.rstrip('/')}/{PREFIX}{step}"


def step_of(checkpoint: str) -> int:
    """The step a `.../checkpoint-<step>` folder holds."""
    match = _STEP.match(PurePosixPath(checkpoint.rstrip("/")).name)
    if not match:
        raise ValueError(f"{checkpoint!r} is not a checkpoint-<step> folder")
    return int(match.group(1))


def write_marker(checkpoint: str, *, step: int, world_size: int, fingerprint: str) -> None:
    """Declare `checkpoint` complete. Call only once every rank's files are written.

    Local: written beside and renamed into place, so the marker is whole or absent. Object
    stores write an object in one piece, so a plain put is already atomic there.
    """
    body = json.dumps(
        {"step": step, "world_size": world_size, "fingerprint": fingerprint, "time": time.time()}
    )
    fs, path = _fs(checkpoint)
    target = f"{path.rstrip('/')}/{MARKER}"
    if is_remote(checkpoint):
        fs.pipe_file(target, body.encode())
        return
    write_atomic(target, body)


def add_latest_tag(checkpoint: str | Path) -> None:
    """Write DeepSpeed's `latest` into a node's own copy of a checkpoint, if it lacks one.

    DeepSpeed writes `latest` on global rank 0 only, so on a node whose checkpoint folder is its
    own (node-local disks) every other node's copy lacks it, and the Trainer's resume there
    fails ("Can't find a valid checkpoint"). The tag is the copy's one `global_step<N>` folder.
    Call before `write_marker`: a copy marked complete must be one its node can load.
    """
    folder = Path(checkpoint)
    if (folder / LATEST_TAG).is_file():
        return
    tags = sorted(p.name for p in folder.iterdir() if p.is_dir() and _TAG.match(p.name))
    if len(tags) != 1:
        raise RuntimeError(f"{folder}: expected one DeepSpeed global_step folder, found {tags}")
    write_atomic(folder / LATEST_TAG, tags[0])


def check_latest_tag(checkpoint: str | Path) -> None:
    """Refuse a checkpoint whose DeepSpeed `latest` names anything but a `global_step<N>`.

    DeepSpeed joins that text to the checkpoint folder and loads the shards it finds there;
    from a tampered bucket, `../../..` would make every rank resume from files elsewhere on
    the machine.
    """
    tag_file = Path(checkpoint) / LATEST_TAG
    if not tag_file.is_file():
        return
    tag = tag_file.read_text(encoding="utf-8").strip()
    if not _TAG.match(tag):
        raise UnsafePathError(
            f"{checkpoint}: DeepSpeed's {LATEST_TAG} file names {tag[:200]!r}, not a "
            "global_step<N> folder in it; refused"
        )


def delete_checkpoint(checkpoint: str) -> None:
    """Remove a checkpoint: its marker first, so it is never half-deleted yet "complete"."""
    fs, path = _fs(checkpoint)
    marker = f"{path.rstrip('/')}/{MARKER}"
    if fs.exists(marker):
        fs.rm_file(marker)
    if fs.exists(path):
        fs.rm(path, recursive=True)


def rotate(folder: str, *, keep: int) -> list[int]:
    """Keep the newest `keep` complete checkpoints; delete older ones and older partial ones.

    Never deletes the newest complete checkpoint (`keep` is at least 1), nor a partial one
    newer than it: that may be a save in progress. Returns the deleted steps.
    """
    if keep < 1:
        raise ValueError(f"keep: must be >= 1, got {keep}")
    checkpoints = list_checkpoints(folder)
    kept = [c.step for c in checkpoints if c.complete][-keep:]
    if not kept:
        return []
    doomed = [c for c in checkpoints if c.step < kept[0] or (c.complete and c.step not in kept)]
    for checkpoint in doomed:
        delete_checkpoint(checkpoint.path)
    return [c.step for c in doomed]


def remove_all_but(folder: str, *, keep_step: int | None) -> list[int]:
    """Before training: delete partial checkpoints and any newer than the one resumed from.

    A newer one can be complete on some nodes only (node-local disks); left in place, the run
    would later write into it while its stale marker still claimed it complete.
    """
    doomed = [
        c
        for c in list_checkpoints(folder)
        if not c.complete or keep_step is None or c.step > keep_step
    ]
    for checkpoint in doomed:
        delete_checkpoint(checkpoint.path)
    return [c.step for c in doomed]


def rank_of_file(name: str) -> int | None:
    """The rank a checkpoint file belongs to, or None for files every rank shares."""
    match = _RANK_FILE.search(PurePosixPath(name).name)
    return int(match.group(1)) if match else None


def upload(local_dir: str | Path, remote_dir: str, *, shared_files: bool) -> int:
    """Copy one node's checkpoint files to object storage; returns the number of files.

    With `shared_files` false only files that belong to a rank go up: the primary uploads the
    shared ones (config, weights, trainer state), so nodes do not race to write the same name.
    """
    local_root = Path(local_dir)
    sources, targets = [], []
    for file in sorted(p for p in local_root.rglob("*") if p.is_file()):
        relative = file.relative_to(local_root).as_posix()
        if not shared_files and rank_of_file(relative) is None:
            continue
        sources.append(str(file))
        targets.append(f"{remote_dir.rstrip('/')}/{relative}")
    if sources:
        fs, _ = _fs(remote_dir)
        fs.put(sources, [_fs(t)[1] for t in targets])
    return len(sources)


def download(remote_dir: str, local_dir: str | Path, *, ranks: Iterable[int]) -> int:
    """Fetch a checkpoint's shared files and those of `ranks` (this node's) into `local_dir`.

    An object whose name would land outside `local_dir` stops it before anything is written
    (`UnsafePathError`): every rank resumes from what lands there.
    """
    wanted = set(ranks)
    local_dir = Path(local_dir)
    fs, root = _fs(remote_dir)
    root = root.rstrip("/")
    sources, targets = [], []
    for name in fs.find(root):
        target = key_destination(name, root, local_dir, where=remote_dir)
        relative = target.relative_to(local_dir).as_posix()
        rank = rank_of_file(relative)
        if relative == MARKER or (rank is not None and rank not in wanted):
            continue
        sources.append(name)
        targets.append(target)
    # Folders are made only once every key has been checked (`key_destination`).
    for target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
    if sources:
        fs.get(sources, [str(target) for target in targets])
    return len(sources)


def _fs(uri: str) -> tuple[AbstractFileSystem, str]:
    fs, path = url_to_fs(to_uri(uri))
    return fs, path
