"""Remove the shared-memory segments DeepSpeed's CPU all-reduce leaves in /dev/shm.

On a CPU, every DeepSpeed rank of a job with two or more local ranks creates a 66 MB POSIX
shared-memory segment, `deepspeed_allreduce_buffer_<uid>_<MASTER_ADDR>_<MASTER_PORT>_<rank>`
(`ops/csrc/cpu/comm/shm.cpp`), and never unlinks it: each run of a laptop's local pipeline
kept 132 MB of RAM in /dev/shm until the next reboot, and a day of test runs filled it
(18 GB, then the OOM killer). DeepSpeed offers no hook to unlink them, and a rank killed
with SIGKILL could not run one, so the process that launched the ranks sweeps after them.

A segment is removed only when no process maps it any more and it is older than
`MIN_AGE_S`: a rank creates and maps its segment in one call, so an unmapped segment of
that age belongs to no running job (this user's or another run's on the same machine).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

SHM_DIR = Path("/dev/shm")
#: DeepSpeed's SHM_BUFFER_NAME, followed by `_<uid>_`.
PREFIX = "deepspeed_allreduce_buffer"
#: Younger segments are left alone: their rank may be between creating the file and mapping
#: it (a 66 MB write between the two: milliseconds, a second on a machine under load).
MIN_AGE_S = 2.0


def remove_stale_segments(
    shm_dir: Path = SHM_DIR, *, proc: Path = Path("/proc"), now: float | None = None
) -> list[str]:
    """Unlink this user's DeepSpeed all-reduce segments that no process maps; their names."""
    pattern = f"{PREFIX}_{os.getuid()}_*"
    try:
        candidates = sorted(shm_dir.glob(pattern))
    except OSError:
        return []
    if not candidates:
        return []
    mapped = _mapped_paths(proc, shm_dir)
    now = time.time() if now is None else now
    removed = []
    for path in candidates:
        try:
            old_enough = now - path.lstat().st_mtime >= MIN_AGE_S
        except OSError:
            continue
        if old_enough and str(path) not in mapped:
            try:
                path.unlink()
            except OSError:
                continue
            removed.append(path.name)
    return removed


def _mapped_paths(proc: Path, shm_dir: Path) -> set[str]:
    """Every file under `shm_dir` some readable process maps (/proc/PID/maps' last field)."""
    mapped: set[str] = set()
    for maps in proc.glob("[0-9]*/maps"):
        try:
            text = maps.read_text(errors="replace")
        except OSError:
            continue  # gone, or another user's
        for line in text.splitlines():
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith(str(shm_dir)):
                mapped.add(parts[5].removesuffix(" (deleted)"))
    return mapped
