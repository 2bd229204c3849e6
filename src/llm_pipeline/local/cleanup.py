"""`pipeline.py clean`: remove what old local runs keep and nothing reads again.

A local run keeps its downloaded and tokenized data, its trained model and its training
checkpoints in its folder under the pipeline root: 100 MB to 1 GB a run, 3.6 GB after 16
small ones. What a person comes back for is small and stays: each run's `report.html` and
`pipeline.log`, each step's error line and recorded outputs, the evaluation's scores,
predictions and report; and the registry (its versions are copies, not the run's folders).
Removed, from every run but the newest `keep`: the folders the download, preprocess and
finetune steps wrote (data, model, checkpoints, TensorBoard logs), with KFP's cache entries
that point into them (a later run would otherwise reuse data that is gone). Also removed:
KFP's temporary folders in the system's temp folder that runs before this version left
(`tmp.*` holding only the step's `ephemeral_component.py`, written over `KFP_TEMP_AGE_S`
ago: a younger one may be another KFP run's step starting), and run scratch folders whose
run is gone (`scratch`). A run folder without its `pipeline.log` that changed in the last
`RECENT_S` may still be running and is left alone, and so is what a kept run uses in an
old run's folder: the checkpoints its `train.checkpoint_dir` names (its resolved config says),
as when it was resumed from a stopped run with the command the stop line prints, and the
outputs it reused from KFP's cache (its log says), which a resume needs to match.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from llm_pipeline.local.console import CACHE_HIT
from llm_pipeline.local.run_pipeline import CACHE_FOLDER, LOG_FILE
from llm_pipeline.local.scratch import abandoned_folders
from llm_pipeline.output_files import Step
from llm_pipeline.storage import folder_size

#: A KFP local run's folder: `<pipeline name>-YYYY-MM-DD-HH-MM-SS-micro`.
RUN_FOLDER = re.compile(r"^.+-(\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2}-\d{6})$")
#: Steps whose folders hold data, models and checkpoints that no later run reads.
INTERMEDIATE_STEPS = (Step.DOWNLOAD, Step.PREPROCESS, Step.FINETUNE)
#: A run folder without its log that changed more recently than this may be running.
RECENT_S = 600.0
#: The configure step's output holding the run's resolved config (JSON).
RESOLVED = "resolved"
#: What KFP's `mktemp -d` leaves per step: the component's source, nothing else.
KFP_TEMP_FILE = "ephemeral_component.py"
#: Younger than this, a KFP temporary folder may be a live run's step about to start.
KFP_TEMP_AGE_S = 3600.0


@dataclass(frozen=True)
class Removal:
    """One thing `clean` removes: where, how big, and why it can go."""

    path: Path
    size: int
    why: str


def run_folders(root: Path) -> list[Path]:
    """The local runs' folders under `root`, oldest first (by the time in their names)."""
    found = (
        [
            (match.group(1), path)
            for path in root.iterdir()
            if path.is_dir() and (match := RUN_FOLDER.match(path.name))
        ]
        if root.is_dir()
        else []
    )
    return [path for _, path in sorted(found)]


def plan_cleanup(root: Path, *, keep: int = 1, temp_dir: Path | None = None) -> list[Removal]:
    """What `clean` removes under `root` (and in `temp_dir`, default the system's)."""
    runs = run_folders(root)
    old, kept = runs[: max(len(runs) - keep, 0)], runs[max(len(runs) - keep, 0) :]
    cache = root / CACHE_FOLDER
    in_use = [folder for run in kept if (folder := _checkpoint_dir(run)) is not None]
    in_use += [uri for run in kept for uri in _reused(run, cache)]
    removals: list[Removal] = []
    for run in old:
        if _may_be_running(run):
            continue
        for step in INTERMEDIATE_STEPS:
            folder = run / step.display_name
            for child in sorted(folder.iterdir()) if folder.is_dir() else []:
                if child.is_dir() and not any(_overlap(child, used) for used in in_use):
                    why = f"{step.display_name}'s {child.name} of an old run"
                    removals.append(Removal(child, folder_size(child), why))
    # The cache entries go first: a clean killed on the way then leaves none that names a
    # folder it removed, or removed part of, for a later run to be served from.
    removals = _stale_cache_entries(cache, [r.path for r in removals]) + removals
    return removals + _temporary_leftovers(Path(temp_dir or tempfile.gettempdir()))


def remove(removals: list[Removal]) -> int:
    """Remove every planned path, in the plan's order; returns the bytes freed."""
    freed = 0
    for removal in removals:
        if removal.path.is_dir():
            shutil.rmtree(removal.path, ignore_errors=True)
        else:
            removal.path.unlink(missing_ok=True)
        freed += removal.size
    return freed


def _checkpoint_dir(run: Path) -> Path | None:
    """The local `train.checkpoint_dir` a run was configured with (its configure step's
    resolved config), None for the default (its own folder) or an unreadable config."""
    try:
        config = json.loads((run / Step.CONFIGURE.display_name / RESOLVED).read_text())
        folder = config["train"]["checkpoint_dir"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Path(folder).expanduser().resolve() if folder and "://" not in folder else None


def _overlap(path: Path, other: Path) -> bool:
    path = path.resolve()
    return path == other or path.is_relative_to(other) or other.is_relative_to(path)


def _may_be_running(run: Path) -> bool:
    if (run / LOG_FILE).exists():
        return False
    newest = max((entry.stat().st_mtime for entry in run.glob("*/*")), default=0.0)
    return time.time() - max(newest, run.stat().st_mtime) < RECENT_S


def _stale_cache_entries(cache: Path, removed: list[Path]) -> list[Removal]:
    """KFP cache entries that name an output about to be removed."""
    stale = []
    for entry in sorted(cache.glob("*.json")) if cache.is_dir() else []:
        uris = _cache_uris(entry)
        if any(uri == path or uri.is_relative_to(path) for uri in uris for path in removed):
            stale.append(Removal(entry, entry.stat().st_size, "cache entry for removed outputs"))
    return stale


def _cache_uris(entry: Path) -> list[Path]:
    """The output locations a KFP cache entry names."""
    try:
        outputs = json.loads(entry.read_text())
    except (OSError, ValueError):
        return []
    return [
        Path(value["uri"])
        for value in outputs.values()
        if isinstance(value, dict) and isinstance(value.get("uri"), str)
    ]


def _reused(run: Path, cache: Path) -> list[Path]:
    """The outputs of earlier runs that `run` was served from KFP's cache (its log's lines)."""
    try:
        log = (run / LOG_FILE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    keys = {match.group(2) for match in CACHE_HIT.finditer(log)}
    entries = [entry for key in keys for entry in cache.glob(f"{key}*.json")]
    return [uri.resolve() for entry in entries for uri in _cache_uris(entry)]


def _temporary_leftovers(temp_dir: Path) -> list[Removal]:
    """This user's KFP `tmp.*` folders and scratch folders of runs that are gone."""
    found = []
    for folder in sorted(temp_dir.glob("tmp.*")):
        try:
            mine = folder.is_dir() and folder.stat().st_uid == os.getuid()
            if mine and [p.name for p in folder.iterdir()] == [KFP_TEMP_FILE]:
                # A KFP run going on (another checkout's, or one with its own TMPDIR) writes
                # the file just before its step imports it: only old ones are leftovers.
                if time.time() - (folder / KFP_TEMP_FILE).stat().st_mtime < KFP_TEMP_AGE_S:
                    continue
                found.append(Removal(folder, folder_size(folder), "KFP's temporary folder"))
        except OSError:
            continue
    for folder in abandoned_folders(temp_dir):
        found.append(Removal(folder, folder_size(folder), "temporary files of a run gone"))
    return found
