"""Per-job SSH: real keys from ssh-keygen, file modes, config texts; ssh itself reads the config.

sshd is not started here (the test machine has none, and it would need root); the config it
would read is compared whole instead.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from llm_pipeline.launch.ssh import (
    SshFiles,
    generate_job_keys,
    job_keys_ready,
    prepare_node,
    ssh_client_config_text,
    sshd_command,
    sshd_config_text,
)

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs OpenSSH")

HOSTS = ("primary-0", "workers-0")
MARK = "# Written by llm-pipeline for one training job; its keys were made when the job ran."


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    folder = tmp_path / "job-storage" / "ssh"
    generate_job_keys(folder, comment="job-123")
    return folder


def test_job_keys_are_made_once_with_private_modes(shared: Path):
    assert job_keys_ready(shared)
    assert {p.name: mode(p) for p in shared.iterdir()} == {
        "id_ed25519": 0o600,
        "id_ed25519.pub": 0o644,
        "ssh_host_ed25519_key": 0o600,
        "ssh_host_ed25519_key.pub": 0o644,
    }
    user_pub = (shared / "id_ed25519.pub").read_text().split()
    host_pub = (shared / "ssh_host_ed25519_key.pub").read_text().split()
    assert (user_pub[0], user_pub[2], host_pub[0]) == ("ssh-ed25519", "job-123", "ssh-ed25519")
    assert user_pub[1] != host_pub[1]
    with pytest.raises(FileExistsError, match="each job makes its own keys"):
        generate_job_keys(shared)


def test_keys_not_ready_before_the_primary_made_them(tmp_path: Path):
    assert not job_keys_ready(tmp_path)
    with pytest.raises(FileNotFoundError, match="the job's ssh keys are not there"):
        prepare_node(tmp_path, tmp_path / "local", hosts=HOSTS)


def test_prepare_node_installs_keys_privately(shared: Path, tmp_path: Path):
    local = tmp_path / "home" / ".llm-pipeline-ssh"
    files = prepare_node(shared, local, hosts=HOSTS, port=2022, user="root")
    assert files == SshFiles(
        folder=local,
        identity_file=local / "id_ed25519",
        authorized_keys=local / "authorized_keys",
        host_key=local / "ssh_host_ed25519_key",
        known_hosts=local / "known_hosts",
        sshd_config=local / "sshd_config",
        client_config=local / "ssh_config",
    )
    assert mode(local) == 0o700
    assert {p.name: mode(p) for p in local.iterdir()} == {
        "id_ed25519": 0o600,
        "authorized_keys": 0o600,
        "ssh_host_ed25519_key": 0o600,
        "known_hosts": 0o644,
        "sshd_config": 0o644,
        "ssh_config": 0o600,
    }
    user_pub = (shared / "id_ed25519.pub").read_text().strip()
    host_pub = (shared / "ssh_host_ed25519_key.pub").read_text().strip()
    assert files.authorized_keys.read_text() == f"{user_pub}\n"
    assert files.known_hosts.read_text() == f"[primary-0]:2022,[workers-0]:2022 {host_pub}\n"
    # The installed private key is the one authorized everywhere.
    derived = subprocess.run(
        ["ssh-keygen", "-y", "-f", str(files.identity_file)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()[:2]
    assert derived == user_pub.split()[:2]


def test_prepare_node_again_restores_modes(shared: Path, tmp_path: Path):
    local = tmp_path / "local"
    files = prepare_node(shared, local, hosts=HOSTS, user="root")
    files.identity_file.chmod(0o644)
    prepare_node(shared, local, hosts=HOSTS, user="root")
    assert mode(files.identity_file) == 0o600


def test_sshd_config_text(tmp_path: Path):
    files = _files(tmp_path)
    assert sshd_config_text(files, port=2022, user="root") == (
        f"{MARK}\n"
        "Port 2022\n"
        f"HostKey {tmp_path}/ssh_host_ed25519_key\n"
        f"AuthorizedKeysFile {tmp_path}/authorized_keys\n"
        f"PidFile {tmp_path}/sshd.pid\n"
        "AllowUsers root\n"
        "PubkeyAuthentication yes\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\n"
        "StrictModes yes\n"
        "UsePAM no\n"
        "X11Forwarding no\n"
        "AllowTcpForwarding no\n"
        "PrintMotd no\n"
    )


def test_client_config_text(tmp_path: Path):
    files = _files(tmp_path)
    assert ssh_client_config_text(files, hosts=HOSTS, port=2022, user="root") == (
        f"{MARK}\n"
        "Host primary-0 workers-0\n"
        "    Port 2022\n"
        "    User root\n"
        f"    IdentityFile {tmp_path}/id_ed25519\n"
        "    IdentitiesOnly yes\n"
        f"    UserKnownHostsFile {tmp_path}/known_hosts\n"
        "    StrictHostKeyChecking yes\n"
        "    BatchMode yes\n"
    )


def test_ssh_reads_the_client_config_for_job_hosts_only(shared: Path, tmp_path: Path):
    files = prepare_node(shared, tmp_path / "local", hosts=HOSTS, port=2022, user="root")

    def effective(host: str) -> dict[str, str]:
        out = subprocess.run(
            ["ssh", "-G", "-F", str(files.client_config), host],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        wanted = ("port", "user", "identityfile", "stricthostkeychecking", "batchmode")
        settings = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
        return {key: settings[key] for key in wanted}

    assert effective("workers-0") == {
        "port": "2022",
        "user": "root",
        "identityfile": str(files.identity_file),
        "stricthostkeychecking": "true",
        "batchmode": "yes",
    }
    assert effective("elsewhere.example.com")["port"] == "22"


def test_a_foreign_client_config_is_not_replaced(shared: Path, tmp_path: Path):
    theirs = tmp_path / "dot-ssh" / "config"
    theirs.parent.mkdir()
    theirs.write_text("Host github.com\n    User git\n")
    with pytest.raises(FileExistsError, match="was not written by llm-pipeline"):
        prepare_node(shared, tmp_path / "local", hosts=HOSTS, client_config=theirs)
    assert theirs.read_text() == "Host github.com\n    User git\n"
    ours = tmp_path / "dot-ssh" / "ours"
    prepare_node(shared, tmp_path / "local", hosts=HOSTS, client_config=ours, user="root")
    prepare_node(shared, tmp_path / "local", hosts=HOSTS, client_config=ours, user="root")
    assert ours.read_text().startswith(MARK)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"hosts": ()}, ValueError, "hosts: need every node's hostname"),
        ({"hosts": HOSTS, "port": 0}, ValueError, "port: must be a TCP port"),
    ],
)
def test_prepare_node_refuses(shared: Path, tmp_path: Path, kwargs, error, message):
    with pytest.raises(error, match=message):
        prepare_node(shared, tmp_path / "local", **kwargs)


def test_sshd_command(tmp_path: Path):
    config = tmp_path / "sshd_config"
    assert sshd_command(config) == ["/usr/sbin/sshd", "-D", "-e", "-f", str(config)]
    with pytest.raises(ValueError, match="sshd: must be an absolute path"):
        sshd_command(config, sshd="sshd")


def _files(folder: Path) -> SshFiles:
    return SshFiles(
        folder=folder,
        identity_file=folder / "id_ed25519",
        authorized_keys=folder / "authorized_keys",
        host_key=folder / "ssh_host_ed25519_key",
        known_hosts=folder / "known_hosts",
        sshd_config=folder / "sshd_config",
        client_config=folder / "ssh_config",
    )
