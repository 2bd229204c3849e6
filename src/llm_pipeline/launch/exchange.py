"""What the nodes of a DeepSpeed-launched job tell each other through a folder they all mount.

The folder (under the checkpoint root: Vertex's /gcs/ mount) can be read and written by
whoever can read and write the bucket, so nothing secret goes in and nothing read from it is
trusted beyond what it can prove: public keys are checked to be keys (`ssh.public_key`), a
worker takes one nonce per job, and only one that echoes the challenge it made itself, so a
`ready.json` left by an earlier attempt (or written before the worker started) is never
taken. The files, each written by one node:

- `hello-<node>.json` (every other node): a fresh random challenge and the node's host key;
- `ready.json` (the primary): the job's nonce, the primary's user key (the one key every
  node authorizes) and each node's challenge, echoed;
- `ack-<node>.json`: the nonce the node took, and so serves ssh for;
- `done.json` (the primary): the nonce, the launcher's exit code and the challenges it saw.

Each node removes what it wrote when it ends, and the primary removes the folder; whatever a
killed attempt left is removed by the next one's primary before it writes anything.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

from llm_pipeline.storage import is_remote, to_uri, write_atomic

READY = "ready.json"
DONE = "done.json"
_TOKEN = re.compile(r"[0-9a-f]{32}")


def hello_name(node: int) -> str:
    return f"hello-{node}.json"


def ack_name(node: int) -> str:
    return f"ack-{node}.json"


def exchange_folder(checkpoint_root: str, *, job: str) -> Path:
    """A folder every node sees as a local path: `ssh-<job>` under the checkpoint root.

    ValueError for a root the nodes do not all mount (a gs:// root is used through /gcs/).
    """
    root = checkpoint_root
    if is_remote(root):
        if not (root.startswith("gs://") and Path("/gcs").is_dir()):
            raise ValueError(
                f"the nodes exchange ssh public keys through the checkpoint folder, which must "
                f"be a path every node mounts; {root!r} is not (on Vertex, gs:// folders are "
                "mounted under /gcs/)"
            )
        root = "/gcs/" + root[len("gs://") :]
    return Path(to_uri(root)) / f"ssh-{job}"


def write(folder: Path, name: str, payload: dict[str, Any]) -> None:
    """Write one message whole (a reader never sees half of it)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / name, json.dumps(payload))


def read(folder: Path, name: str) -> dict[str, Any]:
    """One message, or {} while it is missing or not (yet) a JSON object."""
    try:
        value = json.loads((folder / name).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def token(value: object) -> str | None:
    """`value` if it is a nonce or challenge as this module makes them (32 hex digits)."""
    return value if isinstance(value, str) and _TOKEN.fullmatch(value) else None


def remove(folder: Path, *names: str) -> None:
    """Remove this node's messages; then the folder too if nothing else is left in it."""
    for name in names:
        (folder / name).unlink(missing_ok=True)
    # Not empty (another node's files are still there), or gone already: left as it is.
    with contextlib.suppress(OSError):
        folder.rmdir()


def clear(folder: Path) -> None:
    """Remove the folder and everything in it (the primary, at its start and at its end)."""
    shutil.rmtree(folder, ignore_errors=True)


def leftovers(folder: Path) -> list[str]:
    """The other nodes' messages still in the folder: a node that is still up."""
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(("hello-", "ack-")))
