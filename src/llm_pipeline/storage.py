"""The project's one place for paths: local, `gs://` (gcsfs), `s3://` (s3fs), Vertex's `/gcs/`.

Steps read their inputs through fsspec so the same config works on a laptop and on Vertex,
and write their outputs with `atomic_output_dir` so a failed step never leaves a folder
that a later step (or a rerun) could mistake for a finished one; a single file that others
read while it changes (a checkpoint's marker, a registry record, a rendezvous note) is
replaced whole with `write_atomic`.

Vertex's `/gcs/` mount is a local path for writing (the step's outputs go there), but every
read through it is a Cloud Storage request: `local_copy` copies from it as from `gs://`.
gcsfuse refuses to rename a folder that holds files, so an output folder there is written in
place and committed by a marker written last (`OUTPUT_MARKER`); readers of step outputs ask
`check_output_complete`.
"""

import contextlib
import errno
import fcntl
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

from fsspec.core import url_to_fs
from fsspec.utils import get_protocol

from llm_pipeline.output_files import Step
from llm_pipeline.safe_paths import copy_file, copy_tree, key_destination

#: Vertex AI mounts Cloud Storage here with gcsfuse: `/gcs/BUCKET/KEY` is `gs://BUCKET/KEY`.
GCS_MOUNT = Path("/gcs")

_LOCAL_PROTOCOLS = frozenset({"file", "local"})
#: fsspec's names for Cloud Storage (gcsfs registers both).
_GCS_PROTOCOLS = frozenset({"gs", "gcs"})

#: Written last into a step's output folder on the /gcs/ mount, where the folder cannot be
#: renamed into place: a folder there, or at its gs:// address, without it is unfinished.
#: (The name is the one Hadoop and Spark jobs leave in their output folders on object stores.)
OUTPUT_MARKER = "_SUCCESS"

#: In the name of the hidden temp file `write_atomic` writes beside its target; one that a
#: killed writer left behind is safe to delete (`is_temp_file`).
TEMP_MARK = ".tmp-"


def to_uri(path: str | Path) -> str:
    """`path` as fsspec should open it.

    A `/gcs/...` path that an earlier Vertex step printed is read as `gs://...` on machines
    without the mount, so it keeps working off Vertex; `file://` is dropped so local paths
    stay plain paths.
    """
    text = str(path)
    if text.startswith("file://"):
        return text[len("file://") :]
    if text.startswith(f"{GCS_MOUNT}/") and not GCS_MOUNT.is_dir():
        return "gs://" + text[len(f"{GCS_MOUNT}/") :]
    return text


def is_remote(uri: str | Path) -> bool:
    """Whether `uri` must be opened through fsspec (`gs://`, `s3://`, ...) rather than as a path.

    A `/gcs/` path with the mount present is a path: steps write their outputs there. For
    reading, it is as remote as `gs://` (`on_gcs_mount`).
    """
    return get_protocol(to_uri(uri)) not in _LOCAL_PROTOCOLS


def is_gcs(uri: str | Path) -> bool:
    """Whether `uri` is a Cloud Storage object or folder (`gs://`, or `/gcs/` off Vertex)."""
    return get_protocol(to_uri(uri)) in _GCS_PROTOCOLS


def on_gcs_mount(path: str | Path) -> bool:
    """Whether `path` lies under Vertex's Cloud Storage mount (gcsfuse), present here."""
    text = str(path)
    return text.startswith(f"{GCS_MOUNT}/") and GCS_MOUNT.is_dir()


def looks_like_path(name: str) -> bool:
    """Whether `name`, which names nothing local, was meant as a path rather than a hub id.

    Hugging Face hub ids are `name` or `owner/name`; a name that starts like a path (`/`,
    `./`, `../`, `~`) or has more than one `/` is a mistyped path, and sending it to the hub
    would only produce a confusing 404. Check for an existing local path first: `owner/name`
    can be a local folder too.
    """
    return name.startswith(("/", "./", "../", "~")) or name.count("/") > 1


def local_copy(uri: str | Path, dest_dir: str | Path) -> Path:
    """A path on local disk holding `uri`: the path itself when it is one, else a copy under
    `dest_dir`.

    Libraries that memory-map their inputs (`datasets`, `safetensors`) want local files; a
    copy also means a remote read fails here, with the URI in the message, not deep inside
    them. Vertex's `/gcs/` mount counts as remote: each read there is a Cloud Storage
    request, so processes that read a folder many times (every rank, every epoch) read a
    copy. A folder is copied whole, keeping its layout. Raises FileNotFoundError when `uri`
    does not exist, and `UnsafePathError` for an object whose name would land outside the copy
    (`safe_paths`), before anything is copied.
    """
    if not is_remote(uri):
        local = Path(to_uri(uri)).expanduser()
        if not local.exists():
            raise FileNotFoundError(f"{uri}: no such file or folder")
        if not on_gcs_mount(local):
            return local
        target = Path(dest_dir) / local.name
        target.parent.mkdir(parents=True, exist_ok=True)
        if local.is_dir():
            copy_tree(local, target)  # gcsfuse shows objects as links: never followed
        else:
            copy_file(local, target)
        return target
    fs, root = url_to_fs(to_uri(uri))
    root = root.rstrip("/")
    if not fs.exists(root):
        raise FileNotFoundError(f"{uri}: no such file or folder")
    target = Path(dest_dir) / (PurePosixPath(root).name or "data")
    if not fs.isdir(root):
        target.parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(root, str(target))
        return target
    remote_files = fs.find(root)
    # Every key is checked before anything is written: none may land outside `target`.
    local_files = [
        str(key_destination(name, root, target, where=str(uri))) for name in remote_files
    ]
    for name in local_files:
        Path(name).parent.mkdir(parents=True, exist_ok=True)
    target.mkdir(parents=True, exist_ok=True)  # an empty remote folder is still a folder
    if remote_files:
        # One call with lists: gcsfs and s3fs fetch the files concurrently.
        fs.get(remote_files, local_files)
    return target


@contextlib.contextmanager
def atomic_output_dir(final: str | Path) -> Iterator[Path]:
    """Yield a folder to write into; it becomes `final`, whole, only on success.

    On local disk: an empty sibling, renamed to `final` at the end; on any exception (Ctrl-C
    included) the sibling is deleted and `final` is left as it was. An existing `final` is
    replaced: a rerun overwrites the previous output.

    On Vertex's `/gcs/` mount gcsfuse refuses to rename a folder that holds files (EMFILE,
    unless mounted with a `--rename-dir-limit` above its file count) and renames one object at
    a time where it does. There `final` itself is emptied (its marker first), written in place,
    and `OUTPUT_MARKER` is written last: a step killed on the way leaves a folder without the
    marker, which `check_output_complete` refuses; the previous output is gone by then.
    Object-store URIs are refused: write to the artifact's `/gcs/` path.
    """
    if is_remote(final):
        raise ValueError(
            f"atomic_output_dir writes local folders, got {final}; on Vertex, write to the "
            "artifact's /gcs/ path"
        )
    final = Path(to_uri(final)).expanduser()
    if on_gcs_mount(final):
        _empty_output(final)
        try:
            yield final
        except BaseException:
            _empty_output(final, missing_ok=True)
            raise
        write_atomic(final / OUTPUT_MARKER, time.strftime("%Y-%m-%dT%H:%M:%S%z\n"))
        return
    final.parent.mkdir(parents=True, exist_ok=True)
    # A sibling, so the final rename stays on one filesystem; hidden, so listings of the
    # parent folder don't show it as an output.
    staging = final.parent / f".{final.name}.tmp-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    try:
        yield staging
        _move_into_place(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def abandoned_staging(final: str | Path) -> list[Path]:
    """What `atomic_output_dir(final)` leaves beside a local `final` when it is killed on the
    way: its staging folder (part of an output) and, killed while replacing, the previous
    output moved aside. Remove them only while no other writer of `final` can be running."""
    final = Path(final)
    pattern = re.compile(rf"^\.{re.escape(final.name)}\.(tmp|old)-[0-9a-f]{{8}}$")
    if not final.parent.is_dir():
        return []
    return sorted(path for path in final.parent.iterdir() if pattern.match(path.name))


def _empty_output(folder: Path, *, missing_ok: bool = False) -> None:
    """Make `folder` an empty folder: its marker goes first, so it is never "complete" with
    part of its files deleted."""
    (folder / OUTPUT_MARKER).unlink(missing_ok=True)
    if folder.is_file() or folder.is_symlink():
        folder.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    for child in folder.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=missing_ok)
        else:
            child.unlink(missing_ok=missing_ok)


def check_output_complete(
    folder: str | os.PathLike[str], *, made_by: Step, error: Callable[[str], Exception]
) -> None:
    """Raise `error(message)` if the step output `folder` was written through the `/gcs/`
    mount and is unfinished (no `OUTPUT_MARKER`).

    Only `/gcs/...` paths are checked (read through the mount, or as `gs://` off Vertex):
    those are what Vertex hands steps for their artifacts, and the only outputs written in
    place. A local output appeared by rename, so it is whole if it exists; a `gs://` folder
    a user uploaded is not a step's output. A missing folder passes, for the reader to report.
    """
    text = os.fspath(folder)
    if not text.startswith(f"{GCS_MOUNT}/"):
        return
    fs, path = url_to_fs(to_uri(text))
    path = path.rstrip("/")
    if fs.isdir(path) and not fs.exists(f"{path}/{OUTPUT_MARKER}"):
        raise error(
            f"{folder}: the {made_by.display_name} step's output is unfinished: it has no "
            f"{OUTPUT_MARKER}, which that step writes last (it was stopped while writing?); "
            f"run the {made_by.display_name} step again"
        )


def _move_into_place(staging: Path, final: Path) -> None:
    """Rename `staging` to `final`, replacing an existing `final` folder or file."""
    try:
        os.rename(staging, final)  # POSIX replaces an empty folder in the same call
        return
    except OSError:
        if not final.exists():
            raise
    old = final.parent / f".{final.name}.old-{uuid.uuid4().hex[:8]}"
    os.rename(final, old)
    try:
        os.rename(staging, final)
    except BaseException:
        os.rename(old, final)  # put the previous output back rather than leave nothing
        raise
    if old.is_dir():
        shutil.rmtree(old, ignore_errors=True)
    else:
        old.unlink(missing_ok=True)


def write_atomic(path: str | Path, text: str) -> None:
    """Replace the local file `path` with `text`: a reader, or a kill at any moment, sees the
    old file or the new one, never half of either.

    Written to a hidden temp file in the same folder (a rename is atomic only within one
    filesystem), fsynced, `os.replace`d over `path`, and the folder fsynced so the rename
    survives a power cut. JSON is written as `write_atomic(path, json.dumps(value))`.
    """
    path = Path(path)
    temp = path.parent / f".{path.name}{TEMP_MARK}{uuid.uuid4().hex[:8]}"
    try:
        with open(temp, "x", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def is_temp_file(path: Path) -> bool:
    """Whether `path` is a temp file that a killed `write_atomic` left behind."""
    return path.name.startswith(".") and TEMP_MARK in path.name


@contextlib.contextmanager
def held_flock(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on the file `path` (made if missing) for the `with` block,
    waiting for it as long as another process holds it. The kernel drops a flock with its
    holder however it dies, so the file's mere existence never blocks anyone. Opened
    read-only, which is all flock needs: a lock file another user made opens too."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # the lock goes with the descriptor


def fsync_dir(folder: Path) -> None:
    """Flush `folder`'s entries, so a rename or a new file in it survives a power cut.

    Some mounts (gcsfuse's /gcs/) cannot sync a folder; there the rename is still atomic and
    only this durability is lost, so that refusal is not an error.
    """
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.ENOTSUP, errno.ENOSYS):
            raise
    finally:
        os.close(fd)


def folder_size(path: Path) -> int:
    """Bytes of the files under `path` (links not followed; a file: its own size); 0 when it
    does not exist."""
    if not path.is_dir():
        return path.lstat().st_size if path.exists() or path.is_symlink() else 0
    total = 0
    for root, _folders, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total
