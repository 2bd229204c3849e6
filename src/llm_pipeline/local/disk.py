"""What a local run keeps on disk: sizes, and the last complete checkpoint.

A 20-step run keeps around a hundred MB, mostly training checkpoints (weights and optimizer
states); the summary and the stop line say how much and where, so that nothing piles up
unseen (`cleanup` removes old runs' share).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llm_pipeline.output_files import Step
from llm_pipeline.storage import folder_size
from llm_pipeline.train.checkpoints import MARKER, PREFIX

#: The folder beside finetune's outputs where a local run keeps its checkpoints unless
#: `train.checkpoint_dir` names one (train/checkpoints.py::resolve_checkpoint_root).
CHECKPOINTS = "checkpoints"


def format_size(size: int) -> str:
    """`389 MB`, `1.2 GB`: decimal units, as `du -h --si` and file managers say them."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            value = size / scale
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{size} B"


def checkpoint_root(run_dir: Path, configured: str | None) -> Path | None:
    """Where the run's finetune step keeps checkpoints: `train.checkpoint_dir` (local only),
    else `finetune/checkpoints` in the run folder."""
    if configured:
        return None if "://" in configured else Path(configured).expanduser()
    return run_dir / Step.FINETUNE.display_name / CHECKPOINTS


def last_checkpoint(root: Path | None) -> Path | None:
    """The newest complete checkpoint (its marker written last) under `root`'s `run-*/`
    folders, the one a run with the same settings on the same folder resumes from."""
    if root is None:
        return None
    markers = root.glob(f"run-*/{PREFIX}*/{MARKER}")
    newest = max(markers, key=lambda marker: marker.stat().st_mtime, default=None)
    return newest.parent if newest is not None else None


@dataclass(frozen=True)
class KeptOnDisk:
    """What a run left: its folder and size, and its checkpoints' folder and size."""

    run_dir: Path
    size: int
    checkpoints: Path | None
    checkpoints_size: int

    def describe(self) -> str:
        """`Kept on disk: 389 MB in /…/run (checkpoints 380 MB of it, in …/checkpoints).`"""
        line = f"Kept on disk: {format_size(self.size)} in {self.run_dir}"
        if self.checkpoints is None:
            return line + "."
        if self.checkpoints.resolve().is_relative_to(self.run_dir.resolve()):
            of = f"checkpoints {format_size(self.checkpoints_size)} of it"
            return f"{line} ({of}, in {self.checkpoints})."
        return f"{line}; checkpoints: {format_size(self.checkpoints_size)} in {self.checkpoints}."


def kept_on_disk(run_dir: Path, checkpoint_dir: str | None = None) -> KeptOnDisk:
    """Sizes of the run folder and of the checkpoints' folder (`train.checkpoint_dir`,
    which other runs may share, or the run's own)."""
    root = checkpoint_root(run_dir, checkpoint_dir)
    # A run shorter than train.save_steps saves none: its folder holds only the ranks' lock
    # files (and DPO's reference log-probs), which are no checkpoints to speak of.
    saved = root is not None and any(root.glob(f"run-*/{PREFIX}*"))
    checkpoints_size = folder_size(root) if root is not None and saved else 0
    found = root if saved else None
    return KeptOnDisk(run_dir, folder_size(run_dir), found, checkpoints_size)
