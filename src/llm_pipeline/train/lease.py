"""One training run per checkpoint folder on object storage: a lease object, renewed.

Object storage has no locks, and its checkpoints are staged per job on local disk, so
`run_lock`'s kernel locks cannot keep two jobs apart there. Instead the primary (global rank
0) creates `LEASE.json` in the run's folder only if it is absent (Cloud Storage's
`ifGenerationMatch=0` precondition), naming its holder: host, pid, Vertex job id, since when,
until when. It renews it every `RENEW_S`, and deletes it when the run ends. A second run
finds it and is refused with the holder's name. A lease is taken over when:
- it has expired (its holder died without deleting it, or lost its connection): a dead run
  blocks the folder for at most `TTL_S`;
- it belongs to the same Vertex job (`CLOUD_ML_JOB_ID`): Vertex restarts a job only after
  stopping its previous containers, so the holder is that job's own dead attempt;
- it cannot be read as a lease (not JSON, or no numeric `expires`): every lease is written
  whole in one request, so no holder left it so, and no holder can be named or waited for.
A takeover deletes exactly the generation it read and then creates anew: of two runs taking
over at once, one fails its precondition and is refused.

A holder that finds its lease gone or replaced at a renewal stops at once, without saving.
Not covered: a holder cut off from Cloud Storage (or paused) for longer than `TTL_S` writes on
until its next renewal fails, after another run may have taken over; Cloud Storage offers no
fencing token that would make its late writes fail. Clocks: expiry is judged by the reader's
clock against the holder's, so clocks must agree to well within `TTL_S`.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from fsspec import AbstractFileSystem
from fsspec.core import url_to_fs

from llm_pipeline.storage import is_gcs

LEASE = "LEASE.json"
TTL_S = 600.0
RENEW_S = 60.0


@dataclass
class Lease:
    """A lease this process holds on `folder` (a gs:// URI); renewed until `release`."""

    folder: str
    fs: AbstractFileSystem
    path: str
    generation: str
    body: dict[str, Any]
    _stop: threading.Event

    def renew(self) -> bool:
        """Extend the lease; False when it is no longer this process's."""
        if _generation(self.fs, self.path) != self.generation:
            return False
        self.body["expires"] = time.time() + TTL_S
        taken = _replace(self.fs, self.path, self.generation, self.body)
        if taken is None:
            return False
        self.generation = taken
        return True

    def release(self) -> None:
        """Stop renewing and delete the lease, if it is still this process's."""
        self._stop.set()
        if _generation(self.fs, self.path) == self.generation:
            _delete_generation(self.fs, self.path, self.generation)

    def keep_renewed(self) -> None:
        """Renew every `RENEW_S` in a daemon thread; end this process if the lease is lost."""

        def loop() -> None:
            while not self._stop.wait(RENEW_S):
                try:
                    held = self.renew()
                except OSError:
                    held = time.time() < self.body["expires"]  # a passing outage: retry
                if not held:
                    print(
                        f"lost the lease on checkpoint folder {self.folder} (another run took "
                        "it over): stopping without a checkpoint",
                        file=sys.stderr,
                        flush=True,
                    )
                    os._exit(1)

        threading.Thread(target=loop, name="lease-renewal", daemon=True).start()


def acquire(folder: str, *, job: str | None) -> Lease | str:
    """Take the lease on `folder`; the Lease, or a description of its live holder.

    Cloud Storage only: the lease rests on its object generations and their preconditions,
    which other stores lack (`config.train.checkpoint_folder_problem` refuses them first).
    """
    if not is_gcs(folder):
        raise ValueError(f"{folder}: the checkpoint lease needs Cloud Storage (gs://)")
    fs, root = url_to_fs(folder)
    path = f"{root.rstrip('/')}/{LEASE}"
    now = time.time()
    body = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "job": job,
        "since": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "expires": now + TTL_S,
    }
    held = _read(fs, path)
    if held is None:
        generation = _create(fs, path, body)
    else:
        current, generation_read = held
        same_job = job is not None and current.get("job") == job
        if not same_job and current["expires"] > now:
            return _describe(current)
        if not current["expires"]:
            print(f"{folder}/{LEASE} is not a lease this code wrote; taking it over", flush=True)
        generation = _replace(fs, path, generation_read, body)
    if generation is None:
        again = _read(fs, path)
        return _describe(again[0]) if again else "another run, which took it a moment ago"
    return Lease(folder, fs, path, generation, body, threading.Event())


def _describe(note: dict[str, Any]) -> str:
    job = f", Vertex job {note['job']}" if note.get("job") else ""
    until = time.strftime("%H:%M:%S %Z", time.localtime(note["expires"]))
    return (
        f"pid {note.get('pid')} on host {note.get('host')}{job}, running since "
        f"{note.get('since')}; its lease lasts until {until} unless renewed"
    )


def _read(fs: AbstractFileSystem, path: str) -> tuple[dict[str, Any], str] | None:
    """The lease's note and generation; None if there is none. A note that is not a lease
    (damaged, or edited by hand) reads as one that expired at 0."""
    try:
        generation = _generation(fs, path)
        data = fs.cat_file(path)
    except FileNotFoundError:
        return None
    if generation is None:
        return None
    return _note(data), generation


def _note(data: bytes) -> dict[str, Any]:
    """`data` as a lease's note, its `expires` a finite number (0 if it has none)."""
    try:
        note = json.loads(data)
    except ValueError:
        note = None
    if not isinstance(note, dict):
        return {"expires": 0.0}
    expires = note.get("expires")
    if isinstance(expires, bool) or not isinstance(expires, int | float):
        expires = 0.0
    note["expires"] = float(expires) if math.isfinite(expires) else 0.0
    return note


def _generation(fs: AbstractFileSystem, path: str) -> str | None:
    fs.invalidate_cache(path)
    try:
        return str(fs.info(path)["generation"])
    except FileNotFoundError:
        return None


def _create(fs: AbstractFileSystem, path: str, body: dict[str, Any]) -> str | None:
    """Create the lease if no object is there (ifGenerationMatch=0); its generation, or None."""
    try:
        fs.pipe_file(path, json.dumps(body).encode(), mode="create")
    except FileExistsError:
        return None
    return _generation(fs, path)


def _replace(
    fs: AbstractFileSystem, path: str, generation: str, body: dict[str, Any]
) -> str | None:
    """Replace generation `generation` of the lease; None if another writer got there first."""
    if not _delete_generation(fs, path, generation):
        return None
    return _create(fs, path, body)


def _delete_generation(fs: AbstractFileSystem, path: str, generation: str) -> bool:
    """Delete the lease only if `generation` is still the live one (`ifGenerationMatch`)."""
    bucket, key, _ = fs.split_path(path)
    try:
        fs.call("DELETE", "b/{}/o/{}", bucket, key, ifGenerationMatch=generation)
    except (FileNotFoundError, FileExistsError):
        return False  # gone, or a newer generation is live (412)
    fs.invalidate_cache(path)
    return True
