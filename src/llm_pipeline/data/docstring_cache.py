"""A disk cache of the parsed docstring pairs, shared by the four built-in datasets.

Why: `builtin:docstrings`, `builtin:instructions`, `builtin:docstring_packages` and
`builtin:preferences` (each task's `demo_data`) all start from one parse of every Python
file of the standard library and site-packages (data/docstrings.py): about a minute on two
cores, several on a busy machine, and every process that loads one of them repeats it (each
step of a local pipeline is a process of its own). Measured with this project's environment
(18,201 files, 13,941 pairs) on two cores shared with other jobs (load average about 4): the
parse took 125 to 134 s; reading the cache back took 0.1 s (1.8 MB of gzipped JSON lines),
and a whole cached load of the pairs and their splits 2.1 s, most of it the listing and stat
of the files (1.4 s) that the parse needs as well.

What is stored is the parse's result before any split: the deduplicated pairs in path order.
Seeds and split shares are applied afterwards, so one entry serves every dataset and seed.
That result is a function of

- the roots and their files (each file's path, size and modification time: an edited file
  or a new one changes the key, as in a folder of the user's own code),
- the Python version and the installed distributions (`docstrings.environment_fingerprint`),
- the parsing rules (`docstrings.PARSER_VERSION`) and this file format (`FORMAT`),

and that is the key, kept in the file's first line. There is one file per set of roots,
`pairs-<digest of the roots>.jsonl.gz`; a new key overwrites it, so the folder does not grow
as packages are upgraded.

Where: `docstrings/` of the project's cache folder (`caches.py`): `$LLM_PIPELINE_CACHE_DIR/`
when that variable is set, else `$XDG_CACHE_HOME/llm-pipeline/`, else `~/.cache/llm-pipeline/`.
Deleting the folder is always safe. A folder that cannot be written turns the cache off for
the process, with one warning.

Crash safety: a process may be killed at any moment, and several may build at once. A file
is written whole to a temporary name in the same folder, synced, then renamed over the old
one (`os.replace`, atomic), so a reader sees an old file, a new one or none, never half of
one; two builders both succeed and the last rename wins (their contents are equal). A file
that cannot be read anyway (a disk error, an edit by hand) is logged, ignored and rebuilt;
gzip's checksum and the pair count in the first line catch a damaged one.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import logging
import os
import tempfile
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from llm_pipeline import caches
from llm_pipeline.progress import status

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DocstringPair:
    """One pair: the documented object's qualified name, the docstring's prose, its summary.

    What the docstring datasets are built from (data/docstrings.py parses them) and what this
    cache holds: defined here, so that the parser can use the cache without a cycle.
    """

    name: str
    body: str
    summary: str
    #: The dotted module the object lives in (`json.decoder`); "" when unknown.
    module: str = ""
    #: True for the module's own docstring (then `name` is the module file's stem).
    is_module: bool = False

    @property
    def qualified_name(self) -> str:
        """`json.decoder.JSONDecoder.raw_decode`; the module itself for its own docstring."""
        if self.is_module or not self.module:
            return self.module or self.name
        return f"{self.module}.{self.name}"

    @property
    def document(self) -> str:
        return f"{self.name}: {self.body}"


#: The environment variable naming the project's cache folder (the pairs go in its
#: `docstrings/`): `caches.py` chooses the folder.
ENV_VAR = caches.ENV_VAR
#: The file format; bump it when what a file holds changes.
FORMAT = 1
#: A temporary file older than this was left by a killed writer (a writer keeps one for
#: about a second): the next writer removes it.
STALE_TEMP_S = 3600.0
#: Folders found unwritable in this process: not tried again, warned about once.
_unwritable: set[Path] = set()


def cache_folder() -> Path:
    """Where the parsed pairs are kept: `docstrings/` of the project's cache folder."""
    return caches.cache_folder("docstrings")


def cached_pairs(
    roots: Sequence[Path],
    files: Sequence[Path],
    *,
    depends_on: Sequence[str],
    build: Callable[[], list[DocstringPair]],
) -> list[DocstringPair]:
    """The pairs `build()` gives for `files` under `roots`: read from the cache when its key
    (the files, `depends_on`, FORMAT) matches, else built and stored."""
    resolved = [str(root.resolve()) for root in roots]
    path = cache_folder() / f"pairs-{_digest(resolved)[:16]}.jsonl.gz"
    key = _digest([f"format {FORMAT}", *depends_on, *resolved, _listing(files)])
    started = time.monotonic()
    pairs = _read(path, key)
    if pairs is not None:
        logger.info(
            "%d docstring pairs from the cache %s in %.1f s",
            len(pairs),
            path,
            time.monotonic() - started,
        )
        return pairs
    # The parse takes a minute or more: say so, or a first run sits silent on its dataset.
    status(
        f"building the docstring cache {path} (once; later runs read it in seconds): "
        f"parsing {len(files):,} Python files"
    )
    pairs = build()
    _write(path, key, pairs)
    return pairs


def _read(path: Path, key: str) -> list[DocstringPair] | None:
    """The pairs stored at `path` under `key`; None when absent, stale or unreadable."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as stream:
            header = json.loads(stream.readline())
            if header["key"] != key:
                logger.info("the docstring cache %s is out of date: rebuilding it", path)
                return None
            pairs = [DocstringPair(*json.loads(line)) for line in stream]
        if len(pairs) != header["pairs"]:
            raise ValueError(f"{len(pairs)} pairs where the header says {header['pairs']}")
        return pairs
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, EOFError, zlib.error, ValueError, TypeError, KeyError) as exc:
        logger.warning("ignoring the unreadable docstring cache %s (%r): rebuilding it", path, exc)
        return None


def _write(path: Path, key: str, pairs: list[DocstringPair]) -> None:
    """Store `pairs` at `path` whole or not at all; an unwritable folder turns the cache off."""
    folder = path.parent
    if folder in _unwritable:
        return
    header = json.dumps({"key": key, "pairs": len(pairs), "format": FORMAT})
    rows = (
        json.dumps([p.name, p.body, p.summary, p.module, p.is_module], ensure_ascii=False)
        for p in pairs
    )
    data = "\n".join([header, *rows, ""]).encode()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _remove_stale_temps(folder)
        handle, temp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(handle, "wb") as raw:
                with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as stream:
                    stream.write(data)
                raw.flush()
                os.fsync(raw.fileno())
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        _sync_folder(folder)
    except OSError as exc:
        _unwritable.add(folder)
        logger.warning(
            "the docstring cache is off: %s cannot be written (%s); the built-in datasets are "
            "parsed on every load. Set %s to a writable folder to cache them.",
            folder,
            exc,
            ENV_VAR,
        )


def _remove_stale_temps(folder: Path) -> None:
    """Remove what killed writers left behind (never read: readers open final names only)."""
    for temp in folder.glob(".pairs-*.tmp"):
        with contextlib.suppress(OSError):
            if time.time() - temp.stat().st_mtime > STALE_TEMP_S:
                temp.unlink()


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable; best effort (not every file system allows it)."""
    with contextlib.suppress(OSError):
        handle = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)


def _listing(files: Sequence[Path]) -> str:
    """A digest of each file's path, size and modification time: what changes when a file
    is added, removed or edited, at the cost of a stat per file instead of a parse."""
    entries = []
    for file in files:
        try:
            stat = file.stat()
            entries.append(f"{file}\0{stat.st_size}\0{stat.st_mtime_ns}")
        except OSError:
            entries.append(f"{file}\0missing")
    return _digest(entries)


def _digest(parts: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()
