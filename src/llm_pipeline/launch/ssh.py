"""Per-job SSH for DeepSpeed's own launcher, which reaches the other nodes over ssh.

Keys are made when the job runs and shared through the job's storage folder, never baked into
an image: an image is pulled by many jobs and often public, a job's folder is readable only by
those who can read its outputs. The primary makes two ed25519 pairs there: the user key that
DeepSpeed logs in with, and one host key that every node's sshd presents, so clients can check
host keys instead of trusting whatever answers. Every node then copies them into a private
local folder, because ssh and sshd refuse private keys other users may read and shared storage
(Vertex's /gcs/ mount) does not keep file modes.
"""

from __future__ import annotations

import getpass
import os
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

USER_KEY = "id_ed25519"
HOST_KEY = "ssh_host_ed25519_key"
# Not 22, where a host's own sshd may already listen, and not Vertex's 2222, the port its
# CLUSTER_SPEC gives the primary and so the torch master port.
DEFAULT_SSH_PORT = 2022
# Marks files this module wrote, so an existing ~/.ssh/config of someone else is never replaced.
_MARK = "# Written by llm-pipeline for one training job; its keys were made when the job ran."


@dataclass(frozen=True)
class SshFiles:
    """Where one node's ssh setup lives, all inside one private local folder."""

    folder: Path
    identity_file: Path
    authorized_keys: Path
    host_key: Path
    known_hosts: Path
    sshd_config: Path
    client_config: Path


def generate_job_keys(shared_dir: str | Path, *, comment: str = "llm-pipeline-job") -> None:
    """Make the job's user and host key pairs in the job's storage folder (the primary only).

    The user public key is written last, so its presence means the set is complete: other
    nodes wait for `job_keys_ready` before `prepare_node`.
    """
    shared = Path(shared_dir)
    shared.mkdir(parents=True, exist_ok=True)
    existing = [n for n in _key_files() if (shared / n).exists()]
    if existing:
        raise FileExistsError(f"{shared}: already holds {existing}; each job makes its own keys")
    with tempfile.TemporaryDirectory() as tmp:
        for name in (HOST_KEY, USER_KEY):
            _keygen(Path(tmp) / name, comment=comment)
        for name in _key_files():
            mode = 0o644 if name.endswith(".pub") else 0o600
            _write(shared / name, (Path(tmp) / name).read_bytes(), mode, exclusive=True)


def job_keys_ready(shared_dir: str | Path) -> bool:
    """Whether the primary has finished writing the job's keys."""
    return (Path(shared_dir) / f"{USER_KEY}.pub").is_file()


def prepare_node(
    shared_dir: str | Path,
    local_dir: str | Path,
    *,
    hosts: Sequence[str],
    port: int = DEFAULT_SSH_PORT,
    user: str | None = None,
    client_config: str | Path | None = None,
) -> SshFiles:
    """Install the job's keys on this node and write its sshd and ssh client configs.

    `local_dir` becomes mode 0700; with sshd's StrictModes its parents must not be group or
    world writable either (a folder under the user's home, not /tmp). `client_config` is where
    ssh looks, `~/.ssh/config` on the cluster: DeepSpeed's launcher runs plain `ssh` and
    `pdsh`, which read no other file. A file there that this module did not write is refused.
    """
    if not hosts:
        raise ValueError("hosts: need every node's hostname, got none")
    if not 1 <= port <= 65535:
        raise ValueError(f"port: must be a TCP port (1-65535), got {port}")
    if not job_keys_ready(shared_dir):
        raise FileNotFoundError(f"{shared_dir}: the job's ssh keys are not there (yet)")
    shared, folder = Path(shared_dir), Path(local_dir)
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    user = user or getpass.getuser()
    files = SshFiles(
        folder=folder,
        identity_file=folder / USER_KEY,
        authorized_keys=folder / "authorized_keys",
        host_key=folder / HOST_KEY,
        known_hosts=folder / "known_hosts",
        sshd_config=folder / "sshd_config",
        client_config=Path(client_config) if client_config else folder / "ssh_config",
    )
    _write(files.identity_file, (shared / USER_KEY).read_bytes(), 0o600)
    _write(files.host_key, (shared / HOST_KEY).read_bytes(), 0o600)
    user_pub = (shared / f"{USER_KEY}.pub").read_text().strip()
    host_pub = (shared / f"{HOST_KEY}.pub").read_text().strip()
    _write(files.authorized_keys, f"{user_pub}\n".encode(), 0o600)
    known = ",".join(f"[{host}]:{port}" for host in hosts)
    _write(files.known_hosts, f"{known} {host_pub}\n".encode(), 0o644)
    _write(files.sshd_config, sshd_config_text(files, port=port, user=user).encode(), 0o644)
    _refuse_foreign(files.client_config)
    files.client_config.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    client = ssh_client_config_text(files, hosts=hosts, port=port, user=user)
    _write(files.client_config, client.encode(), 0o600)
    return files


def sshd_config_text(files: SshFiles, *, port: int, user: str) -> str:
    """An sshd that accepts only the job's key, for one user, on one port."""
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
            "PrintMotd no",
            "",
        ]
    )


def ssh_client_config_text(files: SshFiles, *, hosts: Sequence[str], port: int, user: str) -> str:
    """ssh settings for the job's hosts only: its key, its port, its pinned host key."""
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


def _key_files() -> tuple[str, ...]:
    # Order matters to generate_job_keys: the user public key last.
    return (HOST_KEY, f"{HOST_KEY}.pub", USER_KEY, f"{USER_KEY}.pub")


def _keygen(path: Path, *, comment: str) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )


def _refuse_foreign(path: Path) -> None:
    if path.exists() and not path.read_text().startswith(_MARK):
        raise FileExistsError(
            f"{path}: exists and was not written by llm-pipeline; not replacing it"
        )


def _write(path: Path, data: bytes, mode: int, *, exclusive: bool = False) -> None:
    """Write with `mode` from the first byte, so a private key is never briefly readable."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
    with os.fdopen(os.open(path, flags, mode), "wb") as out:
        if not exclusive:
            # O_TRUNC keeps an existing file's mode; set it. (Exclusive files are new, and
            # shared storage such as gcsfuse may refuse chmod.)
            os.fchmod(out.fileno(), mode)
        out.write(data)
