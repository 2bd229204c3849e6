"""One temporary folder per local run, for what its steps write to the system's temp folder.

KFP's local runner starts each step with `program_path=$(mktemp -d)` and never removes it:
every step of every run left a `/tmp/tmp.*` folder. The steps are started with `TMPDIR`
pointing at a folder of the run's own (mktemp, Python's `tempfile` and torch all read it),
which is removed when the run ends, however it ends: a normal end, a failure, Ctrl-C,
SIGTERM. A run killed with SIGKILL cannot remove its own: the next run removes every such
folder whose run is gone (the folder's name holds the run's pid).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil

#: Start of a run's folder name in the system's temp folder; the CLI's pid follows.
PREFIX = "llm-pipeline-run-"
_NAME = re.compile(rf"^{re.escape(PREFIX)}(\d+)-")


@contextlib.contextmanager
def run_scratch_folder(parent: Path | None = None) -> Iterator[Path]:
    """A new folder under `parent` (default: the system's temp folder) that processes
    started inside the `with` use as `TMPDIR`; removed, with all in it, at the end."""
    parent = Path(parent or tempfile.gettempdir())
    for abandoned in abandoned_folders(parent):
        shutil.rmtree(abandoned, ignore_errors=True)
    folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=parent))
    previous = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(folder)
    try:
        yield folder
    finally:
        if previous is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = previous
        shutil.rmtree(folder, ignore_errors=True)


def abandoned_folders(parent: Path) -> list[Path]:
    """The run folders under `parent` whose run (the pid in the name) is gone."""
    found = []
    for folder in sorted(parent.glob(f"{PREFIX}*")):
        match = _NAME.match(folder.name)
        if match and folder.is_dir() and not psutil.pid_exists(int(match.group(1))):
            found.append(folder)
    return found
