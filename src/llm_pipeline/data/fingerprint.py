"""A digest of what a local run's download and preprocess read, for KFP's local cache.

KFP's local cache keys a step by its command and arguments. Arguments name the data
(`data.dataset`) but say nothing of its content, so an edited file would be served stale.
The local pipeline adds this digest to the cached steps' environment, which KFP's key
includes: same content and settings, same key; any change, a new key.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from llm_pipeline.config.data import BUILTIN_PREFIX
from llm_pipeline.data.docstrings import environment_fingerprint
from llm_pipeline.storage import is_remote

#: Bytes read at a time while hashing.
_CHUNK = 1 << 20


def content_digest(source: str, *, base: Path | None = None) -> str | None:
    """A digest of the content `source` names, or None where it cannot be known cheaply
    and surely (hub ids, remote files): such a source is downloaded on every run.

    `base` resolves a relative path. The built-in datasets are functions of the installed
    packages, so their digest is theirs.
    """
    if source.startswith(BUILTIN_PREFIX):
        return f"{source}:{environment_fingerprint()}"
    if is_remote(source):
        return None
    path = Path(source).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    if not path.exists():
        return None
    return f"sha256:{_tree_digest(path)}"


def _tree_digest(path: Path) -> str:
    """SHA-256 over a file's bytes, or over a folder's files: relative names and bytes."""
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        digest.update(str(file.relative_to(path) if file != path else file.name).encode())
        digest.update(b"\0")
        with file.open("rb") as stream:
            while chunk := stream.read(_CHUNK):
                digest.update(chunk)
        digest.update(b"\0")
    return digest.hexdigest()
