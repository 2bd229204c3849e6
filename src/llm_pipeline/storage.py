"""The project's one place for paths: local, `gs://` (gcsfs), `s3://` (s3fs), Vertex's `/gcs/`.

Steps read their inputs through fsspec so the same config works on a laptop and on Vertex,
and write their outputs with `atomic_output_dir` so a failed step never leaves a folder
that a later step (or a rerun) could mistake for a finished one; a single file that others
read while it changes (a checkpoint's marker, a registry record, a rendezvous note) is
replaced whole with `write_atomic`.
"""

import contextlib
import errno
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from fsspec.core import url_to_fs
from fsspec.utils import get_protocol

#: Vertex AI mounts Cloud Storage here with gcsfuse: `/gcs/BUCKET/KEY` is `gs://BUCKET/KEY`.
GCS_MOUNT = Path("/gcs")

_LOCAL_PROTOCOLS = frozenset({"file", "local"})

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
    """Whether `uri` lives behind a network filesystem (`gs://`, `s3://`, ...)."""
    return get_protocol(to_uri(uri)) not in _LOCAL_PROTOCOLS


def looks_like_path(name: str) -> bool:
    """Whether `name`, which names nothing local, was meant as a path rather than a hub id.

    Hugging Face hub ids are `name` or `owner/name`; a name that starts like a path (`/`,
    `./`, `../`, `~`) or has more than one `/` is a mistyped path, and sending it to the hub
    would only produce a confusing 404. Check for an existing local path first: `owner/name`
    can be a local folder too.
    """
    return name.startswith(("/", "./", "../", "~")) or name.count("/") > 1


def local_copy(uri: str | Path, dest_dir: str | Path) -> Path:
    """A local path holding `uri`: the path itself when local, else a copy under `dest_dir`.

    Libraries that memory-map their inputs (`datasets`, `safetensors`) want local files; a
    copy also means a remote read fails here, with the URI in the message, not deep inside
    them. A folder is copied whole, keeping its layout. Raises FileNotFoundError when `uri`
    does not exist.
    """
    if not is_remote(uri):
        local = Path(to_uri(uri)).expanduser()
        if not local.exists():
            raise FileNotFoundError(f"{uri}: no such file or folder")
        return local
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
    local_files = [str(target / PurePosixPath(name).relative_to(root)) for name in remote_files]
    for name in local_files:
        Path(name).parent.mkdir(parents=True, exist_ok=True)
    target.mkdir(parents=True, exist_ok=True)  # an empty remote folder is still a folder
    if remote_files:
        # One call with lists: gcsfs and s3fs fetch the files concurrently.
        fs.get(remote_files, local_files)
    return target


@contextlib.contextmanager
def atomic_output_dir(final: str | Path) -> Iterator[Path]:
    """Yield an empty sibling folder to write into; it becomes `final` only on success.

    On any exception (Ctrl-C included) the sibling is deleted and `final` is left as it
    was, so a crash never leaves a half-written output behind. An existing `final` is
    replaced: a rerun overwrites the previous output. Local paths only (Vertex's `/gcs/`
    mount included): object stores have no atomic folder rename.
    """
    if is_remote(final):
        raise ValueError(
            f"atomic_output_dir writes local folders, got {final}; on Vertex, write to the "
            "artifact's /gcs/ path"
        )
    final = Path(to_uri(final)).expanduser()
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
