"""Per-job SSH for DeepSpeed's own launcher, which reaches the other nodes over ssh.

Every node makes its own keys when the job runs, in a private folder on its own disk, and no
private key ever leaves the node that made it. Shared storage is no place for one: Vertex's
/gcs/ mount keeps no file modes, so whoever can read the bucket could read it. Only public
keys cross the nodes' shared folder (`exchange`): the primary's user key, which every node
authorizes, and each node's host key, which the primary pins so that its ssh checks every
host instead of trusting whatever answers. A public key read from that folder is checked to
be one bare ed25519 key (`public_key`): a line with `command=` options or a second line
would otherwise go into authorized_keys as written.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from llm_pipeline.errors import TrainError

USER_KEY = "id_ed25519"
HOST_KEY = "ssh_host_ed25519_key"
# Not 22, where a host's own sshd may already listen, and not Vertex's 2222, the port its
# CLUSTER_SPEC gives the primary and so the torch master port.
DEFAULT_SSH_PORT = 2022
# Marks files this module wrote, so an existing ~/.ssh/config of someone else is never replaced.
_MARK = "# Written by llm-pipeline for one training job; its keys were made when the job ran."
# An ed25519 public key: its type, then 51 bytes (type name and 32-byte key) in base64.
_ED25519 = re.compile(r"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI[A-Za-z0-9+/]{43}")


@dataclass(frozen=True)
class SshFiles:
    """Where one node's ssh setup lives: one private local folder, and the client config
    (`~/.ssh/config` on a cluster) on the node that runs ssh."""

    folder: Path
    identity_file: Path
    authorized_keys: Path
    host_key: Path
    known_hosts: Path
    sshd_config: Path
    client_config: Path


def node_files(folder: str | Path, *, client_config: str | Path | None = None) -> SshFiles:
    """The ssh files of the node whose private folder is `folder` (made 0700 here).

    With sshd's StrictModes the folder's parents must not be group or world writable either
    (a folder under the user's home, not /tmp). `client_config` is where ssh looks,
    `~/.ssh/config` on the cluster: DeepSpeed's launcher runs plain `ssh` and `pdsh`, which
    read no other file.
    """
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)
    return SshFiles(
        folder=root,
        identity_file=root / USER_KEY,
        authorized_keys=root / "authorized_keys",
        host_key=root / HOST_KEY,
        known_hosts=root / "known_hosts",
        sshd_config=root / "sshd_config",
        client_config=Path(client_config) if client_config else root / "ssh_config",
    )


def make_key(path: Path, *, comment: str = "llm-pipeline-job") -> str:
    """Make an ed25519 pair at `path` (private, 0600) and `path`.pub; the public key's line.

    Refuses to overwrite: a key is made once, on the node that uses it."""
    if path.exists():
        raise FileExistsError(f"{path}: already exists; each node makes its own keys once")
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return public_key(path.with_name(path.name + ".pub").read_text(), what=str(path))


def public_key(text: object, *, what: str) -> str:
    """`text` as one bare ed25519 public key (`ssh-ed25519 AAAA...`, any comment dropped);
    ValueError naming `what` for anything else."""
    parts = text.split() if isinstance(text, str) and "\n" not in text.strip() else []
    key = " ".join(parts[:2])
    if not _ED25519.fullmatch(key):
        raise ValueError(f"{what}: not one ed25519 public key, got {str(text)[:80]!r}")
    return key


def authorize(files: SshFiles, user_key: str) -> None:
    """Let the holder of `user_key` (the primary's user key) log in, and nobody else."""
    key = public_key(user_key, what="the job's user key")
    _write(files.authorized_keys, f"{key}\n".encode(), 0o600)


def trust_hosts(files: SshFiles, host_keys: Mapping[str, str], *, port: int) -> None:
    """Pin each host's key: ssh then refuses a host that presents another one."""
    lines = [
        f"[{host}]:{port} {public_key(key, what=f'host key of {host}')}\n"
        for host, key in host_keys.items()
    ]
    _write(files.known_hosts, "".join(lines).encode(), 0o644)


def write_sshd_config(
    files: SshFiles,
    *,
    port: int = DEFAULT_SSH_PORT,
    user: str | None = None,
    session_env: Mapping[str, str] | None = None,
) -> None:
    """Write an sshd config that takes this node's authorized key only (`sshd_config_text`)."""
    text = sshd_config_text(
        files, port=port, user=user or getpass.getuser(), session_env=session_env or {}
    )
    _write(files.sshd_config, text.encode(), 0o600)


def sshd_config_text(
    files: SshFiles, *, port: int, user: str, session_env: Mapping[str, str]
) -> str:
    """An sshd that accepts only the job's key, for one user, on one port.

    `session_env` is set in every session it starts (sshd's SetEnv): what the node itself,
    not the client, tells the processes started through it.
    """
    _check_port(port)
    settings = [f"{name}={value}" for name, value in sorted(session_env.items())]
    for setting in settings:
        if any(c.isspace() or c in "\"'\\" for c in setting):
            raise ValueError(f"session_env: {setting!r} cannot go into sshd's SetEnv unquoted")
    return "\n".join(
        [
            _MARK,
            f"Port {port}",
            f"HostKey {files.host_key}",
            f"AuthorizedKeysFile {files.authorized_keys}",
            f"PidFile {files.folder / 'sshd.pid'}",
            f"AllowUsers {user}",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "StrictModes yes",
            # Containers rarely carry a PAM setup for sshd; keys alone decide here.
            "UsePAM no",
            "X11Forwarding no",
            "AllowTcpForwarding no",
            "PermitUserEnvironment no",
            "PrintMotd no",
            *([f"SetEnv {' '.join(settings)}"] if settings else []),
            "",
        ]
    )


def write_client_config(
    files: SshFiles, *, hosts: Sequence[str], port: int = DEFAULT_SSH_PORT, user: str | None = None
) -> None:
    """Point ssh at the job's key and pinned host keys for the job's hosts only.

    A client config there that this module did not write is refused, never replaced."""
    if not hosts:
        raise ValueError("hosts: need every node's hostname, got none")
    _refuse_foreign(files.client_config)
    files.client_config.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    text = ssh_client_config_text(files, hosts=hosts, port=port, user=user or getpass.getuser())
    _write(files.client_config, text.encode(), 0o600)


def remove_client_config(files: SshFiles) -> None:
    """Remove the client config if this module wrote it: its key is gone with the job."""
    if files.client_config.is_file() and _ours(files.client_config):
        files.client_config.unlink()


def ssh_client_config_text(files: SshFiles, *, hosts: Sequence[str], port: int, user: str) -> str:
    """ssh settings for the job's hosts only: its key, its port, its pinned host keys."""
    _check_port(port)
    return "\n".join(
        [
            _MARK,
            f"Host {' '.join(hosts)}",
            f"    Port {port}",
            f"    User {user}",
            f"    IdentityFile {files.identity_file}",
            "    IdentitiesOnly yes",
            f"    UserKnownHostsFile {files.known_hosts}",
            "    StrictHostKeyChecking yes",
            "    BatchMode yes",
            "",
        ]
    )


def sshd_command(config: str | Path, *, sshd: str = "/usr/sbin/sshd") -> list[str]:
    """The argv that starts sshd in the foreground, logging to stderr.

    Foreground so the caller holds its process and can stop it when training ends; sshd needs
    its absolute path to re-execute itself, and Debian's build also needs /run/sshd to exist.
    """
    if not os.path.isabs(sshd):
        raise ValueError(f"sshd: must be an absolute path (sshd re-executes itself), got {sshd!r}")
    return [sshd, "-D", "-e", "-f", str(config)]


def wait_listening(process: subprocess.Popen[bytes], port: int, *, timeout_s: float) -> None:
    """Return once `process` (an sshd started by `sshd_command`) accepts connections on
    `port`; a `TrainError` if it exits first or `timeout_s` passes.

    Why: sshd binds its port a moment after it starts, and a node says its sshd is up as soon
    as this returns (`ack-<node>.json`): the launcher's first ssh came in before the bind once
    in CI and was refused.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        code = process.poll()
        if code is not None:
            raise TrainError(
                f"sshd exited with code {code} before it listened on port {port}; its own "
                "message is above in this step's log"
            )
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        if time.monotonic() > deadline:
            raise TrainError(f"sshd did not listen on port {port} within {timeout_s:.0f} s")
        time.sleep(0.05)


def _check_port(port: int) -> None:
    if not 1 <= port <= 65535:
        raise ValueError(f"port: must be a TCP port (1-65535), got {port}")


def _ours(path: Path) -> bool:
    return path.read_text().startswith(_MARK)


def _refuse_foreign(path: Path) -> None:
    if path.exists() and not _ours(path):
        raise FileExistsError(
            f"{path}: exists and was not written by llm-pipeline; not replacing it"
        )


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write with `mode` from the first byte, so a private file is never briefly readable."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as out:
        os.fchmod(out.fileno(), mode)  # O_TRUNC keeps an existing file's mode
        out.write(data)
