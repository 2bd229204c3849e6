"""A node's private folder: what the ranks DeepSpeed's launcher starts on a node read from
that node itself, never from the folder all nodes share nor from the launcher's argv.

DeepSpeed's launcher runs on the primary and starts every node's ranks over ssh with one
command line, which its pdsh runner also logs. So a rank reads two things from a folder its
own node wrote, private to the job's user (0700, on local disk):
- the run's spec (`SPEC_FILE`), written by the node from its own copy of the config: every
  replica of a Vertex job runs the same command, so a bucket's writer cannot change what runs;
- secrets (`SECRETS_FILE`, 0600): HF_TOKEN and the like, from the node's own environment, so
  they appear in no command line, no log, no `.deepspeed_env` and no shared folder.
The node's own sshd tells its sessions where the folder is (`NODE_DIR_ENV`, by SetEnv).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from pathlib import Path

NODE_DIR_ENV = "LLM_PIPELINE_NODE_DIR"
SPEC_FILE = "spec.json"
SECRETS_FILE = "secrets.json"
# A variable holding one of these words, between underscores, is a secret: HF_TOKEN,
# HUGGING_FACE_HUB_TOKEN, WANDB_API_KEY, AWS_SECRET_ACCESS_KEY, MLFLOW_TRACKING_PASSWORD.
_SECRET_WORDS = frozenset({"TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIALS"})


def is_secret(name: str) -> bool:
    """Whether the variable `name` holds a secret, by its name."""
    return not _SECRET_WORDS.isdisjoint(name.upper().split("_"))


@contextmanager
def private_node_folder(root: str | Path, *, prefix: str) -> Iterator[Path]:
    """A new folder under `root` that only this user can enter (0700), removed on exit
    however the block ends."""
    base = Path(root)
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def write_secrets(folder: Path, env: Mapping[str, str]) -> list[str]:
    """Write the secrets in `env` to `folder`/SECRETS_FILE (0600); their names."""
    secrets = {name: value for name, value in sorted(env.items()) if is_secret(name)}
    path = folder / SECRETS_FILE
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        json.dump(secrets, out)
    return list(secrets)


def node_file(name: str, env: Mapping[str, str] | None = None) -> Path:
    """`name` in this node's private folder (NODE_DIR_ENV in `env`, the process's
    environment by default, read when called), refused unless the folder and the file
    belong to this user and nobody else may write them (or, for the folder, enter)."""
    folder = (os.environ if env is None else env).get(NODE_DIR_ENV)
    if not folder:
        raise RuntimeError(
            f"{NODE_DIR_ENV} is not set: this process was not started through the node's own "
            "sshd by the DeepSpeed multi-node launcher"
        )
    path = Path(folder) / name
    _check_private(Path(folder), allowed=0o700)
    _check_private(path, allowed=0o644 if name == SPEC_FILE else 0o600)
    return path


def load_node_secrets(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Put this node's secrets into `environ` (the process's environment by default; a rank
    started over ssh has none); their names, which one line reports. Nothing to do outside
    the DeepSpeed multi-node launch."""
    if environ is None:
        environ = os.environ
    if NODE_DIR_ENV not in environ:
        return []
    secrets = json.loads(node_file(SECRETS_FILE, environ).read_text(encoding="utf-8"))
    environ.update(secrets)
    if secrets:
        print(f"secrets from this node: {', '.join(sorted(secrets))}", file=sys.stderr)
    return sorted(secrets)


def _check_private(path: Path, *, allowed: int) -> None:
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        raise PermissionError(f"{path}: a symbolic link; the node's own files are not links")
    if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & ~allowed:
        raise PermissionError(
            f"{path}: must belong to this user with mode {allowed:o} at most (owner "
            f"{info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}); not this node's private file"
        )
