"""Names read from outside never become local paths outside the folder they belong in.

A bucket is not trusted (a shared bucket is only as trusted as everyone who can write it): an
object named `model/x/../../../../usr/lib/python3/site.py`, copied down by joining its name to a
local folder, would overwrite a module that is imported later, and the training image runs as
root. So every name that comes from outside and becomes a local path goes through
`path_inside` (a split name from a `dataset_dict.json`, a data file named in a `state.json`)
or `key_destination` (an object key from listing a remote folder): absolute names, names with
a `..` part, and names that resolve outside their folder (through a symbolic link already
there) are refused with an `UnsafePathError` naming them, before anything is written.

Copying a local folder has the same hole through symbolic links: a link in a run folder, or
an object that gcsfuse shows as a link on Vertex's `/gcs/` mount, would pull whatever it points
at (a private key, `/proc/self/environ`) into the copy. `copy_tree` copies regular files and
folders only and refuses links, opening every file with `O_NOFOLLOW` so a link that appears
while it copies is refused too.
"""

import os
import shutil
import stat
from pathlib import Path, PurePosixPath

from llm_pipeline.errors import UnsafePathError

#: Bytes read and written at a time by `copy_tree`.
_CHUNK = 16 * 1024 * 1024


def path_inside(folder: str | os.PathLike[str], name: object, *, where: str, what: str) -> Path:
    """`folder / name` for a `name` read from outside, refused unless it stays in `folder`.

    `where` and `what` name the source and the kind of name for the message
    (`"gs://b/data: split name in dataset_dict.json"`). `folder` itself is trusted.
    """
    if not isinstance(name, str):
        raise UnsafePathError(f"{where}: {what} {name!r} is not a text name; refused")
    why = _why_unsafe(name)
    base = Path(folder)
    path = base / name
    if why is None and not path.resolve().is_relative_to(base.resolve()):
        why = "resolves outside it (through a symbolic link there)"
    if why is not None:
        raise UnsafePathError(
            f"{where}: {what} {name!r} {why}, so it would reach outside {base}; refused "
            "(nothing was read or written for it)"
        )
    return path


def key_destination(key: str, root: str, folder: str | os.PathLike[str], *, where: str) -> Path:
    """Where the object `key`, found by listing the remote folder `root`, is copied in `folder`.

    `key` and `root` are as the filesystem lists them (no protocol); the local path is `key`
    relative to `root`, checked by `path_inside`.
    """
    prefix = root.rstrip("/") + "/"
    if not key.startswith(prefix):
        raise UnsafePathError(f"{where}: object key {key!r} is not under {root!r}; refused")
    return path_inside(folder, key[len(prefix) :], where=where, what="object key")


def _why_unsafe(name: str) -> str | None:
    """What makes `name` unusable as a path relative to a folder; None if nothing does."""
    if "\x00" in name:
        return "holds a NUL character"
    pure = PurePosixPath(name)
    if pure.is_absolute():
        return "is absolute"
    if ".." in pure.parts:
        return "has a '..' part"
    if not pure.parts:
        return "is empty (names the folder itself)"
    return None


def copy_tree(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Copy the folder `source` into `target` (made if missing): regular files and folders.

    Copies, never hard links: a copy does not change when the original is edited in place.
    A symbolic link, or anything that is neither a file nor a folder (a pipe would block the
    copy forever), is refused with an `UnsafePathError` naming it; `source` itself must not
    be a link either.
    """
    shown = Path(source)
    try:
        fd = os.open(shown, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as err:
        if shown.is_symlink():
            raise _link_refused(shown, os.readlink(shown)) from None
        raise err
    try:
        _copy_folder(fd, shown, Path(target))
    finally:
        os.close(fd)


def copy_file(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Copy the regular file `source` to `target`; a symbolic link is refused, not followed."""
    shown = Path(source)
    _copy_file(None, str(shown), shown, Path(target))


def _copy_folder(fd: int, shown: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    with os.scandir(fd) as listing:
        entries = sorted(listing, key=lambda entry: entry.name)
    for entry in entries:
        here = shown / entry.name
        if entry.is_symlink():
            raise _link_refused(here, os.readlink(entry.name, dir_fd=fd))
        if entry.is_dir(follow_symlinks=False):
            child = _open_no_link(entry.name, fd, here, os.O_DIRECTORY)
            try:
                _copy_folder(child, here, target / entry.name)
            finally:
                os.close(child)
        elif entry.is_file(follow_symlinks=False):
            _copy_file(fd, entry.name, here, target / entry.name)
        else:
            raise UnsafePathError(
                f"{here}: neither a file nor a folder (a pipe, socket or device); refused"
            )


def _copy_file(fd: int | None, name: str, shown: Path, target: Path) -> None:
    source = _open_no_link(name, fd, shown, 0)
    with open(source, "rb") as reader:
        status = os.fstat(reader.fileno())
        if not stat.S_ISREG(status.st_mode):
            raise UnsafePathError(f"{shown}: not a regular file; refused")
        with open(target, "wb") as writer:
            shutil.copyfileobj(reader, writer, _CHUNK)
    os.utime(target, ns=(status.st_atime_ns, status.st_mtime_ns))


def _open_no_link(name: str, fd: int | None, shown: Path, flags: int) -> int:
    """Open `name` (in the folder `fd`, if given) without following a link, even one that
    replaced it since it was listed."""
    try:
        return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | flags, dir_fd=fd)
    except OSError as err:
        if os.path.islink(shown):
            raise _link_refused(shown, os.readlink(name, dir_fd=fd)) from None
        raise err


def _link_refused(link: Path, points_at: str) -> UnsafePathError:
    return UnsafePathError(
        f"{link}: a symbolic link (to {points_at}); refused: links are not followed, so "
        "nothing from outside the folder is copied in. Put the file itself there"
    )
