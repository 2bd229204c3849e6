"""Crash-safe files for the local registry: the registry lock, staging folders.

The rules that keep a registry readable whatever happens to a writer (Ctrl-C, SIGKILL, a
full disk):

- a file is replaced whole (`storage.write_atomic`), so a reader sees the old file or the
  new one, never half of either;
- a folder is filled under a hidden staging name and renamed into place once complete;
- writers serialise on `fcntl.flock`, which the kernel drops when the holder dies, so a
  killed writer never blocks the next one (the lock file's mere existence means nothing);
- a staging folder stays flock-ed by its writer while it fills it, so the next writer can
  tell a folder whose owner died (safe to delete) from one still being filled.

Local filesystems only: flock is not reliable across machines on NFS or gcsfuse.
"""

import contextlib
import fcntl
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from llm_pipeline.registry.base import RegistryError
from llm_pipeline.safe_paths import copy_tree
from llm_pipeline.storage import fsync_dir, is_remote, local_copy, to_uri

#: Seconds a writer waits for the registry lock before giving up. Writers hold it for
#: milliseconds (model files are copied before it is taken), so a long wait means a stuck
#: process, not a busy registry.
LOCK_TIMEOUT_S = 120.0


@contextlib.contextmanager
def exclusive_lock(path: Path, timeout_s: float | None = None) -> Iterator[None]:
    """Hold an exclusive flock on `path` (created if missing) for the `with` block.

    Never nest two of these on the same file in one process: flock locks belong to open
    files, so the inner one would wait for the outer one forever (here: until the timeout).
    """
    timeout = LOCK_TIMEOUT_S if timeout_s is None else timeout_s
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while not _try_flock(fd):
            if time.monotonic() >= deadline:
                raise RegistryError(
                    f"{path}: another process has held the registry lock for over "
                    f"{timeout:.0f} s; is a registry command stuck?"
                )
            time.sleep(0.02)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextlib.contextmanager
def staging_folder(parent: Path, lock: Path) -> Iterator[Path]:
    """Yield a new empty folder under `parent`, flock-ed by this process until the block ends.

    It is created under the registry `lock`, so `remove_abandoned` (which runs under the
    same lock) never sees it unlocked. Whatever is still there when the block ends (the
    caller did not rename it away) is deleted.
    """
    with exclusive_lock(lock):
        parent.mkdir(parents=True, exist_ok=True)
        folder = parent / uuid.uuid4().hex
        folder.mkdir()
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        os.close(fd)


def remove_abandoned(parent: Path) -> None:
    """Delete the staging folders under `parent` whose writer died; call under the lock."""
    if not parent.is_dir():
        return
    for entry in parent.iterdir():
        if not entry.is_dir() or entry.is_symlink():
            entry.unlink(missing_ok=True)
            continue
        try:
            fd = os.open(entry, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            continue
        try:
            if _try_flock(fd):  # nobody holds it: its writer is gone
                shutil.rmtree(entry, ignore_errors=True)
        finally:
            os.close(fd)


@contextlib.contextmanager
def in_use(folder: Path) -> Iterator[None]:
    """Hold a shared flock on `folder` for the block: a deploy checking a version holds its
    folder so, and `registry prune` (`try_claim`) leaves a version so held alone."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # closing drops the lock


@contextlib.contextmanager
def try_claim(folder: Path) -> Iterator[bool]:
    """An exclusive flock on `folder` if nobody holds it (True), else False at once: the
    folder is `in_use`. Call under the registry lock, so nothing waits on anything."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield _try_flock(fd)
    finally:
        os.close(fd)


def remove_tree(folder: Path) -> None:
    """Delete every entry under `folder` (the folder itself stays); nothing when missing."""
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def fsync_tree(folder: Path) -> None:
    """Flush every file and folder under `folder` (itself included) to disk."""
    for current, _folders, files in os.walk(folder):
        for name in files:
            fd = os.open(Path(current) / name, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(current))


def model_source(model_dir: str) -> Path | None:
    """The local model folder to copy from, checked; None for a remote one (downloaded).

    The folder named may itself be a link (`runs/latest`): the user chose it. Links inside it
    are refused (`put_model`)."""
    if is_remote(model_dir):
        return None
    folder = Path(to_uri(model_dir)).expanduser()
    if not folder.is_dir():
        raise RegistryError(f"model_dir {model_dir}: no such folder")
    if not any(folder.iterdir()):
        raise RegistryError(f"model_dir {model_dir}: the folder is empty")
    return folder.resolve()


def put_model(target: Path, source: Path | None, model_dir: str) -> None:
    """Put the model files at `target`: copied from `source`, else downloaded.

    Copied, not hard-linked: a hard link is the run's file itself, so editing a run file would
    change the registered version (and making it read-only would make the run's file read-only
    too: one inode). A symbolic link in `source` is refused, never followed
    (`safe_paths.copy_tree`): it would pull a file from outside the run into the registry.
    """
    if source is not None:
        copy_tree(source, target)
        return
    try:
        downloaded = local_copy(model_dir, target.parent / "download")
    except FileNotFoundError:
        raise RegistryError(f"model_dir {model_dir}: no such folder") from None
    if not downloaded.is_dir():
        raise RegistryError(f"model_dir {model_dir}: a file, not a folder")
    os.rename(downloaded, target)
