"""One training run per checkpoint folder: every rank holds a kernel lock for as long as it lives.

Two runs writing one checkpoint folder corrupt each other's resume: one's rotation deletes the
checkpoint the other is about to load, and their saves interleave. So each rank takes an
exclusive `flock` on its own file, `.locks/rank-<rank>`, in the folder its Trainer writes,
before it reads or deletes anything there, and keeps it until the process ends. A second run's
rank finds its file locked and the run is refused with the holder's host, pid and start time.

Per rank rather than one lock per run: a run is over only when its last rank is gone, and a
rank that outlives its launcher (it saves before it stops) still holds its file. The kernel
drops a flock with its holder however the holder dies, so a lock is never stale, and the file
descriptor is not inherited by child processes (compilers of DeepSpeed's ops), which could
otherwise keep it after the rank is gone.

Where this holds: local disks, and NFS (Linux maps flock to NFS locks). On Vertex's /gcs/
mount the kernel keeps the locks per machine: two jobs on different VMs are not kept apart.
Object storage (`gs://`) has no locks, and its checkpoints are staged per job on local disk:
a run holds such a folder with a lease object instead (`lease`).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

LOCKS = ".locks"

_held: list[int] = []  # open descriptors whose locks this process keeps until it ends


def hold(folder: str | Path, *, rank: int) -> str | None:
    """Lock rank `rank`'s file in `folder` for the rest of this process; None when taken,
    else a description of the process that holds it."""
    locks = Path(folder) / LOCKS
    locks.mkdir(parents=True, exist_ok=True)
    path = locks / f"rank-{rank}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return _holder(path)
    except BaseException:
        os.close(fd)
        raise
    note = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "rank": rank,
        "since": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(note).encode(), 0)
    _held.append(fd)
    return None


def _holder(path: Path) -> str:
    try:
        note = json.loads(path.read_text(encoding="utf-8"))
        return (
            f"rank {note['rank']} of another run, pid {note['pid']} on host {note['host']}, "
            f"running since {note['since']}"
        )
    except (OSError, ValueError, KeyError, TypeError):
        return f"another run, which is still writing its note in {path}"
